"""Fusion planning: strategies turn a Graph into a FusionPlan."""
from __future__ import annotations

import logging
import time

from ..ir.graph import Graph
from ..targets import Target, resolve
from ..tune import plan_key_part
from .plan import FREE, KERNEL, LIBRARY, FusionPlan, Group, plan_none

log = logging.getLogger("fusionstitch.fusion")

# Strategy name -> planner(graph, target, fuel=None) -> FusionPlan; `fuel`: the most
# fusions the planner may apply (None: no limit; 0: the unfused plan).
PLANNERS = {"none": lambda graph, target, fuel=None: plan_none(graph)}


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


# the planners as registered: a replaced one (tests) bypasses the plan cache
_REGISTERED = dict(PLANNERS)


def make_plan(graph: Graph, strategy: str, target: str | Target,
              use_cache: bool = True, fuel: int | None = None) -> FusionPlan:
    """The plan that runs: the strategy's plan, then code-generation legality (targets
    that generate kernels). `target`: a Target, or its name (resolved here, once). Loaded from the plan cache when this graph was planned before
    (stage `plan_cache`), else planned and stored there (`use_cache=False`: neither).
    `fuel`: at most this many fusions (the driver's FUSIONSTITCH_FUEL; None: no limit);
    a plan with fuel neither comes from the cache nor goes there.
    A plan made here carries its planning run's decisions (`plan.trace`, trace.py); a
    plan from the cache carries none."""
    from . import plan_cache
    target = resolve(target)
    planner = PLANNERS.get(strategy)
    if planner is None:
        if strategy not in _warned:
            _warned.add(strategy)
            log.warning("strategy %r is not implemented yet; planning as 'none' (unfused)",
                        strategy)
        planner = PLANNERS["none"]
    key = None
    if use_cache and fuel is None and plan_cache.enabled() and \
            planner is _REGISTERED.get(strategy, _REGISTERED["none"]):
        start = time.perf_counter()
        tune_part = plan_key_part(target.name)
        key = plan_cache.plan_key(graph, strategy, target.name, tune_part)
        cached = plan_cache.load(graph, key)
        if cached is not None:   # its one stage: the look-up, key included
            return cached.with_stages({plan_cache.HIT_STAGE: time.perf_counter() - start})
        lookup = time.perf_counter() - start
    plan = planner(graph, target, fuel=fuel)
    if plan.trace is None:
        from dataclasses import replace

        from .trace import PlanTrace
        plan = replace(plan, trace=PlanTrace(plan.strategy, target.name))
    if target.generates_kernels:
        from .codegen_legal import legalize
        start = time.perf_counter()
        plan = legalize(plan, target).with_stages(
            {**dict(plan.stages), "legalize": time.perf_counter() - start})
    plan.validate()
    if key is not None:
        start = time.perf_counter()
        after = plan_key_part(target.name)
        if after != tune_part:   # tuning measured while planning: the plan of the library now
            key = plan_cache.plan_key(graph, strategy, target.name, after)
        plan_cache.store(plan, target.name, key)
        plan = plan.with_stages({**dict(plan.stages),
                                 "plan_cache_miss": lookup + time.perf_counter() - start})
    return plan


__all__ = ["FREE", "KERNEL", "LIBRARY", "FusionPlan", "Group", "plan_none", "make_plan",
           "PLANNERS"]
