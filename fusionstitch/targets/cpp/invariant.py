"""Statements of a loop over r that are the same for every r of a row.

The C++ printer computes them once per row, before the loop (`reduce.ReduceLoops.loop`).
GCC does not always hoist them itself: a load whose index is itself loaded (the pivot of
an embedding row's variance, read at the row's first element) became a SIMD gather per
element, 6-10x the time of the layer norm around it (GPT-2's first kernel).
"""
from __future__ import annotations

from ...codegen.kernel import Constant, Index, Load, Op, varies_with_r


def row_invariants(body, kept=frozenset(), live=None, aliased=frozenset()) -> list:
    """The statements of `body` (a loop over r, rmask the constant true) to compute
    before it, in body order: loads at x-only indices and what is computed from them,
    from constants and from earlier loops' results. Values `kept` in row buffers move
    with r; loads of buffers in `aliased` (an output may share their memory) stay in the
    loop, as does everything reading them; statements not `live` (None: all) are left
    out. Empty when all it would move is masks and constants (they cost nothing per r):
    the loop is then printed as it was."""
    held = {s.var for s in body if isinstance(s, Load) and s.buffer in aliased}
    moving = varies_with_r(body, {"r"} | set(kept) | held)
    stmts = [s for s in body if isinstance(s, (Load, Index, Constant, Op))
             and s.var not in moving and s.var not in kept
             and (live is None or s.var in live)]
    trivial = {"xmask", "rmask"}
    for s in stmts:
        if isinstance(s, Constant) or isinstance(s, Op) and set(s.args) <= trivial:
            trivial.add(s.var)
    return stmts if any(s.var not in trivial for s in stmts) else []
