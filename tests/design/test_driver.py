"""The driver (fusionstitch/compile.py): one list of stages, each output flowing on.

The lowered plan the `lower` stage returns is what the runtime builds (no group is
lowered again, no memo stands between them), the debug folder's files are numbered in
stage order, and every target the options accept is one Target object.
"""
import os

import torch

from fusionstitch import compile as driver
from fusionstitch import config
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion.lowered import LoweredPlan
from fusionstitch.runtime.program import Program
from fusionstitch.targets import TARGETS, resolve


def _graph():
    b = GraphBuilder("g")
    x = b.param((4, 8), name="x")
    e = b.op("exp.default", x, name="e")
    s = b.op("sum.dim_IntList", e, (1,), True, name="s")
    d = b.op("div.Tensor", e, s, name="d")
    return b.build(d)


def test_stages_in_order():
    assert [name for name, _, _ in driver.STAGES] == [
        "frontend", "canonicalise", "plan", "lower", "build", "program"]
    assert all(reason for _, _, reason in driver.STAGES)


def test_lowered_plan_flows_to_the_program(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_DEBUG_DIR", str(tmp_path))
    req = driver.Request("g_driver", "stitch", resolve("interpret"), _graph)
    done = driver.compile_graph(req)
    assert list(done.seconds) == [name for name, _, _ in driver.STAGES]
    assert isinstance(done.lowered, LoweredPlan) and done.lowered.plan is done.plan
    assert done.program.lowered is done.lowered
    steps = done.program.kernel_steps
    assert steps and all(steps[gid].kernel is k for gid, k in done.lowered.kernels.items())
    assert done.run is done.program
    x = torch.randn(4, 8)
    (out,) = done.run([x])
    torch.testing.assert_close(out, torch.softmax(x, 1))
    files = sorted(os.listdir(tmp_path / "g_driver"))
    numbered = [f for f in files if f[:2].isdigit()]   # in stage order, passes between
    assert numbered[0] == "01_frontend.txt" and numbered[-1].endswith("_stitch_plan.txt")
    assert [int(f[:2]) for f in numbered] == list(range(1, len(numbered) + 1))
    assert "kernels" in files and "repro.py" in files


def test_program_of_a_plan_lowers_it_for_its_own_target():
    """Program(plan) (repro scripts, tests) lowers the plan itself; a lowered plan made
    for another target than the one that runs it is lowered again for that one."""
    lowered = driver.lower(driver.Request("g", "stitch", resolve("cpu"), _graph),
                           driver.plan(driver.Request("g", "stitch", resolve("cpu"), _graph),
                                       _graph()))
    assert lowered.kernels
    assert Program(lowered, target="torch").lowered.kernels == {}


def test_every_target_is_an_object():
    assert config.target_names() == ("auto", "cpu", "cuda", "interpret")
    assert set(TARGETS) == set(config.target_names()) - {"auto"} | {"torch"}
    for name, t in TARGETS.items():
        assert resolve(name) is t and resolve(t) is t and str(t) == name
        assert t.generates_kernels == (t.language is not None)
    assert resolve("cpu").staged_bytes == 0 and resolve("cuda").staged_bytes > 0
