"""Merging chosen kernel groups after the ILP (the stitch planner's last stage).

The ILP picks the best disjoint set among the *candidates*; a pair of chosen
kernels that no generator proposed together stays apart even when one kernel
could hold both: two independent kernels of different span layers (span-layer
packing only packs within a layer), or a producer kernel and its consumer
kernel that sit on either side of a library call. XLA's fusion merger and its
horizontal fusion do this merging after instruction fusion; we do it after the
ILP, on the fused graph:

- two kernel groups merge when their union is one legal kernel within the
  recompute limit (`StitchChecks.check`: legality.py, then profit.py), the fused
  graph stays acyclic (no path from one to the other through a third group), the
  union stays within the packing footprint, and the cost model says the union is
  faster than the two apart;
- pairs are tried in dependency order, nearest first, a bounded number per
  group, so the stage stays cheap on graphs of thousands of groups.
"""
from __future__ import annotations

import logging

from ..analysis.cost import group_bytes
from .plan import KERNEL, node_kind, quotient, topological_order

log = logging.getLogger("fusionstitch.fusion")

# Partners tried per kernel group (the nearest later kernel groups in dependency
# order), and legality checks per planning run: each check may lower a kernel.
MERGE_PARTNERS = 16
MERGE_MAX_CHECKS = 1000


def _closure(n: int, succ: list[set[int]]) -> tuple[list[int], list[int]]:
    """reach[u]: units reachable from u; coreach[u]: units reaching u (bitsets)."""
    pred: list[list[int]] = [[] for _ in range(n)]
    for u in range(n):
        for v in succ[u]:
            pred[v].append(u)
    order = topological_order(succ)
    reach, coreach = [0] * n, [0] * n
    for u in reversed(order):
        m = 0
        for v in succ[u]:
            m |= (1 << v) | reach[v]
        reach[u] = m
    for u in order:
        m = 0
        for p in pred[u]:
            m |= (1 << p) | coreach[p]
        coreach[u] = m
    return reach, coreach


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def merge_kernels(graph, groups: list[frozenset], leg, score, device) -> list[frozenset]:
    """The chosen groups with mergeable kernel pairs merged (see the module doc)."""
    from .patterns import PACK_MAX_BYTES, PACK_MAX_OPS
    q = quotient(graph, groups)
    units: list[frozenset | None] = [frozenset(u) for u in q.units]
    n = len(units)

    def is_kernel(names) -> bool:
        return (any(node_kind(graph[m]) == KERNEL for m in names)
                and all(m in leg.fusible for m in names) and bool(leg.check(names)))

    ks = [u for u in range(n) if is_kernel(units[u])]
    if len(ks) < 2:
        return groups
    ks.sort(key=lambda u: q.position[q.units[u][0]])
    reach, coreach = _closure(n, q.succ)
    value = {u: score(graph, units[u], device) if len(units[u]) > 1 else 0.0 for u in ks}
    nbytes = {u: group_bytes(graph, tuple(units[u])) for u in ks}
    alive = set(ks)
    checks, merged_any = 0, False
    trace = getattr(leg, "trace", None)

    def declined(union, reason):
        if trace is not None:
            trace.record("merge", union, f"merging the two kernel groups after the ILP was "
                         f"declined: {reason}")

    for i, u in enumerate(ks):
        if u not in alive:
            continue
        partners = (v for v in ks[i + 1:] if v in alive)
        tried = 0
        for v in partners:
            if tried >= MERGE_PARTNERS or checks >= MERGE_MAX_CHECKS:
                break
            tried += 1
            pair = (1 << u) | (1 << v)
            # merging is acyclic unless a third unit lies on a path between the two
            union = units[u] | units[v]
            if ((reach[u] & coreach[v]) | (reach[v] & coreach[u])) & ~pair:
                declined(union, "a path between them runs through a third group (a cycle)")
                continue
            if len(union) > PACK_MAX_OPS or nbytes[u] + nbytes[v] > PACK_MAX_BYTES:
                declined(union, f"together over the footprint limit ({PACK_MAX_OPS} ops, "
                         f"{PACK_MAX_BYTES} bytes)")
                continue
            together = score(graph, union, device)
            gain = together - value[u] - value[v]
            if gain <= 0:
                declined(union, f"the cost model says one kernel is not faster ({gain:.3g} s)")
                continue
            checks += 1
            d = leg.check(union)
            if not d:
                declined(union, d.reason)
                continue
            log.debug("stitch: merging kernel groups of %d and %d ops (saves %.2g s)",
                      len(units[u]), len(units[v]), gain)
            units[u], units[v] = union, None
            alive.discard(v)
            value[u], nbytes[u] = together, group_bytes(graph, tuple(union))
            # v's unit becomes u: everything reaching either reaches u, and so on
            r = (reach[u] | reach[v]) & ~pair
            c = (coreach[u] | coreach[v]) & ~pair
            reach[u], coreach[u] = r, c
            reach[v] = coreach[v] = 0
            ub, vb = 1 << u, 1 << v
            for w in _bits(c):
                reach[w] = (reach[w] | r | ub) & ~vb
            for w in _bits(r):
                coreach[w] = (coreach[w] | c | ub) & ~vb
            merged_any = True
    if not merged_any:
        return groups
    return [u for u in units if u is not None and len(u) > 1]
