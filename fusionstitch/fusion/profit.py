"""Profitability rules: a group that is legal (fusion/legality.py) may still not pay.

Legality says whether a group *can* be one kernel; these rules say when one kernel would
cost more than it saves, in ways the cost model's bytes-and-launches score does not see.
The stitch planner applies them after legality, as checks of their own
(`stitch.StitchChecks`), and records a refusal with its reason in the plan trace under
`profit`.
"""
from __future__ import annotations

from ..ir.graph import Graph
from ..ir.ops import BRANCHING_OPS, FUSIBLE_DOTS, SIMPLE_REDUCTIONS, Category, lookup
from .decision import ALLOW, Decision

# ops that compute nothing (views, tuple access, broadcasts): not "own" work of a group
_FREE_CATEGORIES = (Category.RESHAPE, Category.TRANSPOSE, Category.TUPLE, Category.BROADCAST)


class RecomputeLimit:
    """XLA's code-duplication rule as a planner check (`recompute_within`), asked of one
    connected group at a time (independent components of a kernel recompute nothing of
    each other's). `legality`: the planning run's legality.Legality, whose kernel IR of
    the group the rule reads and whose structural memo remembers its verdicts; `limit`:
    `Target.max_recompute`; `reused`: `Target.reused_values`."""

    name = "recompute"

    def __init__(self, legality, limit: float, reused=None):
        self.legality = legality
        self.limit = limit
        self.reused = reused

    def applies(self, names) -> bool:
        """Only reductions' loops, GEMM stages and per-element selects (concat, pad)
        recompute: a group without them is within any limit."""
        graph = self.legality.graph
        return any(graph[n].op in SIMPLE_REDUCTIONS or graph[n].op in FUSIBLE_DOTS
                   or graph[n].op in BRANCHING_OPS for n in names)

    def __call__(self, names) -> Decision:
        if not self.applies(names):
            return ALLOW
        leg = self.legality
        memo = leg.structural

        def decide() -> Decision:
            d, kernel = leg.kernel(names)
            if not d:
                # legality passed the group without lowering it (pointwise ops lower):
                # its refusal stands, as legality's
                return d
            return recompute_within(leg.graph, names, kernel, self.limit, self.reused,
                                    lambda part: leg.kernel(part)[1])
        return memo.verdict(memo.key(names), "recompute", decide)


def recompute_within(graph: Graph, key, kernel, max_recompute: float,
                     reused=None, lower=None) -> Decision:
    """XLA's code-duplication rule, in our terms: the fused kernel `kernel` of the nodes
    `key` may recompute (values re-derived in each loop over a row, both sides of a
    concat's select) up to `max_recompute` times its parts' own ops (`Target.max_recompute`).
    `reused`: the target's `Target.reused_values` (the cpu target keeps rows across a
    reduction's loops, so work read back from one is not recomputation). `lower`: names ->
    their kernel IR or None (`Legality.kernel`), for the transcendental limit."""
    from ..codegen.kernel import TRANSCENDENTAL_OPS, arithmetic_work
    from ..schedule.propagate import type_numel
    own = sum(type_numel(graph[n].type) for n in key
              if lookup(graph[n].op).category not in _FREE_CATEGORIES)
    work = arithmetic_work(kernel, reused)
    if work > max_recompute * max(own, 1):
        return Decision.forbid(f"fused, it would compute {work / max(own, 1):.1f}x the "
                               f"ops of its parts (recomputation across concat branches "
                               f"or reduction loops); limit {max_recompute}x", "recompute")
    # transcendental functions by themselves: an op counts as one above, but an exp or a
    # tanh costs tens of simple ops, so recomputing them is held to a tighter limit (an
    # LSTM cell fused with the concat of its output computed every sigmoid and tanh twice,
    # once per branch: 3.7x Inductor's time and slower than the ops one by one)
    work_t = arithmetic_work(kernel, reused, TRANSCENDENTAL_OPS)
    if work_t <= MAX_TRANSCENDENTAL_RECOMPUTE or lower is None:
        return ALLOW
    own_t = _own_transcendental(graph, key, lower)
    if work_t > MAX_TRANSCENDENTAL_RECOMPUTE * max(own_t, 1):
        return Decision.forbid(f"fused, it would compute {work_t / max(own_t, 1):.1f}x the "
                               f"transcendental ops of its parts (recomputation across "
                               f"concat branches or reduction loops); limit "
                               f"{MAX_TRANSCENDENTAL_RECOMPUTE}x", "recompute")
    return ALLOW


def _own_transcendental(graph: Graph, key, lower) -> int:
    """The transcendental ops the nodes of `key` compute once each: every node that is
    not free lowered alone through `lower` (the seam's `Legality.kernel`, remembered per
    graph): a composite such as gelu or its backward lowers to erf and exp, so by its
    name it would count none, and the fused kernel's would then read as recomputation.
    Asked only of groups whose kernel has transcendental work."""
    from ..codegen.kernel import TRANSCENDENTAL_OPS, arithmetic_work
    own = 0
    for n in key:
        if lookup(graph[n].op).category in _FREE_CATEGORIES:
            continue
        k = lower([n])
        if k is not None:
            own += arithmetic_work(k, None, TRANSCENDENTAL_OPS)
    return own


# the most a fused kernel may recompute transcendental functions (exp, tanh, sigmoid, ...)
# over its parts' own, on targets with a recompute limit
MAX_TRANSCENDENTAL_RECOMPUTE = 1.5
