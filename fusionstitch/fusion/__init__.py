"""Fusion planning: strategies turn a Graph into a FusionPlan."""
from __future__ import annotations

import logging

from ..ir.graph import Graph
from .plan import FREE, KERNEL, LIBRARY, FusionPlan, Group, plan_none

log = logging.getLogger("fusionstitch.fusion")

# Strategy name -> planner(graph, target) -> FusionPlan.
PLANNERS = {"none": lambda graph, target: plan_none(graph)}


def _register_planners() -> None:
    from .stitch import plan_stitch
    PLANNERS["stitch"] = plan_stitch
    try:
        from .xla import plan_xla
    except ImportError:  # the baseline lands separately; until then it plans as `none`
        return
    PLANNERS["xla"] = plan_xla


_register_planners()
_warned: set[str] = set()
# targets whose kernel groups become generated kernels (the others run plans through torch)
CODEGEN_TARGETS = ("cuda", "interpret", "cpu")


def make_plan(graph: Graph, strategy: str, target: str) -> FusionPlan:
    planner = PLANNERS.get(strategy)
    if planner is None:
        if strategy not in _warned:
            _warned.add(strategy)
            log.warning("strategy %r is not implemented yet; planning as 'none' (unfused)",
                        strategy)
        planner = PLANNERS["none"]
    plan = planner(graph, target)
    if target in CODEGEN_TARGETS:
        from .codegen_legal import legalize
        plan = legalize(plan, target)
    plan.validate()
    return plan


__all__ = ["FREE", "KERNEL", "LIBRARY", "FusionPlan", "Group", "plan_none", "make_plan",
           "PLANNERS"]
