"""Code-generation legality: the last planning stage for targets that generate kernels.

A kernel group that the target's code generator cannot lower (an op without a
rule, a reduction read at another row, GEMMs inside a kernel on a target whose
printer has no GEMM stages, `Target.gemm_fusing`) is split into its ops, and an op
that cannot be generated alone runs through torch as a library call. The verdict is
the legality seam's (`legality.Legality.lowers`: `Target.can_lower`, remembered by
structure, so the copies of a repeated layer are lowered once); this stage only acts
on it. The plan that explain() reports is the plan that runs, so the
counts stay honest: every kernel group of the result lowers to one kernel.
Every split is logged on `fusionstitch.codegen` with the reason.
"""
from __future__ import annotations

import logging

from ..targets import resolve
from .legality import Legality
from .plan import KERNEL, LIBRARY, FusionPlan, Group, node_kind, schedule_of

log = logging.getLogger("fusionstitch.codegen")


def legalize(plan: FusionPlan, target) -> FusionPlan:
    """`plan` with every kernel group lowering on `target` (a targets.Target, or its
    name)."""
    target = resolve(target)
    graph = plan.graph
    trace = plan.trace
    out: list[Group] = []
    changed = False
    legality = Legality(graph, target)

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
        d = legality.lowers(g.nodes)
        if d:
            add(g.nodes, g.kind, g.composition)
            continue
        changed = True
        reason = d.reason
        if len(g.nodes) > 1:
            log.info("group #%d (%d ops) is split into its ops: %s", g.id, len(g.nodes), reason)
            if trace is not None:
                trace.record("legalize", g.nodes, f"the planned group #{g.id} "
                             f"({len(g.nodes)} ops) was split into its ops: {reason}")
        for n in g.nodes:
            kind = node_kind(graph[n])
            if kind == KERNEL and len(g.nodes) > 1:
                d = legality.lowers((n,))
                if not d:
                    reason = d.reason
                    kind = LIBRARY
            elif kind == KERNEL:
                kind = LIBRARY
            if kind == LIBRARY and node_kind(graph[n]) == KERNEL:
                log.info("%%%s (%s) runs through torch: %s", n, graph[n].op, reason)
                if trace is not None:
                    trace.record("legalize", (n,), f"%{n} ({graph[n].op}) runs through torch: "
                                 f"{reason}")
            add((n,), kind, "single")
    if not changed and all(a.schedule is b.schedule for a, b in zip(out, plan.groups)):
        return plan
    from dataclasses import replace
    return replace(plan, groups=tuple(out))
