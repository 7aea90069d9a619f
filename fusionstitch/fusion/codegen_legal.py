"""Code-generation legality: the last planning stage for targets that generate kernels.

A kernel group that the target's code generator cannot lower (an op without a
rule, a reduction read at another row, GEMMs inside a kernel on a target whose
printer has no GEMM stages, see `legality.GEMM_FUSING_TARGETS`) is split into
its ops, and an op that cannot be generated alone runs through torch as a
library call. The plan that explain() reports is the plan that runs, so the
counts stay honest: every kernel group of the result lowers to one kernel.
Every split is logged on `fusionstitch.codegen` with the reason.
"""
from __future__ import annotations

import logging

from ..codegen.lower import Unsupported, lower_cached
from ..schedule.propagate import FUSIBLE_DOTS
from .legality import gemms_fusible
from .plan import KERNEL, LIBRARY, FusionPlan, Group, node_kind

log = logging.getLogger("fusionstitch.codegen")


def _lower(graph, nodes, target: str) -> None:
    """lower_cached, and on targets without GEMM stages no GEMM inside a kernel."""
    if not gemms_fusible(target):
        dot = next((n for n in nodes if graph[n].op in FUSIBLE_DOTS), None)
        if dot is not None:
            raise Unsupported(f"%{dot} ({graph[dot].op}): the {target} code generator has no "
                              "GEMM stages (block composition); GEMMs are library calls there")
    lower_cached(graph, nodes)


def legalize(plan: FusionPlan, target: str) -> FusionPlan:
    graph = plan.graph
    trace = plan.trace
    out: list[Group] = []
    changed = False

    def add(nodes, kind, comp):
        out.append(Group(len(out), tuple(nodes), kind, comp))

    for g in plan.groups:
        if g.kind != KERNEL:
            add(g.nodes, g.kind, g.composition)
            continue
        try:
            _lower(graph, g.nodes, target)   # group nodes are in graph order, as everywhere
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
                    _lower(graph, (n,), target)
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
    if not changed:
        return plan
    from dataclasses import replace
    return replace(plan, groups=tuple(out))
