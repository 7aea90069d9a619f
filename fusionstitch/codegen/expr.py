"""Index expressions: small integer expression trees shared by every code generator.

An index expression is built from the loop variables of a kernel (`x`: the
output point a lane computes, `r`: the position inside a reduction), integer
constants, size parameters (`Sym`: a size or stride passed at run time, so one
compiled kernel serves every batch size) and loaded index values (`Value`: an
int64 variable of the kernel body, for gathers and embeddings).

Expressions are immutable and hashable; constructors fold the trivial cases
(`e*1`, `e+0`, `0//s`, ...) and `Digit` remembers where an unravelled index
came from so that ravelling it again gives the original expression back
(the rule that lets a reduction's result be read "at the same row").
"""
from __future__ import annotations

from dataclasses import dataclass


class Expr:
    __slots__ = ()

    def __add__(self, other) -> "Expr":
        return add(self, lift(other))

    def __mul__(self, other) -> "Expr":
        return mul(self, lift(other))

    def __floordiv__(self, other) -> "Expr":
        return floordiv(self, lift(other))

    def __mod__(self, other) -> "Expr":
        return mod(self, lift(other))


@dataclass(frozen=True)
class Var(Expr):
    name: str            # "x" or "r"


@dataclass(frozen=True)
class Const(Expr):
    value: int


@dataclass(frozen=True)
class Sym(Expr):
    """A run-time integer parameter of the kernel (a size or a stride)."""
    name: str
    value: int           # the value at lowering time (for folding decisions only)


@dataclass(frozen=True)
class Value(Expr):
    """An integer variable of the kernel body used as an index (gather, embedding)."""
    var: str


@dataclass(frozen=True)
class Add(Expr):
    terms: tuple[Expr, ...]


@dataclass(frozen=True)
class Mul(Expr):
    factors: tuple[Expr, ...]


@dataclass(frozen=True)
class FloorDiv(Expr):
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Mod(Expr):
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Digit(Expr):
    """Digit k of `base` unravelled over `sizes` (row-major): (base // inner) % sizes[k]."""
    base: Expr
    sizes: tuple[Expr, ...]
    k: int

    def expand(self) -> Expr:
        inner = product(self.sizes[self.k + 1:])
        q = floordiv(self.base, inner)
        return q if self.k == 0 else mod(q, self.sizes[self.k])


ZERO, ONE = Const(0), Const(1)


def lift(v) -> Expr:
    return v if isinstance(v, Expr) else Const(int(v))


def add(*terms: Expr) -> Expr:
    flat: list[Expr] = []
    const = 0
    for t in terms:
        parts = t.terms if isinstance(t, Add) else (t,)
        for p in parts:
            if isinstance(p, Const):
                const += p.value
            else:
                flat.append(p)
    if const:
        flat.append(Const(const))
    if not flat:
        return ZERO
    return flat[0] if len(flat) == 1 else Add(tuple(flat))


def mul(*factors: Expr) -> Expr:
    flat: list[Expr] = []
    const = 1
    for f in factors:
        parts = f.factors if isinstance(f, Mul) else (f,)
        for p in parts:
            if isinstance(p, Const):
                const *= p.value
            else:
                flat.append(p)
    if const == 0:
        return ZERO
    if const != 1:
        flat.insert(0, Const(const))
    if not flat:
        return ONE
    return flat[0] if len(flat) == 1 else Mul(tuple(flat))


def floordiv(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Const) and b.value == 1:
        return a
    if isinstance(a, Const) and a.value == 0:
        return ZERO
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value // b.value)
    return FloorDiv(a, b)


def mod(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Const) and b.value == 1:
        return ZERO
    if isinstance(a, Const) and a.value == 0:
        return ZERO
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value % b.value)
    return Mod(a, b)


def product(sizes) -> Expr:
    return mul(*sizes) if sizes else ONE


def rewrite(e: Expr, replace) -> Expr:
    """`e` with each sub-expression for which `replace` gives an Expr (not None) replaced
    by it, outermost first (a replacement is not rewritten again); the nodes around
    rebuilt through the simplifying constructors (`add`, `mul`, `floordiv`, `mod`)."""
    r = replace(e)
    if r is not None:
        return r
    if isinstance(e, Add):
        return add(*(rewrite(t, replace) for t in e.terms))
    if isinstance(e, Mul):
        return mul(*(rewrite(t, replace) for t in e.factors))
    if isinstance(e, FloorDiv):
        return floordiv(rewrite(e.a, replace), rewrite(e.b, replace))
    if isinstance(e, Mod):
        return mod(rewrite(e.a, replace), rewrite(e.b, replace))
    if isinstance(e, Digit):
        return Digit(rewrite(e.base, replace), tuple(rewrite(z, replace) for z in e.sizes),
                     e.k)
    return e


def evaluate(e: Expr, sym_value) -> int | None:
    """The integer value of a size/stride expression: constants, syms (`sym_value(sym)`,
    None when unknown), sums, products, floor divisions and remainders; None where a part
    is unknown, a loop variable or a loaded value, or a divisor is zero."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Sym):
        return sym_value(e)
    if isinstance(e, (Add, Mul)):
        parts = [evaluate(t, sym_value) for t in (e.terms if isinstance(e, Add) else e.factors)]
        if any(p is None for p in parts):
            return None
        total = 0 if isinstance(e, Add) else 1
        for p in parts:
            total = total + p if isinstance(e, Add) else total * p
        return total
    if isinstance(e, (FloorDiv, Mod)):
        a, b = evaluate(e.a, sym_value), evaluate(e.b, sym_value)
        if a is None or not b:
            return None
        return a // b if isinstance(e, FloorDiv) else a % b
    return None


def unravel(base: Expr, sizes: tuple[Expr, ...]) -> tuple[Expr, ...]:
    """Row-major multi-index of a linear index; size-1 dims give 0."""
    out = []
    for k, s in enumerate(sizes):
        if isinstance(s, Const) and s.value == 1:
            out.append(ZERO)
        elif len(sizes) == 1:
            out.append(base)
        else:
            out.append(Digit(base, tuple(sizes), k))
    return tuple(out)


def ravel(index: tuple[Expr, ...], sizes: tuple[Expr, ...]) -> Expr:
    """Linear row-major index; gives `base` back for a complete `unravel(base, sizes)`."""
    digits = [e for e in index if isinstance(e, Digit)]
    if digits and len({(d.base, d.sizes) for d in digits}) == 1:
        d0 = digits[0]
        if _same_sizes(d0.sizes, sizes) and all(
                (isinstance(e, Digit) and e.k == k) or
                (isinstance(e, Const) and e.value == 0 and _is_unit(sizes[k]))
                for k, e in enumerate(index)):
            return d0.base
    terms = []
    for k, e in enumerate(index):
        terms.append(mul(e, product(sizes[k + 1:])))
    return add(*terms)


def _is_unit(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 1


def _same_sizes(a, b) -> bool:
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def children(e: Expr) -> tuple[Expr, ...]:
    """The sub-expressions of `e` (none for leaves)."""
    if isinstance(e, Add):
        return e.terms
    if isinstance(e, Mul):
        return e.factors
    if isinstance(e, (FloorDiv, Mod)):
        return (e.a, e.b)
    if isinstance(e, Digit):
        return (e.base,) + e.sizes
    if isinstance(e, (Var, Value, Const, Sym)):
        return ()
    raise TypeError(e)


def _leaves(e: Expr):
    if isinstance(e, (Var, Value, Const, Sym)):
        yield e
    for c in children(e):
        yield from _leaves(c)


def free_vars(e: Expr) -> set[str]:
    """Loop variables and index values an expression reads."""
    return {leaf.name if isinstance(leaf, Var) else leaf.var for leaf in _leaves(e)
            if isinstance(leaf, (Var, Value))}


def syms(e: Expr) -> set[Sym]:
    return {leaf for leaf in _leaves(e) if isinstance(leaf, Sym)}


def to_source(e: Expr, floordiv_op: str = "//", names: dict[str, str] | None = None) -> str:
    """Source text of an expression; `floordiv_op` is `//` (Python, Triton) or `/` (C).

    Operands are never negative, so C's truncating division agrees with floor division.
    `names` renames loop variables (e.g. {"x": "x_idx"}).
    """
    names = names or {}

    def go(e: Expr) -> str:
        if isinstance(e, Var):
            return names.get(e.name, e.name)
        if isinstance(e, Value):
            return e.var
        if isinstance(e, Const):
            if type(e.value) not in (int, bool):
                # a symbolic size (ir.symbolic.Dim) in a constant prints its expression in
                # Python's syntax: a lowering must make it a sym (Lowerer.num)
                raise TypeError(f"constant {e.value!r} of type {type(e.value).__name__} in an "
                                "index expression: a symbolic value needs a sym")
            return str(e.value) if e.value >= 0 else f"({e.value})"
        if isinstance(e, Sym):
            return e.name
        if isinstance(e, Add):
            return "(" + " + ".join(go(t) for t in e.terms) + ")"
        if isinstance(e, Mul):
            return "(" + " * ".join(go(f) for f in e.factors) + ")"
        if isinstance(e, FloorDiv):
            return f"({go(e.a)} {floordiv_op} {go(e.b)})"
        if isinstance(e, Mod):
            return f"({go(e.a)} % {go(e.b)})"
        if isinstance(e, Digit):
            return go(e.expand())
        raise TypeError(e)

    s = go(e)
    return s[1:-1] if s.startswith("(") and _balanced(s[1:-1]) else s


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0
