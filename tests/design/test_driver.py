"""The driver (fusionstitch/compile.py): one list of stages, each output flowing on.

The lowered plan the `lower` stage returns is what the runtime builds (no group is
lowered again, no memo stands between them), the debug folder's files are numbered in
stage order, every target the options accept is one Target object, and the fuel knob
is read by the driver alone and obeyed by every planner.
"""
import os

import pytest
import torch

from fusionstitch import compile as driver
from fusionstitch import config
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion.lowered import LoweredPlan
from fusionstitch.ir.text import parse
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


# a softmax into a GEMM whose epilogue ends in a reduction: each planner but `none` fuses
# several groups here
FUSIBLE = """graph g(%x: f32[16,64], %w: f32[64,64], %b: f32[64]) {
  %m: f32[16,1] = amax.default(%x, [-1], True)
  %s: f32[16,64] = sub.Tensor(%x, %m)
  %e: f32[16,64] = exp.default(%s)
  %z: f32[16,1] = sum.dim_IntList(%e, [-1], True)
  %d: f32[16,64] = div.Tensor(%e, %z)
  %mm: f32[16,64] = mm.default(%d, %w)
  %a: f32[16,64] = add.Tensor(%mm, %b)
  %r: f32[16,64] = relu.default(%a)
  %t: f32[16,64] = tanh.default(%r)
  %q: f32[16,64] = mul.Tensor(%t, %x)
  %u: f32[16,1] = sum.dim_IntList(%q, [-1], True)
  %v: f32[16,64] = sub.Tensor(%q, %u)
  return (%v, %a)
}"""


def _fused(strategy, monkeypatch, fuel):
    """The multi-op groups of FUSIBLE's plan, compiled by the driver under `fuel`."""
    if fuel is None:
        monkeypatch.delenv("FUSIONSTITCH_FUEL", raising=False)
    else:
        monkeypatch.setenv("FUSIONSTITCH_FUEL", str(fuel))
    req = driver.Request("g_fuel", strategy, resolve("cpu"), lambda: parse(FUSIBLE),
                         execute=False)
    plan = driver.compile_graph(req).plan
    assert req.fuel == fuel
    assert (fuel is None) or "plan_cache" not in dict(plan.stages)   # planned, not loaded
    return [g.nodes for g in plan.groups if len(g.nodes) > 1]


@pytest.mark.parametrize("strategy", ["none", "xla", "stitch"])
def test_fuel_is_read_by_the_driver_and_every_planner_obeys_it(strategy, monkeypatch):
    """FUSIONSTITCH_FUEL=k, read once per compilation by the driver and handed to the
    planner: 0 gives one op per group, k at most k fused groups (xla: k joins); a plan
    made under fuel is never the cached one, nor cached."""
    reads = []
    knob = config.fuel
    monkeypatch.setattr(config, "fuel", lambda: reads.append(1) or knob())
    full = _fused(strategy, monkeypatch, None)          # planned and cached
    assert _fused(strategy, monkeypatch, 0) == []
    limited = {k: _fused(strategy, monkeypatch, k) for k in range(1, 4)}
    for k, groups in limited.items():
        assert len(groups) <= k
        if strategy == "xla":
            assert sum(len(g) - 1 for g in groups) <= k
        if strategy == "stitch":   # the ILP's choice does not depend on the fuel
            assert set(limited.get(k - 1, [])) <= set(groups)
    if strategy != "none":
        assert len(full) >= 2 and len(limited[1]) == 1
    assert _fused(strategy, monkeypatch, None) == full   # the fueled plans were not stored
    assert len(reads) == 6


def test_fuel_is_read_in_config_only():
    """No module but config reads the fuel knob (the driver hands its value on)."""
    import ast
    import pathlib
    root = pathlib.Path(driver.__file__).parent
    readers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                     if any(isinstance(n, ast.Constant) and n.value == "FUSIONSTITCH_FUEL"
                            for n in ast.walk(ast.parse(p.read_text()))))
    assert readers == ["config.py"]


@pytest.mark.parametrize("value", ["-1", "two"])
def test_fuel_that_is_no_count_is_an_error(value, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_FUEL", value)
    with pytest.raises(ValueError, match="FUSIONSTITCH_FUEL"):
        driver.compile_graph(driver.Request("g", "xla", resolve("cpu"), _graph,
                                            execute=False))
