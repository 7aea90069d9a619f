"""Index-set splitting of a component along x at the boundaries of a concatenation.

A concatenation (or a pad, a slice_scatter) lowers to a chain of selects: every point
evaluates which piece it falls into (`x >= start_k & x < end_k`), and each piece's value
is read under that mask. When the pieces follow one another along x itself, x's range
splits into intervals on which every such comparison has one value; each interval becomes
a component of its own, with x shifted by the interval's start, where the comparisons
are constants: the selects fold to the piece's own value, the other pieces' loads are
dead, and the piece's index arithmetic (`(x - 256) / 32`) is its own again (`x / 32`:
the C++ printer then reads it as dense rows). A column sum over the concatenation of
three per-head gradients (GPT-2's QKV bias gradient) evaluated all three pieces' masked
loads, with a division and a remainder per element of each: 6x Inductor's time, whose
kernels write each piece with a dense loop of its own.

x's points are independent in a flat or reduce component (each x computes its own loops
over r and stores only at its own points), so running them in several components is
the same computation, in the same order per x: results are bitwise the same.

Only where it pays and stays small: x's extent and every boundary are sizes known when
the kernel is built (constants, or syms bound to a constant); at most MAX_PIECES
intervals (MAX_MANY_PIECES where the pieces' code stays within twice the component's),
none narrower than MIN_PIECE (a pad of one element on each side would give
one-column components, each a pass over every row); and something reads under the
comparisons (a load's or store's mask, a select), not just compares.
"""
from __future__ import annotations

from dataclasses import replace

from . import expr as E
from .kernel import (Component, Constant, Dot, Index, Kernel, Load, Loop, Op, Reduce, Store,
                     has_effect)

# at most this many intervals per component (a cat of 16 pieces still splits), or up to
# MAX_MANY_PIECES where the pieces' statements together are at most twice the component's
# (each piece keeps its own few: a stack of an RNN's 50 steps, whose one loop evaluated
# all 50 masked loads per element, 18x Inductor's copies)
MAX_PIECES = 16
MAX_MANY_PIECES = 256
# no interval narrower than this many x (a SIMD vector of floats, twice)
MIN_PIECE = 16
_FLIP = {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt"}


def split_pieces(k: Kernel) -> Kernel:
    """`k` with each flat or reduce component whose values select by intervals of x split
    into one component per interval (the module docstring)."""
    consts = {name: how[1] for name, how in k.bindings if how[0] == "const"}
    comps = []
    for c in k.components:
        comps.extend(split_component(c, consts))
    if len(comps) == len(k.components):
        return k
    return replace(k, components=tuple(comps))


def _value(e: E.Expr, consts: dict[str, int]) -> int | None:
    """The value of a size expression whose syms are all bound to constants, else None."""
    return E.evaluate(e, lambda s: consts.get(s.name))


def _scale(e: E.Expr, consts) -> int | None:
    """n where `e` is x // n (x itself, or the outermost digit of x over known sizes)."""
    x = E.Var("x")
    if e == x:
        return 1
    if isinstance(e, E.Digit) and e.base == x and e.k == 0:
        return _value(E.product(e.sizes[1:]), consts)
    if isinstance(e, E.FloorDiv) and e.a == x:
        n = _value(e.b, consts)
        return n if n and n > 0 else None
    return None


def _comparisons(c: Component, consts, scale=None) -> dict[str, tuple[str, int]]:
    """{var: (op, c)} of the comparisons `x op c` (op in ge gt le lt) in `c`, c an integer:
    an operand at x // n compared with a known size k becomes x op' k * n. `scale`: the n
    of an index expression, or None (default `_scale`)."""
    scale = scale or (lambda e: _scale(e, consts))
    stmts = [s for body in _bodies(c) for s in body]
    pos, known = {}, {}
    for s in stmts:
        if isinstance(s, Index):
            n = scale(s.index)
            if n is not None:
                pos[s.var] = n
            elif not E.free_vars(s.index):
                v = _value(s.index, consts)
                if v is not None:
                    known[s.var] = v
    out = {}
    for s in stmts:
        if not (isinstance(s, Op) and s.op in _FLIP and len(s.args) == 2):
            continue
        a, b = s.args
        op = s.op
        if a in known and b in pos:
            a, b, op = b, a, _FLIP[op]
        if a not in pos or b not in known:
            continue
        n, v = pos[a], known[b]
        # x // n >= v <=> x >= v*n; x // n < v <=> x < v*n; > v <=> >= v+1; <= v <=> < v+1
        if op in ("gt", "le"):
            v, op = v + 1, {"gt": "ge", "le": "lt"}[op]
        out[s.var] = (op, v * n)
    return out


def _bodies(c: Component):
    return [loop.body for loop in c.loops] + [c.body]


def split_component(c: Component, consts: dict[str, int]) -> list[Component]:
    if c.kind not in ("flat", "reduce"):
        return [c]
    n = _value(c.xnumel, consts)
    if n is None or n < 2 * MIN_PIECE:
        return [c]
    cmps = _comparisons(c, consts)
    if not any(0 < v < n for _, v in cmps.values()):
        return _split_columns(c, consts)
    bounds = _bounds(c, cmps, n)
    if bounds is None:
        return [c]
    return _kept(c, [_piece(c, cmps, lo, hi, consts) for lo, hi in zip(bounds, bounds[1:])])


def _bounds(c: Component, cmps, extent: int) -> list[int] | None:
    """The interval bounds the comparisons cut [0, extent) into, or None where the split
    does not pay: no cut, more than MAX_MANY_PIECES intervals, one narrower than
    MIN_PIECE, or nothing reads under the comparisons."""
    cuts = sorted({v for _, v in cmps.values() if 0 < v < extent})
    if not cuts or len(cuts) + 1 > MAX_MANY_PIECES:
        return None
    bounds = [0] + cuts + [extent]
    if any(hi - lo < MIN_PIECE for lo, hi in zip(bounds, bounds[1:])):
        return None
    return bounds if _selects_by(c, set(cmps)) else None


def _kept(c: Component, pieces: list[Component]) -> list[Component]:
    """The pieces, or `c` alone where more than MAX_PIECES of them print more than twice
    its statements."""
    if len(pieces) > MAX_PIECES and _size(pieces) > 2 * _size([c]):
        return [c]
    return pieces


def _size(comps: list[Component]) -> int:
    """Statements of the components (what the target prints)."""
    return sum(len(body) for c in comps for body in _bodies(c))


def _selects_by(c: Component, cmps: set[str]) -> bool:
    """Whether a mask or a select depends on the comparisons (the split saves work)."""
    dep = set(cmps)
    for body in _bodies(c):
        for s in body:
            if isinstance(s, Op) and dep & set(s.args):
                if s.op == "where" and s.args[0] in dep:
                    return True
                dep.add(s.var)
            elif isinstance(s, (Load, Store)) and s.mask in dep:
                return True
    return False


def _split_columns(c: Component, consts: dict[str, int]) -> list[Component]:
    """`c` split where its pieces follow one another along x's last digit (a cat along
    the last dim of rows: x = row * W + col, the pieces intervals of col): one component
    per interval [lo, hi) of col, over x' = row * (hi - lo) + (col - lo). Every use of
    x must be a digit of x over the same known sizes, so that the substitution is exact."""
    found = _digit_sizes(c, consts)
    if found is None:
        return [c]
    sizes, rows, width = found
    last = len(sizes) - 1
    col = E.Digit(E.Var("x"), sizes, last)
    cmps = _comparisons(c, consts, lambda e: 1 if e == col else None)
    bounds = _bounds(c, cmps, width)
    if bounds is None:
        return [c]
    pieces = []
    for lo, hi in zip(bounds, bounds[1:]):
        narrow = sizes[:-1] + (E.Const(hi - lo),)

        def move(e: E.Expr, lo=lo, narrow=narrow) -> E.Expr:
            def digit(d):
                if isinstance(d, E.Digit) and d.base == E.Var("x"):
                    moved = E.Digit(E.Var("x"), narrow, d.k)
                    return E.add(moved, E.Const(lo)) if d.k == last and lo else moved
                return None
            return E.rewrite(e, digit)
        pieces.append(_piece(c, cmps, lo, hi, consts, move, E.Const(rows * (hi - lo))))
    return _kept(c, pieces)


def _digit_sizes(c: Component, consts) -> tuple | None:
    """(sizes, rows, width): the sizes every use of x in `c` is a digit over (two or more,
    all known, their product x's extent), the product of all but the last, and the last;
    or None."""
    found: set = set()
    bare = False

    def walk(e: E.Expr) -> None:
        nonlocal bare
        if isinstance(e, E.Digit) and e.base == E.Var("x"):
            found.add(e.sizes)
            for z in e.sizes:
                walk(z)
            return
        if e == E.Var("x"):
            bare = True
            return
        for ch in E.children(e):
            walk(ch)
    for body in _bodies(c):
        for s in body:
            if isinstance(s, (Load, Store, Index)):
                walk(s.index)
    if bare or len(found) != 1:
        return None
    sizes = next(iter(found))
    values = [_value(z, consts) for z in sizes]
    if len(sizes) < 2 or any(v is None or v <= 0 for v in values):
        return None
    rows = 1
    for v in values[:-1]:
        rows *= v
    return (sizes, rows, values[-1]) if _value(c.xnumel, consts) == rows * values[-1] \
        else None


def _piece(c: Component, cmps, lo: int, hi: int, consts, move=None,
           xnumel: E.Expr | None = None) -> Component:
    """Component `c` over x in [lo, hi), as x' = x - lo in [0, hi - lo) (or as `move`
    maps x's uses, over `xnumel` points)."""
    if move is None:
        def move(e: E.Expr) -> E.Expr:
            return shift(e, lo, consts) if lo else e
    truth: dict[str, bool] = {}          # variables with a known value on the piece
    alias: dict[str, str] = {}           # variables that are another one on the piece
    for var, (op, v) in cmps.items():
        truth[var] = lo >= v if op == "ge" else hi <= v
    bodies = []
    for body in _bodies(c):
        out = []
        for s in body:
            s = _renamed(s, alias)
            if isinstance(s, Op) and s.var in truth:
                out.append(Constant(s.var, truth[s.var], "b8"))
                continue
            if isinstance(s, Op):
                folded = _fold(s, truth)
                if isinstance(folded, str):
                    alias[s.var] = folded
                    continue
                if isinstance(folded, bool):
                    truth[s.var] = folded
                    out.append(Constant(s.var, folded, "b8"))
                    continue
            if isinstance(s, (Load, Store)) and s.mask in truth:
                if not truth[s.mask]:
                    if isinstance(s, Store):
                        continue          # never stores on this piece
                else:
                    s = replace(s, mask=None)
            if isinstance(s, (Load, Store, Index)):
                s = replace(s, index=move(s.index))
            out.append(s)
        bodies.append(out)
    bodies = _dead_code(bodies)
    loops = tuple(Loop(tuple(b)) for b in bodies[:-1])
    return replace(c, xnumel=xnumel if xnumel is not None else E.Const(hi - lo), loops=loops,
                   body=tuple(bodies[-1]))


def _renamed(s, alias: dict[str, str]):
    if not alias:
        return s
    get = lambda v: alias.get(v, v)     # noqa: E731
    if isinstance(s, Op):
        return replace(s, args=tuple(get(a) for a in s.args))
    if isinstance(s, Load):
        return replace(s, mask=get(s.mask) if s.mask else None)
    if isinstance(s, Store):
        return replace(s, value=get(s.value), mask=get(s.mask) if s.mask else None)
    if isinstance(s, Reduce):
        return replace(s, value=get(s.value))
    if isinstance(s, Dot):
        return replace(s, lhs=get(s.lhs), rhs=get(s.rhs))
    return s


def _fold(s: Op, truth: dict[str, bool]):
    """An op whose known operands decide it: the variable it equals, or its boolean value;
    None when they do not."""
    args = s.args
    if s.op == "where" and args[0] in truth:
        return args[1] if truth[args[0]] else args[2]
    if s.op in ("and", "or") and any(a in truth for a in args):
        absorbing = s.op == "or"           # and: a false decides; or: a true does
        if any(truth.get(a) is absorbing for a in args):
            return absorbing
        rest = [a for a in args if a not in truth]
        if not rest:
            return not absorbing
        if len(rest) == 1:
            return rest[0]
    if s.op == "not" and args[0] in truth:
        return not truth[args[0]]
    return None


def _dead_code(bodies: list[list]) -> list[list]:
    """Drop loads, indices, ops and constants nothing reads any more (what has an effect
    stays: stores, reductions, dots, index checks; kernel.has_effect)."""
    while True:
        used = set()
        for body in bodies:
            for s in body:
                if isinstance(s, Op):
                    used.update(s.args)
                elif isinstance(s, Store):
                    used.add(s.value)
                elif isinstance(s, Reduce):
                    used.add(s.value)
                elif isinstance(s, Dot):
                    used.update((s.lhs, s.rhs))
                if isinstance(s, (Load, Store)) and s.mask:
                    used.add(s.mask)
                if isinstance(s, (Load, Store, Index)):
                    used.update(E.free_vars(s.index))
        kept = [[s for s in body if not isinstance(s, (Load, Index, Op, Constant))
                 or s.var in used or has_effect(s)] for body in bodies]
        if sum(map(len, kept)) == sum(map(len, bodies)):
            return kept
        bodies = kept


def _offset(e: E.Expr) -> int | None:
    """c where `e` is x + c (x itself: 0), else None."""
    if e == E.Var("x"):
        return 0
    if isinstance(e, E.Add) and len(e.terms) == 2 and e.terms[0] == E.Var("x") and \
            isinstance(e.terms[1], E.Const):
        return e.terms[1].value
    return None


def shift(e: E.Expr, lo: int, consts: dict[str, int]) -> E.Expr:
    """`e` with x replaced by x + lo, where a division or a digit of x + lo by a known
    size that divides the offset becomes that of x plus a constant (so that a piece's
    index reads as dense as the first piece's: ((x + 32768) // 128 - 256) * s0 is
    (x // 128) * s0). Floor semantics, x >= 0: (x + m*n) // n == x // n + m and
    (x + m*n) % n == x % n for every integer m."""
    if e == E.Var("x"):
        return E.add(e, E.Const(lo))
    if isinstance(e, (E.Var, E.Const, E.Sym, E.Value)):
        return e
    if isinstance(e, E.Add):
        return E.add(*(shift(t, lo, consts) for t in e.terms))
    if isinstance(e, E.Mul):
        return E.mul(*(shift(t, lo, consts) for t in e.factors))
    if isinstance(e, (E.FloorDiv, E.Mod)):
        a, b = shift(e.a, lo, consts), shift(e.b, lo, consts)
        c, n = _offset(a), _value(b, consts)
        if c and n and n > 0 and c % n == 0:
            if isinstance(e, E.Mod):
                return E.mod(E.Var("x"), b)
            return E.add(E.floordiv(E.Var("x"), b), E.Const(c // n))
        return E.floordiv(a, b) if isinstance(e, E.FloorDiv) else E.mod(a, b)
    if isinstance(e, E.Digit):
        base = shift(e.base, lo, consts)
        sizes = tuple(shift(z, lo, consts) for z in e.sizes)
        c = _offset(base)
        inner = _value(E.product(sizes[e.k + 1:]), consts)
        period = _value(E.product(sizes[e.k:]), consts) if e.k else inner
        if c and inner and period and c % period == 0:
            # digit 0 is x // inner (no wrap): it moves by c // inner; a lower digit's
            # period divides c: it does not move
            d = E.Digit(E.Var("x"), sizes, e.k)
            return E.add(d, E.Const(c // inner)) if e.k == 0 else d
        return E.Digit(base, sizes, e.k)
    raise TypeError(e)
