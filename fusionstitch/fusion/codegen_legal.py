"""Code-generation legality: the last planning stage for targets that generate kernels.

A kernel group that the target's code generator cannot lower (an op without a
rule, a reduction read at another row, GEMMs inside a kernel on a target whose
printer has no GEMM stages, `Target.gemm_fusing`) is split into
its ops, and an op that cannot be generated alone runs through torch as a
library call. The plan that explain() reports is the plan that runs, so the
counts stay honest: every kernel group of the result lowers to one kernel.
Every split is logged on `fusionstitch.codegen` with the reason.
"""
from __future__ import annotations

import logging

from ..codegen.lower import Unsupported, lower_group
from ..config import elide_half_casts
from ..runtime.cache import register_memory_cache
from ..targets import resolve
from .legality import Decision
from .plan import KERNEL, LIBRARY, FusionPlan, Group, node_kind, schedule_of
from .structure import StructuralMemo

log = logging.getLogger("fusionstitch.codegen")

# Planning lowers groups tentatively (the stitch planner's legality checks, then this
# stage): the same group is tried by both, so the outcome is remembered per (graph
# object, nodes). Private to planning: the kernels that run come from the driver's
# `lower` stage (fusion/lowered.py), never from here.
_TRIED: dict[tuple, tuple] = {}
register_memory_cache(_TRIED.clear)
_TRIED_MAX = 50_000


def tentative_lower(graph, names):
    """The kernel IR of group `names` (lowering is target-neutral), remembered for the planning of `graph` (failures re-raised with
    the same message)."""
    # the knob changes what a conversion to a half type lowers to (lowerings._converted)
    key = (id(graph), tuple(names), elide_half_casts())
    hit = _TRIED.get(key)
    if hit is not None and hit[0] is graph:
        if isinstance(hit[1], Unsupported):
            raise Unsupported(str(hit[1]))
        return hit[1]
    if len(_TRIED) > _TRIED_MAX:
        _TRIED.clear()
    try:
        k = lower_group(graph, tuple(names), "kernel")
    except Unsupported as e:
        _TRIED[key] = (graph, e)
        raise
    _TRIED[key] = (graph, k)
    return k


def _lower(graph, nodes, target, memo: StructuralMemo) -> None:
    """Raise Unsupported unless `target` lowers `nodes` to one kernel (on targets without
    GEMM stages, no GEMM inside a kernel). `memo`: the verdicts of this stage (one graph,
    one target) by structure: the copies of a repeated layer are lowered once."""
    def lowers() -> Decision:
        why = target.can_lower(graph, nodes, tentative_lower)
        return Decision.forbid(why) if why else Decision.allow()
    d = memo.verdict(memo.key(nodes), "can_lower", lowers)
    if not d:
        raise Unsupported(d.reason)


def legalize(plan: FusionPlan, target) -> FusionPlan:
    """`plan` with every kernel group lowering on `target` (a targets.Target, or its
    name)."""
    target = resolve(target)
    graph = plan.graph
    trace = plan.trace
    out: list[Group] = []
    changed = False
    memo = StructuralMemo(graph)

    def add(nodes, kind, comp):
        # a kernel group keeps the schedule its plan decided; one of a split (or of a
        # plan made by hand) gets its own (fusion/plan.py)
        schedule = carried.get(tuple(nodes)) if kind == KERNEL else None
        if kind == KERNEL and schedule is None:
            schedule = schedule_of(graph, nodes)
        out.append(Group(len(out), tuple(nodes), kind, comp, schedule))

    carried = {g.nodes: g.schedule for g in plan.groups if g.kind == KERNEL}
    for g in plan.groups:
        if g.kind != KERNEL:
            add(g.nodes, g.kind, g.composition)
            continue
        try:
            _lower(graph, g.nodes, target, memo)   # group nodes are in graph order, as everywhere
            add(g.nodes, g.kind, g.composition)
            continue
        except Unsupported as e:
            changed = True
            reason = str(e)
        if len(g.nodes) > 1:
            log.info("group #%d (%d ops) is split into its ops: %s", g.id, len(g.nodes), reason)
            if trace is not None:
                trace.record("legalize", g.nodes, f"the {target} code generator cannot "
                             f"generate the planned group #{g.id} ({len(g.nodes)} ops), so it "
                             f"was split into its ops: {reason}")
        for n in g.nodes:
            kind = node_kind(graph[n])
            if kind == KERNEL and len(g.nodes) > 1:
                try:
                    _lower(graph, (n,), target, memo)
                except Unsupported as e:
                    reason = str(e)
                    kind = LIBRARY
            elif kind == KERNEL:
                kind = LIBRARY
            if kind == LIBRARY and node_kind(graph[n]) == KERNEL:
                log.info("%%%s (%s) runs through torch: %s", n, graph[n].op, reason)
                if trace is not None:
                    trace.record("legalize", (n,), f"%{n} ({graph[n].op}) runs through torch: "
                                 f"the {target} code generator cannot generate it: {reason}")
            add((n,), kind, "single")
    if not changed and all(a.schedule is b.schedule for a, b in zip(out, plan.groups)):
        return plan
    from dataclasses import replace
    return replace(plan, groups=tuple(out))
