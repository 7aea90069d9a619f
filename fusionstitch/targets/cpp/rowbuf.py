"""Row buffers: keep a row's values for the later loops over the same row.

A reduce component runs one loop over r per reduction level, and every loop
computes what it needs from the inputs again (lowering is per loop): a softmax
computes exp(x - max) in the loop that sums it and again in the loop that
divides. That is the paper's recomputation, right when the row does not fit on
chip; on a CPU a row does fit (in the cache, through a per-thread buffer of
`rnumel` elements), so the first loop that computes an expensive value stores it
(`rb0[r] = v`) and later loops read it back (`v = rb0[r]`): block composition's
on-chip intermediates, with the CPU's cache as the chip.

`plan_rows(component)` finds, for each later loop, the values that an earlier
loop computes the same way (same op tree over the same loads), keeps those worth
it (at least two ops, or one expensive op, to skip), and says which statements
each loop still needs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...codegen import expr as E
from ...codegen.kernel import (Component, Constant, Index, Load, Op, Reduce, Store, has_effect,
                               varies_with_r)

# Ops that cost far more than a load from the row buffer (a libm call or a division).
EXPENSIVE = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
    "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "atan2", "asinh", "acosh", "atanh",
    "erf", "erfc", "erfinv", "sigmoid", "pow", "truediv", "floordiv", "fmod", "remainder",
    "gelu", "silu", "softplus", "hypot",
})
# Work (in ops) a value must take to recompute before it is kept in a row buffer.
MIN_WORK = 2


@dataclass
class RowPlan:
    buffers: dict[str, str] = field(default_factory=dict)            # buffer -> dtype
    saves: dict[int, dict[str, str]] = field(default_factory=dict)   # loop -> {var: buffer}
    reuses: dict[int, dict[str, str]] = field(default_factory=dict)  # loop -> {var: buffer}
    live: dict[int, set[str]] = field(default_factory=dict)  # loop -> the vars it computes

    def __bool__(self) -> bool:
        return bool(self.buffers)


def uses(s) -> list[str]:
    out: list[str] = []
    if isinstance(s, Op):
        out += s.args
    elif isinstance(s, Load):
        out += [s.mask] if s.mask else []
        out += [v for v in _values(s.index)]
    elif isinstance(s, Index):
        out += list(_values(s.index))
    elif isinstance(s, Store):
        out += [s.value] + ([s.mask] if s.mask else []) + list(_values(s.index))
    elif isinstance(s, Reduce):
        out.append(s.value)
    return out


def _values(e: E.Expr):
    if isinstance(e, E.Value):
        yield e.var
    for c in E.children(e):
        yield from _values(c)


def _keys(body) -> dict[str, tuple]:
    """A structural key per variable defined in `body`: equal keys compute equal values
    (variables from outside the loop are keyed by name)."""
    keys: dict[str, tuple] = {}
    local = {s.var for s in body if hasattr(s, "var")}

    def arg(a):
        return keys.get(a, ("outer", a))
    for s in body:
        if isinstance(s, Load):
            if any(True for _ in _values(s.index)):
                continue      # a gathered load: indexed by a value of this loop
            if s.mask is None or s.mask in keys or s.mask not in local:
                keys[s.var] = ("load", s.buffer, s.index, arg(s.mask) if s.mask else None)
        elif isinstance(s, Index):
            if not any(True for _ in _values(s.index)):
                keys[s.var] = ("index", s.index)
        elif isinstance(s, Constant):
            keys[s.var] = ("const", repr(s.value), s.dtype)
        elif isinstance(s, Op):
            if all(a in keys or a not in local for a in s.args):
                keys[s.var] = ("op", s.op, tuple(arg(a) for a in s.args), s.dtype)
    return keys


def _work(var: str, defs: dict, memo: dict, moving: frozenset[str]) -> int:
    """Ops (expensive ones count MIN_WORK) to recompute `var` inside its loop; those that
    do not vary with r (a row's pivot or mean) cost nothing: the C++ compiler hoists them
    out of the loop (kernel.varies_with_r)."""
    if var in memo:
        return memo[var]
    s = defs.get(var)
    memo[var] = 0
    if not isinstance(s, Op) or var not in moving:
        return 0
    w = (MIN_WORK if s.op in EXPENSIVE else 1) + sum(_work(a, defs, memo, moving)
                                                     for a in s.args)
    memo[var] = w
    return w


def plan_rows(c: Component, exclude=frozenset()) -> RowPlan:
    """The row buffers of `c`; `exclude`: (loop, var) values not to keep (a later loop
    computes them again, from the values it reads back where those are kept)."""
    plan = RowPlan()
    if c.kind != "reduce" or len(c.loops) < 2:
        return plan
    first: dict[tuple, tuple[int, str]] = {}      # key -> (loop, var) that first computes it
    defs_of: list[dict] = []
    moving_of = [varies_with_r(loop.body) for loop in c.loops]
    for j, loop in enumerate(c.loops):
        defs = {s.var: s for s in loop.body if hasattr(s, "var")}
        defs_of.append(defs)
        keys = _keys(loop.body)
        matched = {v: first[k] for v, k in keys.items()
                   if k in first and first[k][0] < j and first[k] not in exclude}
        # the matched values that an unmatched statement of this loop reads
        frontier: list[str] = []
        for s in loop.body:
            if getattr(s, "var", None) in matched:
                continue
            for a in uses(s):
                if a in matched and a not in frontier:
                    frontier.append(a)
        for v in frontier:
            i, u = matched[v]
            if _work(u, defs_of[i], {}, moving_of[i]) < MIN_WORK:
                continue
            saved = plan.saves.setdefault(i, {})
            buf = saved.get(u)
            if buf is None:
                buf = saved[u] = f"rb{len(plan.buffers)}"
                plan.buffers[buf] = defs_of[i][u].dtype
            plan.reuses.setdefault(j, {})[v] = buf
        for v, k in keys.items():
            first.setdefault(k, (j, v))
    if plan:
        _live(c, plan)
    return plan


def _live(c: Component, plan: RowPlan) -> None:
    """plan.live: per loop, the variables it still computes (what its statements with
    an effect need: stores, reductions, index checks (kernel.has_effect), and the values
    it saves, less those it reads back). An index check of a value an earlier loop
    checked already (the same key: the same index of the same (x, r)) is not repeated."""
    checked: set[tuple] = set()
    for j, loop in enumerate(c.loops):
        reused = plan.reuses.get(j, {})
        need = set(plan.saves.get(j, {}))
        keys = _keys(loop.body)
        for s in reversed(loop.body):
            var = getattr(s, "var", None)
            if has_effect(s) and keys.get(var) not in checked or var in need:
                if var is not None:
                    need.add(var)
                if var not in reused:
                    need.update(uses(s))
        checked |= {keys[s.var] for s in loop.body if isinstance(s, Op)
                    and s.op == "check_index" and s.var in keys}
        plan.live[j] = need


def costly(c: Component, plan: RowPlan, buf: str) -> bool:
    """Whether computing the value kept in `buf` again calls an EXPENSIVE op that
    varies with r (an exp per element, not a division per row)."""
    for j, saved in plan.saves.items():
        for var, b in saved.items():
            if b != buf:
                continue
            body = c.loops[j].body
            defs = {s.var: s for s in body if hasattr(s, "var")}
            moving = varies_with_r(body)
            todo, seen = [var], set()
            while todo:
                v = todo.pop()
                s = defs.get(v)
                if v in seen or not isinstance(s, Op) or v not in moving:
                    continue
                seen.add(v)
                if s.op in EXPENSIVE:
                    return True
                todo += s.args
    return False


def reused_values(c: Component) -> list[frozenset[str]] | None:
    """Per loop of `c`, the variables the printer does not compute there (read back from
    a row buffer, or needed by no statement left): what `codegen.kernel.arithmetic_work`
    does not count on this target. None when no row is buffered."""
    plan = plan_rows(c)
    if not plan:
        return None
    return [frozenset(s.var for s in lp.body if hasattr(s, "var")
                      and (s.var not in plan.live[j] or s.var in plan.reuses.get(j, {})))
            for j, lp in enumerate(c.loops)]
