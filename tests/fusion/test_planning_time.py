"""Planning time on the zoo's 400-step LSTM (about 19,000 IR ops, forward + backward, as
the cpu target's exact min-cut partitioner splits it; over 20,000 with AOTAutograd's
default partitioner, which saves more and recomputes nothing).

One capture (Dynamo + AOTAutograd tracing dominates this test's minute) serves
both planners. Budgets on the 2-core CI machine: stitch (the default, which also
runs the xla baseline to seed its ILP) <= 10 s, xla alone < 5 s.
"""
import time
from functools import lru_cache

import pytest

from bench.plan_table import capture
from fusionstitch.fusion.plan import plan_none
from fusionstitch.fusion.stitch import plan_stitch
from fusionstitch.fusion.xla import plan_xla
from fusionstitch.report.explain import count_ops


@lru_cache(maxsize=None)
def lstm_400():
    graphs = capture("lstm", "full", steps=400)
    assert sum(count_ops(g) for g in graphs) > 18_000
    return graphs


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.parametrize("planner,budget", [(plan_stitch, 10.0), (plan_xla, 5.0)])
def test_lstm_400_steps_plans_within_budget(planner, budget):
    graphs = lstm_400()
    start = time.perf_counter()
    plans = [planner(g, "cuda") for g in graphs]
    elapsed = time.perf_counter() - start
    stages = {}
    for p in plans:
        for k, v in p.stages:
            stages[k] = stages.get(k, 0.0) + v
    print(f"{planner.__name__}: {elapsed:.2f} s; per stage: "
          + ", ".join(f"{k} {v:.2f} s" for k, v in stages.items()))
    assert elapsed <= budget, f"{planner.__name__} took {elapsed:.2f} s > {budget} s"
    for g, p in zip(graphs, plans):
        p.validate()
        assert p.num_kernels < plan_none(g).num_kernels
    if planner is plan_stitch:
        assert set(stages) >= {"candidates", "baseline", "scores", "ilp", "packing", "plan"}
