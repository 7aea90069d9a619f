"""Profitability rules: a group that is legal (fusion/legality.py) may still not pay.

Legality says whether a group *can* be one kernel; these rules say when one kernel would
cost more than it saves, in ways the cost model's bytes-and-launches score does not see.
The planners' checks (`patterns.Legality`) apply them after legality and record the
rejection with its reason in the plan trace like any other.
"""
from __future__ import annotations

from ..ir.graph import Graph
from ..ir.ops import Category, lookup
from .legality import Decision

# ops that compute nothing (views, tuple access, broadcasts): not "own" work of a group
_FREE_CATEGORIES = (Category.RESHAPE, Category.TRANSPOSE, Category.TUPLE, Category.BROADCAST)


def recompute_within(graph: Graph, key, kernel, max_recompute: float,
                     reused=None) -> Decision:
    """XLA's code-duplication rule, in our terms: the fused kernel `kernel` of the nodes
    `key` may recompute (values re-derived in each loop over a row, both sides of a
    concat's select) up to `max_recompute` times its parts' own ops (`Target.max_recompute`).
    `reused`: the target's `Target.reused_values` (the cpu target keeps rows across a
    reduction's loops, so work read back from one is not recomputation)."""
    from ..codegen.kernel import arithmetic_work
    from ..schedule.propagate import type_numel
    own = sum(type_numel(graph[n].type) for n in key
              if lookup(graph[n].op).category not in _FREE_CATEGORIES)
    work = arithmetic_work(kernel, reused)
    if work > max_recompute * max(own, 1):
        return Decision.forbid(f"fused, it would compute {work / max(own, 1):.1f}x the "
                               f"ops of its parts (recomputation across concat branches "
                               f"or reduction loops); limit {max_recompute}x")
    return Decision.allow()
