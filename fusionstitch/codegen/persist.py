"""Persistent reductions: a reduce component's loops run once over a row held on chip.

Lowering emits one loop over r per reduction level, and each loop computes what it
needs from the inputs again (lowering memoizes per loop): a softmax loads x in the
loop that takes the max, again in the loop that sums exp(x - max), and again in the
loop that stores exp(x - max) / sum. When a program's block holds the whole row
(rnumel <= RBLOCK), a target can instead run the loops' bodies one after another on
the same in-register tile, with no loop over r (Inductor's "persistent reduction",
the paper's warp/block composition keeping intermediates on chip): then a statement
that computes what an earlier loop already computed is dropped and its variable
renamed to the earlier one, so each value over r is loaded or computed once.

`persistent_loops(component)` gives, per loop, the statements still to emit, renamed.
It is target-independent; the Triton printer uses it (targets/triton/printer.py).
"""
from __future__ import annotations

from dataclasses import fields, replace

from . import expr as E
from .kernel import Component, Constant, Index, Load, Op, Reduce, Stmt, Store


def rename_expr(e: E.Expr, alias: dict[str, str]) -> E.Expr:
    """`e` with each index value (E.Value) renamed by `alias`."""
    if isinstance(e, E.Value):
        return E.Value(alias.get(e.var, e.var))
    if not E.children(e) or not (E.free_vars(e) & alias.keys()):
        return e
    changes = {}
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, E.Expr):
            changes[f.name] = rename_expr(v, alias)
        elif isinstance(v, tuple) and v and all(isinstance(t, E.Expr) for t in v):
            changes[f.name] = tuple(rename_expr(t, alias) for t in v)
    return replace(e, **changes)


def rename(s: Stmt, alias: dict[str, str]) -> Stmt:
    """`s` reading renamed variables (its own `var` unchanged)."""
    if not alias:
        return s
    a = alias.get
    if isinstance(s, Op):
        return replace(s, args=tuple(a(x, x) for x in s.args))
    if isinstance(s, Load):
        return replace(s, index=rename_expr(s.index, alias),
                       mask=a(s.mask, s.mask) if s.mask else None)
    if isinstance(s, Index):
        return replace(s, index=rename_expr(s.index, alias))
    if isinstance(s, Store):
        return replace(s, index=rename_expr(s.index, alias), value=a(s.value, s.value),
                       mask=a(s.mask, s.mask) if s.mask else None)
    if isinstance(s, Reduce):
        return replace(s, value=a(s.value, s.value))
    return s


def _key(s: Stmt):
    """Equal keys compute equal values (arguments already renamed to their first
    definition; statements are pure and SSA). None: never shared (stores, reductions)."""
    if isinstance(s, Load):
        return ("load", s.buffer, s.index, s.mask, s.dtype)
    if isinstance(s, Index):
        return ("index", s.index)
    if isinstance(s, Constant):
        return ("const", type(s.value).__name__, repr(s.value), s.dtype)
    if isinstance(s, Op):
        return ("op", s.op, s.args, s.dtype)
    return None


def persistent_loops(c: Component, aliased: frozenset[str] = frozenset()
                     ) -> list[tuple[Stmt, ...]]:
    """Per loop of reduce component `c`, the statements a persistent program emits: those
    that no earlier statement already computes, reading the first definition of each
    value. A load after a store to its buffer (or, for buffers in `aliased`, which may
    share memory at run time, after a store to any of them) is not shared with loads
    before that store, so it reads what the looped variant reads."""
    alias: dict[str, str] = {}
    first: dict[tuple, str] = {}
    out = []
    for loop in c.loops:
        kept = []
        for s in loop.body:
            s = rename(s, alias)
            if isinstance(s, Store):
                hit = {s.buffer} | (aliased if s.buffer in aliased else frozenset())
                for k in [k for k in first if k[0] == "load" and k[1] in hit]:
                    del first[k]
            k = _key(s)
            if k is not None and k in first:
                alias[s.var] = first[k]
                continue
            if k is not None:
                first[k] = s.var
            kept.append(s)
        out.append(tuple(kept))
    return out
