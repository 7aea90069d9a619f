"""A group's schedule is decided once, by the plan, and lowering reads it from there.

The planner gives every kernel group its schedule (`Group.schedule`, schedule/propagate.py's
`group_schedule`); the driver's `lower` stage (fusion/lowered.py, codegen/lower.py) lowers
each group in that schedule instead of deciding one again. Cases: lowering a plan with the
schedule analysis made to fail still works and gives the same kernels; every kernel group
of the golden workloads' plans carries what the analysis gives; a graph of symbolic sizes
keeps the guards its schedule relied on; a schedule that is not the group's is refused.
"""
import os
import re
from dataclasses import replace

import pytest
import sympy

from fusionstitch import compile as driver
from fusionstitch.codegen import lower as lower_mod
from fusionstitch.codegen.kernel import kernel_text
from fusionstitch.codegen.lower import Unsupported, lower_group
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion import make_plan
from fusionstitch.fusion.codegen_legal import legalize
from fusionstitch.fusion.lowered import lower_plan
from fusionstitch.fusion.plan import KERNEL, FusionPlan, plan_from_groups
from fusionstitch.ir import symbolic
from fusionstitch.ir.graph import TensorType
from fusionstitch.ir.text import parse
from fusionstitch.schedule import compose, propagate
from fusionstitch.schedule.propagate import group_schedule
from fusionstitch.targets import resolve
from fusionstitch.targets.source import kernel_source

GOLDENS = os.path.join(os.path.dirname(__file__), "..", "codegen", "goldens")
WORKLOADS = sorted(f[:-3] for f in os.listdir(GOLDENS) if f.endswith(".ir"))


def golden_graphs(name: str):
    """The canonicalised graphs of a zoo workload's small step, as the golden-source test
    stores them (no Dynamo)."""
    with open(os.path.join(GOLDENS, f"{name}.ir")) as f:
        text = f.read()
    return [parse(g) for g in re.split(r"(?m)^(?=graph )", text) if g.strip()]


@pytest.fixture(autouse=True)
def _host_free(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CPU_VECMATH", "0")
    monkeypatch.delenv("FUSIONSTITCH_FUEL", raising=False)
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")


def refuse_to_schedule(monkeypatch):
    """Every way of deciding a schedule raises from now on (in the modules that decide
    one and in lowering's own names for them)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a schedule was decided again after planning")

    for module in (propagate, compose, lower_mod):
        for name in ("group_schedule", "group_spaces", "component_space", "composition"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("name", ["layernorm_softmax_gelu", "mlp"])
def test_lowering_a_plan_reads_the_schedule_it_carries(name, target, monkeypatch):
    """With the schedule analysis failing, the driver's lower stage and the debug
    folder's sources still lower every kernel group, to the same kernels."""
    req = driver.Request(name, "stitch", resolve(target), lambda: None)
    plans = [make_plan(g, "stitch", target, use_cache=False) for g in golden_graphs(name)]
    want = [{gid: kernel_text(k) for gid, k in lower_plan(p, target).kernels.items()}
            for p in plans]
    assert any(want)
    refuse_to_schedule(monkeypatch)
    with pytest.raises(AssertionError, match="decided again"):
        lower_group(plans[0].graph, next(g.nodes for p in plans for g in p.groups
                                         if g.kind == KERNEL), "k")
    for plan, kernels in zip(plans, want):
        with symbolic.suspended():      # as compile_graph runs the stage
            lowered = driver.lower(req, plan)
        assert {gid: kernel_text(k) for gid, k in lowered.kernels.items()} == kernels
        for group in plan.groups:
            if group.kind == KERNEL:
                assert kernel_source(plan, group, target).source


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("strategy", ["none", "xla", "stitch"])
def test_every_kernel_group_carries_the_schedule_the_analysis_gives(strategy, target):
    for name in WORKLOADS:
        for g in golden_graphs(name):
            plan = make_plan(g, strategy, target, use_cache=False)
            for group in plan.groups:
                if group.kind != KERNEL:
                    assert group.schedule is None, (name, group)
                    continue
                assert group.schedule == group_schedule(g, group.nodes), (name, group)
                if len(group.nodes) > 1:
                    assert group.composition == compose.composition_of(group.schedule)
            # the plan's text shows the carried schedules
            assert all(f" {grp.schedule}:" in plan.to_text() for grp in plan.groups
                       if grp.kind == KERNEL)


def symbolic_loss():
    """amax over rows of x [s0, 16], summed to a scalar: the two reductions disagree, so
    the group runs staged in one program while s0 is small (a guard on s0)."""
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    rows = symbolic.make(8, s0)
    b = GraphBuilder("g")
    x = b.param((rows, 16), name="x")
    r = b.op("amax.default", x, [-1], name="r")
    t = b.op("sum.default", r, name="t")
    g = b.build(t)
    # (the builder infers types at the hints: give %r its symbolic size)
    return replace(g, nodes=tuple(n.replace(type=TensorType((rows,), "f32"))
                                  if n.name == "r" else n for n in g.nodes)), s0


def test_a_schedule_decided_while_planning_keeps_its_guards_for_the_kernel():
    g, s0 = symbolic_loss()
    with symbolic.suspended():        # planning records no guard of its own
        plan = plan_from_groups(g, [["r", "t"]], "t", compose=compose.composition)
        (group,) = [grp for grp in plan.groups if grp.kind == KERNEL]
        lowered = lower_plan(plan, "cpu")
    staged = sympy.Le(s0, propagate.STAGED_ELEMENTS_MAX)
    assert group.schedule.spaces[0].staged and staged in group.schedule.guards
    # the kernel's guards are what lowering finds when it decides the schedule itself
    assert lowered.kernels[group.id].guards == lower_group(g, ["r", "t"], "k").guards
    assert staged in lowered.kernels[group.id].guards


def test_a_schedule_of_another_group_is_refused():
    g = golden_graphs("softmax_chain")[0]
    plan = make_plan(g, "none", "cpu", use_cache=False)
    a, b = [grp for grp in plan.groups if grp.kind == KERNEL][:2]
    with pytest.raises(ValueError, match="another group's"):
        lower_group(g, a.nodes, "k", b.schedule)


def test_a_kernel_group_without_a_schedule():
    """A plan made by hand: legality gives its kernel groups their schedules; lowering
    refuses a kernel group that has none rather than deciding one."""
    g = golden_graphs("softmax_chain")[0]
    made = make_plan(g, "stitch", "cpu", use_cache=False)
    bare = FusionPlan(g, tuple(replace(grp, schedule=None) for grp in made.groups), "t")
    with pytest.raises(Unsupported, match="no schedule"):
        lower_plan(bare, "cpu")
    legal = legalize(bare, "cpu")
    assert legal is not bare
    assert [grp.schedule for grp in legal.groups] == [grp.schedule for grp in made.groups]
    assert lower_plan(legal, "cpu").kernels

