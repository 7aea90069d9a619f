"""Symbolic sizes: a size of the IR that is an expression of the input sizes.

When Dynamo hands a graph with symbolic sizes (`dynamic=True`, `mark_dynamic`, or
the second shape under automatic dynamic), the frontend builds one IR graph for
every size the symbols may take (frontend/dynamic.py). A dimension of such a graph
is a `Dim`: an `int` whose value is the size's *hint* (the example input's value)
and which carries the sympy expression Dynamo gave it (`s0`, `64*s0`, `s0*s1`).
Code written for ints runs unchanged on Dims, at the hint; what the expression adds:

- arithmetic between Dims and ints gives Dims (`numel` of `[s0, 64]` is `64*s0`),
  so kernels read each size from its expression at run time (codegen/lower.py) and
  two sizes that are equal at the hint by coincidence stay two sizes;
- a comparison whose answer is not the same for every size the symbols may take
  (each symbol is at least SIZE_MIN, the way Dynamo specialises 0 and 1) gives the
  hint's answer and, inside `recording`, records it as a guard (`64*s0 <= 16384`).
  A compiled program runs only for sizes under which its guards hold; a new size
  that violates one is compiled again (frontend/dynamic.py). A comparison decided
  for every size records nothing (`64*s0 > 0`, `s0*64 == 64*s0`);
- `int(d)` / `float(d)` and bit operations are specialisations: inside `recording`
  they record `expr == hint`.

Where guards are recorded is a choice of the caller: the frontend records while it
translates and canonicalises the graph, lowering records per kernel (its guards
travel with the kernel), and planning and code printing run `suspended` (their
size-dependent choices are profitability only: they take the hint and no guard;
codegen's layout choices are checked at launch, see targets/cpp/printer.py's dense versions
and Triton's per-launch constexprs). A guard set is a plain set of sympy relations.

C-level conversions that bypass `__int__` (`range(d)`, `operator.index`, torch's
size arguments) see the hint without a guard; the frontend, passes and lowering
must not turn a size into a plain int that way (tests/frontend/test_dynamic.py runs
every graph at several sizes against eager).
"""
from __future__ import annotations

import contextlib
import operator
import threading
from typing import Any, Callable, Iterable

import sympy

# The least value of every symbol: Dynamo gives sizes 0 and 1 graphs of their own
# (a guard `s >= 2` on every symbol keeps a program to its range: frontend/dynamic.py).
SIZE_MIN = 2
_INF = float("inf")
_as_int = int.__int__          # a Dim's hint as a plain int, recording nothing


def _floordiv(a, b):
    from torch.utils._sympy.functions import FloorDiv
    if not b.is_number and a.free_symbols:
        # an exact quotient of polynomials (a reduction's rows: numel // row) stays one:
        # FloorDiv(2*s0**2*s1, s0) is 2*s0*s1
        gens = sorted(a.free_symbols | b.free_symbols, key=str)
        try:
            q, r = sympy.div(a, b, *gens)
            exact = r == 0 and all(c.is_integer for c in sympy.Poly(q, *gens).coeffs())
        except (sympy.PolynomialError, TypeError, ValueError):
            exact = False
        if exact:
            return q
    return FloorDiv(a, b)


def _mod(a, b):
    from torch.utils._sympy.functions import PythonMod
    return PythonMod(a, b)


class Dim(int):
    """A size: an int (the hint) with the sympy expression it stands for (`expr`)."""

    def __new__(cls, hint: int, expr: Any):
        obj = int.__new__(cls, _as_int(hint))
        obj.expr = expr
        return obj

    def __reduce__(self):
        return (make, (_as_int(self), self.expr))

    # -- printing (no guard: messages and IR text; the text names the expression)
    def __str__(self) -> str:
        return str(self.expr)

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else format(_as_int(self), spec)

    __hash__ = int.__hash__

    # -- arithmetic with ints stays symbolic (plain hints while `suspended`); with floats
    # it is the hint's (costs)
    def _arith(self, other, fn, sym, reflected=False):
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        value = fn(_as_int(a), _as_int(b))
        st = _stack()
        if st and st[-1] is None:
            return value
        ea, eb = expr_of(a), expr_of(b)
        e = _memo(_ARITH, (sym, ea, eb), lambda: sympy.sympify(sym(ea, eb)))
        return value if e.is_number else Dim(value, e)

    def __add__(self, o):
        return self._arith(o, operator.add, operator.add)

    def __radd__(self, o):
        return self._arith(o, operator.add, operator.add, True)

    def __sub__(self, o):
        return self._arith(o, operator.sub, operator.sub)

    def __rsub__(self, o):
        return self._arith(o, operator.sub, operator.sub, True)

    def __mul__(self, o):
        return self._arith(o, operator.mul, operator.mul)

    def __rmul__(self, o):
        return self._arith(o, operator.mul, operator.mul, True)

    def __floordiv__(self, o):
        return self._arith(o, operator.floordiv, _floordiv)

    def __rfloordiv__(self, o):
        return self._arith(o, operator.floordiv, _floordiv, True)

    def __mod__(self, o):
        return self._arith(o, operator.mod, _mod)

    def __rmod__(self, o):
        return self._arith(o, operator.mod, _mod, True)

    def __divmod__(self, o):
        return self // o, self % o

    def __rdivmod__(self, o):
        return o // self, o % self

    def __pow__(self, o, mod=None):
        if mod is None and type(o) is int and o >= 0:
            return make(_as_int(self) ** o, self.expr ** o)
        return pow(int(self), o, mod)

    def __neg__(self):
        return make(-_as_int(self), -self.expr)

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self >= 0 else -self

    def __trunc__(self):
        return self

    __floor__ = __ceil__ = __trunc__

    def __round__(self, ndigits=None):
        return self

    def __truediv__(self, o):
        return _as_int(self) / (_as_int(o) if isinstance(o, int) else o)

    def __rtruediv__(self, o):
        return (_as_int(o) if isinstance(o, int) else o) / _as_int(self)

    # -- comparisons: decided for every size, or the hint's answer and a guard
    def _cmp(self, other, op: str):
        if isinstance(other, int):
            return decide(op, self, other)
        if isinstance(other, float):
            specialise(self)
            return _OPS[op](_as_int(self), other)
        return NotImplemented

    def __eq__(self, o):
        return self._cmp(o, "eq")

    def __ne__(self, o):
        return self._cmp(o, "ne")

    def __lt__(self, o):
        return self._cmp(o, "lt")

    def __le__(self, o):
        return self._cmp(o, "le")

    def __gt__(self, o):
        return self._cmp(o, "gt")

    def __ge__(self, o):
        return self._cmp(o, "ge")

    def __bool__(self) -> bool:
        return decide("ne", self, 0)

    # -- conversions to a plain number: specialisations
    def __int__(self) -> int:
        specialise(self)
        return _as_int(self)

    __index__ = __int__

    def __float__(self) -> float:
        specialise(self)
        return float(_as_int(self))

    def bit_length(self) -> int:
        return int(self).bit_length()

    def _bits(self, o, fn):
        return fn(int(self), int(o) if isinstance(o, int) else o)

    def __and__(self, o):
        return self._bits(o, operator.and_)

    def __or__(self, o):
        return self._bits(o, operator.or_)

    def __xor__(self, o):
        return self._bits(o, operator.xor)

    def __lshift__(self, o):
        return self._bits(o, operator.lshift)

    def __rshift__(self, o):
        return self._bits(o, operator.rshift)

    def __rand__(self, o):
        return self._bits(o, lambda a, b: b & a)

    def __ror__(self, o):
        return self._bits(o, lambda a, b: b | a)

    def __rxor__(self, o):
        return self._bits(o, lambda a, b: b ^ a)

    def __rlshift__(self, o):
        return self._bits(o, lambda a, b: b << a)

    def __rrshift__(self, o):
        return self._bits(o, lambda a, b: b >> a)

    def __invert__(self):
        return ~int(self)


class FloatDim(float):
    """A float computed from sizes (`n / (n - 1)`, a batch norm's unbiased-variance
    factor): a float (the hint) with its sympy expression (`expr`) and the symbols' hints
    (`hints`, for the hints of its integer parts). Lowering computes it in the kernel from
    the sizes (codegen/lower.py); anything else that reads it as a number specialises it
    (a guard `expr == hint`)."""

    def __new__(cls, hint: float, expr: Any, hints: dict):
        obj = float.__new__(cls, float.__float__(hint))
        obj.expr = expr
        obj.hints = hints
        return obj

    def __reduce__(self):
        return (FloatDim, (float.__float__(self), self.expr, self.hints))

    def __str__(self) -> str:
        return str(self.expr)

    __repr__ = __str__
    __hash__ = float.__hash__

    def _plain(self) -> float:
        record(sympy.Eq(self.expr, sympy.Float(float.__float__(self))))
        return float.__float__(self)

    def __float__(self) -> float:
        return self._plain()

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else format(float.__float__(self), spec)


def _plain_float_method(name: str):
    base = getattr(float, name)

    def method(self, *args):
        return base(self._plain(), *(a._plain() if isinstance(a, FloatDim) else a
                                     for a in args))
    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
              "__rmod__", "__pow__", "__rpow__", "__neg__", "__pos__", "__abs__", "__eq__",
              "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__int__",
              "__trunc__", "__round__", "__floor__", "__ceil__", "is_integer"):
    setattr(FloatDim, _name, _plain_float_method(_name))


# (operation, expr, expr) -> the result's expression: sympy's arithmetic costs ~10 us a call
_ARITH: dict[tuple, Any] = {}
_MEMO_LIMIT = 100_000  # entries; a memo past it starts again (programs are few, sizes many)


def _memo(table: dict, key: tuple, make):
    """`table[key]`, made by `make()` on a miss; the table is emptied when it outgrows
    _MEMO_LIMIT, so long-running processes with many shapes stay bounded."""
    value = table.get(key)
    if value is None:
        if len(table) > _MEMO_LIMIT:
            table.clear()
        value = table[key] = make()
    return value


def product(dims) -> int:
    """The product of `dims` (a shape's numel), symbolic even while `suspended`: the value
    is kept (TensorType.numel), and lowering reads it."""
    value, exprs = 1, []
    for d in dims:
        value *= _as_int(d)
        if isinstance(d, Dim):
            exprs.append(d.expr)
        elif _as_int(d) != 1:
            exprs.append(sympy.Integer(_as_int(d)))
    if not any(isinstance(d, Dim) for d in dims):
        return value
    e = _memo(_ARITH, ("product",) + tuple(exprs), lambda: sympy.Mul(*exprs))
    return value if e.is_number else Dim(value, e)


def make(hint: int, expr) -> int:
    """A Dim of `expr` at `hint`, or the plain int when `expr` is a number."""
    expr = sympy.sympify(expr)
    if expr.is_number:
        return int(expr)
    return Dim(hint, expr)


def is_symbolic(v) -> bool:
    return isinstance(v, (Dim, FloatDim))


def hint(v):
    """`v` with every Dim replaced by its hint (tuples and lists too), recording nothing."""
    if isinstance(v, Dim):
        return _as_int(v)
    if isinstance(v, FloatDim):
        return float.__float__(v)
    if isinstance(v, (tuple, list)):
        return type(v)(hint(x) for x in v)
    return v


def expr_of(v) -> sympy.Expr:
    return v.expr if isinstance(v, Dim) else sympy.Integer(_as_int(v))


def has_symbols(v) -> bool:
    """Whether `v` (a number, or nested tuples/lists of them) holds a Dim or FloatDim."""
    if isinstance(v, (Dim, FloatDim)):
        return True
    if isinstance(v, (tuple, list)):
        return any(has_symbols(x) for x in v)
    return False


# ---------------------------------------------------------------------------
# guards


class Guards(set):
    """Relations (sympy) between the symbols a compiled program relies on."""


_STATE = threading.local()


def _stack() -> list:
    st = getattr(_STATE, "stack", None)
    if st is None:
        st = _STATE.stack = []
    return st


@contextlib.contextmanager
def recording(guards: Guards | None = None):
    """Record the guards of undecided size comparisons made inside into `guards` (and into
    the recorders around it, up to a `suspended` one)."""
    guards = Guards() if guards is None else guards
    st = _stack()
    st.append(guards)
    try:
        yield guards
    finally:
        st.pop()


@contextlib.contextmanager
def suspended():
    """Size comparisons inside take the hint's answer and record nothing, and arithmetic
    on sizes gives plain ints (profitability: planning, code printing). Lowering inside
    (its own `recording`) is symbolic again."""
    st = _stack()
    st.append(None)
    try:
        yield
    finally:
        st.pop()


def record(relation) -> None:
    if relation is sympy.true:
        return
    for guards in reversed(_stack()):
        if guards is None:
            return
        guards.add(relation)


def replay(guards: Iterable) -> None:
    """Record `guards` (a kernel's, from a cache) into the recorders active now."""
    for g in guards:
        record(g)


def specialise(d: Dim) -> None:
    """`d` is used as a plain number: it must keep its hint."""
    record(sympy.Eq(d.expr, _as_int(d)))


_OPS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
        "gt": operator.gt, "ge": operator.ge}
_RELATION = {"eq": sympy.Eq, "ne": sympy.Ne, "lt": sympy.Lt, "le": sympy.Le,
             "gt": sympy.Gt, "ge": sympy.Ge}
_NEGATION = {"eq": "ne", "ne": "eq", "lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}
# (op, expr a, expr b) -> True / False for every size, or None (it depends on them), and
# the relations to record when it holds and when it does not
_DECIDED: dict[tuple, tuple] = {}


def decide(op: str, a: int, b: int) -> bool:
    """`a <op> b` at the hints; when the answer depends on the sizes, the relation that
    holds at the hints is recorded as a guard (while `suspended`: the hints' answer)."""
    result = _OPS[op](_as_int(a), _as_int(b))
    st = _stack()
    if st and st[-1] is None:
        return result
    ea, eb = expr_of(a), expr_of(b)
    entry = _memo(_DECIDED, (op, ea, eb), lambda: _decision(op, ea, eb))
    static = entry[0]
    if static is not None:
        # (they differ only for sizes of two graphs whose symbols share names but not
        # values: a dict of kernels' syms probed across graphs; the hints' answer is an
        # int's, as for concrete sizes)
        return static if static == result else result
    if st:
        record(entry[1] if result else entry[2])
    return result


def _decision(op: str, ea, eb) -> tuple:
    """(True / False for every size or None, the relation when it holds, when not)."""
    static = _static(op, ea - eb)
    if static is not None:
        return (static, None, None)
    return (None, _RELATION[op](ea, eb), _RELATION[_NEGATION[op]](ea, eb))


def _static(op: str, diff) -> bool | None:
    """The answer of `diff <op> 0` for every value of the symbols (each >= SIZE_MIN), or
    None when it depends on them."""
    b = bounds(diff)
    if b is None or b[0] < 0 < b[1]:
        # interval arithmetic forgets that terms share symbols: s0*s1 - s0 is
        # s0*(s1 - 1) >= 2
        factored = sympy.factor_terms(diff)
        if factored != diff:
            b = bounds(factored) or b
    if b is None:
        return None
    lo, hi = b
    if op in ("eq", "ne"):
        if lo == hi == 0:
            return op == "eq"
        if lo > 0 or hi < 0:
            return op == "ne"
        return None
    if op == "lt":
        return True if hi < 0 else False if lo >= 0 else None
    if op == "le":
        return True if hi <= 0 else False if lo > 0 else None
    if op == "gt":
        return True if lo > 0 else False if hi <= 0 else None
    return True if lo >= 0 else False if hi < 0 else None      # ge


def bounds(e) -> tuple | None:
    """(lo, hi) of an integer expression over symbols >= SIZE_MIN (hi may be inf), or None
    where this interval arithmetic does not know the expression."""
    if e.is_Integer:
        v = int(e)
        return v, v
    if e.is_Symbol:
        return SIZE_MIN, _INF
    if e.is_Add:
        lo = hi = 0
        for t in e.args:
            b = bounds(t)
            if b is None:
                return None
            lo, hi = lo + b[0], hi + b[1]
        return lo, hi
    if e.is_Mul:
        lo = hi = 1
        for f in e.args:
            b = bounds(f)
            if b is None:
                return None
            products = [_times(x, y) for x in (lo, hi) for y in b]
            lo, hi = min(products), max(products)
        return lo, hi
    if e.is_Pow and e.exp.is_Integer and int(e.exp) >= 0:
        b = bounds(e.base)
        if b is None or b[0] < 0:
            return None
        n = int(e.exp)
        return b[0] ** n, b[1] ** n
    name = type(e).__name__
    if name in ("FloorDiv", "CleanDiv"):
        a, d = bounds(e.args[0]), bounds(e.args[1])
        if a is None or d is None or a[0] < 0 or d[0] <= 0:
            return None
        return a[0] // d[1] if d[1] != _INF else 0, \
            (a[1] // d[0] if a[1] != _INF else _INF)
    if name in ("PythonMod", "Mod"):
        a, d = bounds(e.args[0]), bounds(e.args[1])
        if a is None or d is None or d[0] <= 0:
            return None
        return 0, d[1] - 1 if d[1] != _INF else _INF
    return None


def _times(x, y):
    if x == 0 or y == 0:
        return 0
    return x * y


# ---------------------------------------------------------------------------
# evaluation at run time


def python_source(e) -> str:
    """Python text of a size expression or relation (`//`, `%`, `and`, `==`)."""
    from torch.utils._sympy.printers import PythonPrinter
    return PythonPrinter().doprint(e)


def compile_values(symbols: list, exprs: list) -> Callable[..., tuple]:
    """A function of the symbols' values (in `symbols`' order) giving the values of
    `exprs` in order (an expression may be a relation: a bool). One Python function, so
    a call costs one frame whatever the number of expressions."""
    names = [str(s) for s in symbols]
    for n in names:
        if not n.isidentifier():
            raise ValueError(f"symbol {n!r} is not an identifier")
    body = ", ".join(f"({python_source(e)})" for e in exprs)
    src = f"lambda {', '.join(names)}: ({body}{',' if len(exprs) == 1 else ''})"
    import math

    import torch       # PythonPrinter spells a float of a size torch.sym_float(s)
    fn = eval(compile(src, "<sizes>", "eval"),  # noqa: S307 - our own size expressions
              {"max": max, "min": min, "torch": torch, "math": math})
    return fn
