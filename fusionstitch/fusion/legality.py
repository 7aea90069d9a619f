"""Legality of fusion decisions, each with its reason (XLA's FusionDecision).

Legality says only whether a group *can* be one kernel; profitability is the
cost model's business and choosing among groups the planner's.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..analysis.reach import Reachability
from ..ir.graph import CONSTANT, PARAMETER, Graph, Node
from ..ir.ops import FUSIBLE_DOTS, SCATTER_OPS, SIMPLE_REDUCTIONS, Category, lookup
from ..schedule.propagate import Inconsistent, dot_dims, group_spaces

# Largest GEMM tile (m, n and k, per batch entry) fused with block composition: a tile
# of this size (3 x 64 x 64 fp32 = 48 KiB) fits one block's shared memory on the GPU,
# where a vendor GEMM would be launch-bound anyway. Larger GEMMs stay library calls
# (the 2019 paper's "large gemm" partition ops).
MAX_FUSED_GEMM_DIM = 64



@dataclass(frozen=True)
class Decision:
    ok: bool
    reason: str = ""

    @staticmethod
    def allow() -> "Decision":
        return Decision(True)

    @staticmethod
    def forbid(reason: str) -> "Decision":
        return Decision(False, reason)

    def __bool__(self) -> bool:
        return self.ok


def fusible(graph: Graph, node: Node, *, batched_gemms: bool = False) -> Decision:
    """Can this op be part of a generated kernel at all?"""
    if node.op in (PARAMETER, CONSTANT):
        return Decision.forbid(f"%{node.name} is an input of the plan, not an op")
    d = lookup(node.op)
    if d.fallback:
        return Decision.forbid(f"{node.op} has no lowering; it runs through torch")
    if d.random:
        return Decision.forbid(f"{node.op} draws random numbers; it runs through torch to "
                               "keep eager's RNG stream")
    if node.op in SCATTER_OPS:
        return Decision.forbid(f"{node.op} scatters to data-dependent positions")
    if d.category == Category.DOT:
        if batched_gemms and node.op in FUSIBLE_DOTS and small_gemm(graph, node):
            return Decision.allow()
        return Decision.forbid(f"{node.op} is a library call (GEMM); never fused into a "
                               "generated kernel")
    if d.category == Category.LIBRARY:
        return Decision.forbid(f"{node.op} is a library call; never fused")
    if d.category == Category.REDUCE and node.op not in SIMPLE_REDUCTIONS:
        return Decision.forbid(f"{node.op} is a composite reduction kept whole")
    return Decision.allow()


def small_gemm(graph: Graph, node: Node) -> bool:
    _, m, n, k = dot_dims(graph, node)
    return max(m, n, k) <= MAX_FUSED_GEMM_DIM


def check_group(graph: Graph, names, reach: Reachability, *,
                batched_gemms: bool = False, assume_fusible: bool = False,
                staged_bytes: int = 0, structural=None) -> Decision:
    """Can these nodes be one kernel: all fusible, no cycle, one consistent schedule.

    `assume_fusible` skips the per-op check for callers that already made it.
    `staged_bytes`: a group no one schedule fits may still run as one program in
    stages (`propagate.component_space`) when it moves at most this many bytes
    (0: never; see `staged_limit`). `structural`: a `structure.StructuralMemo` of the
    caller's (one per graph and settings) remembering the schedule verdict by structure.
    """
    group, names = names, list(names)
    for n in () if assume_fusible else names:
        d = fusible(graph, graph[n], batched_gemms=batched_gemms)
        if not d:
            return d
    if reach.creates_cycle(names):
        return Decision.forbid("grouping would create a cycle (a path leaves the group "
                               "and re-enters it)")
    if structural is None:
        return schedule_verdict(graph, names, staged_bytes)
    return structural.verdict(structural.key(group), "schedule",
                              lambda: schedule_verdict(graph, names, staged_bytes))


def schedule_verdict(graph: Graph, names, staged_bytes: int = 0) -> Decision:
    """One consistent schedule for `names`, or (`staged_bytes` > 0) a staged program
    moving at most that many bytes: the structural part of `check_group`."""
    try:
        spaces = group_spaces(graph, names, staged=staged_bytes > 0)
    except Inconsistent as e:
        return Decision.forbid(f"no consistent schedule: {e}")
    if any(s.staged for s in spaces):
        from ..analysis.cost import group_bytes
        moved = group_bytes(graph, tuple(names))
        if moved > staged_bytes:
            return Decision.forbid(f"no consistent schedule, and one program running it in "
                                   f"stages would move {moved} bytes, over {staged_bytes}")
    return Decision.allow()


def staged_limit(target) -> int:
    """Bytes one program may move in a staged kernel on `target` (a Target or its name):
    `Target.staged_bytes`."""
    from ..targets import resolve
    return resolve(target).staged_bytes
