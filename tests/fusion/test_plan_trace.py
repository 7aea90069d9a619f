"""Report.why_not_fused says the reason the planner used: its plan trace (fusion/trace.py).

The zoo walk: for every zoo workload (small size), strategy and target below, every
edge between two nodes in different groups gets the recorded decision, and that
decision is true of the plan: a legality rejection is reproduced by the same checks,
an unfusible op is unfusible, a candidate's fate names a candidate holding both that
no final group holds, a split names a planned group that held both. Then hand cases
with the exact reason: an op without a code generation rule, a cycle, the cost model,
a library call, a plan from the plan cache.
"""
from functools import lru_cache

import pytest
import torch

import fusionstitch
from bench import workloads as W
from bench.plan_table import capture
from fusionstitch.fusion import make_plan
from fusionstitch.fusion.legality import Legality
from fusionstitch.fusion.plan import is_input
from fusionstitch.fusion.stitch import plan_stitch, stitch_checks
from fusionstitch.fusion.trace import planned_trace
from fusionstitch.report.explain import GraphReport, Report

CASES = [("stitch", "cpu"), ("stitch", "cuda"), ("xla", "cpu")]


@lru_cache(maxsize=None)
def graphs(name):
    return tuple(capture(name, "small"))


def boundaries(plan):
    """(producer, consumer) edges whose ends are ops in different groups."""
    owner = {n: g.id for g in plan.groups for n in g.nodes}
    for node in plan.graph.nodes:
        if is_input(node):
            continue
        for i in dict.fromkeys(node.inputs):
            if i in owner and owner[i] != owner[node.name]:
                yield i, node.name


def check_true(plan, target, v, a, b):
    """The recorded decision `v` is a fact about this planning run."""
    graph, both = plan.graph, {a, b}
    final = [frozenset(g.nodes) for g in plan.groups]
    if v.stage == "fusible":
        (n,) = v.nodes
        d = Legality(graph, target).op(n)
        assert n in both and not d and d.reason == v.reason
    elif v.stage in ("legality", "profit"):
        assert both <= v.nodes
        d = stitch_checks(graph, target).check(v.nodes)
        assert not d and d.reason == v.reason
        # the stage is the check that refused: legality's rules, or a profitability rule
        assert (d.rule == "recompute") == (v.stage == "profit"), (d.rule, v.stage)
    elif v.stage in ("score", "ilp", "cycle", "merge") or v.stage.startswith("xla:"):
        assert both <= v.nodes and not any(v.nodes <= g for g in final)
    elif v.stage == "legalize":
        assert v.nodes & both
    elif v.stage == "views":
        assert v.subject in both and both <= v.nodes
    else:
        assert v.stage == "generators", v
        trace = plan.trace
        assert not any(both <= p for p in trace.candidates)
        assert not any(both <= p for p in trace.rejected)
        assert not any(both <= p for p in trace.unprofitable)


@pytest.mark.parametrize("strategy,target", CASES)
@pytest.mark.parametrize("name", W.names())
def test_every_zoo_boundary_has_the_recorded_reason(name, strategy, target):
    report = Report(strategy, target)
    stages = {}
    for g in graphs(name):
        plan = make_plan(g, strategy, target, use_cache=False)
        report.graphs = [GraphReport(g.name, "x", 0, 0, 0, 0, 0.0, plan)]
        for a, b in boundaries(plan):
            v = plan.trace.why_apart(a, b)
            check_true(plan, target, v, a, b)
            text = report.why_not_fused(a, b)
            assert v.reason in text and "could fuse" not in text, text
            stages[v.stage] = stages.get(v.stage, 0) + 1
    print(name, strategy, target, stages)


def explained(fn, *args, strategy="stitch", target="cpu"):
    return fusionstitch.explain(fn, *args, strategy=strategy, target=target)


def test_no_code_generation_rule():
    # stitch asks the target's code generator per op (legality.Legality.op): erfinv is
    # never in a candidate
    r = explained(lambda x: torch.erfinv(x * 0.1) + 1, torch.randn(64, 64))
    text = r.why_not_fused("mul", "erfinv")
    assert "[fusible]" in text and "the cpu code generator" in text, text
    assert "no code generation rule for erfinv.default" in text, text
    # xla's rules do not depend on the target: code-generation legality splits its group
    r = explained(lambda x: torch.erfinv(x * 0.1) + 1, torch.randn(64, 64), strategy="xla")
    text = r.why_not_fused("mul", "erfinv")
    assert "[legalize]" in text and "the cpu code generator cannot lower it" in text, text
    assert "no code generation rule for erfinv.default" in text, text


def test_library_call():
    r = explained(lambda x, w: torch.sin(x) @ w, torch.randn(8, 8), torch.randn(8, 8))
    g = r.graphs[0].plan.graph
    mm = next(n.name for n in g.nodes if n.op == "mm.default")
    text = r.why_not_fused("sin", mm)
    assert "[fusible]" in text and "mm.default is a library call (GEMM)" in text, text


def test_cycle():
    """relu feeds a GEMM and the add that reads the GEMM: one kernel of relu and add
    would both feed and read the library call."""
    def fn(x, w):
        a = torch.relu(x)
        return a + a @ w
    r = explained(fn, torch.randn(8, 8), torch.randn(8, 8))
    g = r.graphs[0].plan.graph
    add = next(n.name for n in g.nodes if n.op == "add.Tensor")
    text = r.why_not_fused("relu", add)
    assert "cycle" in text, text


def test_cost_model(monkeypatch):
    """A score that gives every candidate no gain (no xla baseline to keep, no merging
    after the ILP, which scores with the model): the reason is the cost model's."""
    from fusionstitch.fusion import PLANNERS, stitch
    monkeypatch.delitem(PLANNERS, "xla")
    monkeypatch.setattr(stitch, "merge_kernels", lambda graph, groups, *a: groups)
    monkeypatch.setitem(PLANNERS, "stitch", lambda graph, target, fuel=None: plan_stitch(
        graph, target, score_hook=lambda g, p, d: -1.0, fuel=fuel))
    r = explained(lambda x: torch.exp(x) * 2, torch.randn(64, 64))
    text = r.why_not_fused("exp", "mul")
    assert "[score]" in text and "no gain" in text, text


def test_cached_plan_is_explained_by_planning_again(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    fn = lambda x: torch.erfinv(x * 0.1) + 1   # noqa: E731
    explained(fn, torch.randn(32, 32))
    r = explained(fn, torch.randn(32, 32))
    plan = r.graphs[0].plan
    assert plan.trace is None, "expected the second explain to load the plan from the cache"
    assert planned_trace(plan, "cpu") is not None
    assert "no code generation rule for erfinv.default" in r.why_not_fused("mul", "erfinv")
