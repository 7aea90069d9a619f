"""Every zoo workload, compiled with backend="fusionstitch", matches eager on CPU.

Outputs, parameter gradients and in-place-updated inputs are compared with a
relative error (max |diff| / max |eager|) of at most 1e-4 in fp32, and one
compiled step launches exactly the kernels that explain() plans.
"""
import contextlib

import pytest
import torch

import fusionstitch
import known_fallbacks
from bench import workloads as W

RTOL = 1e-4


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    if ref.numel() == 0:
        return 0.0
    diff = (got.double() - ref.double()).abs().max().item()
    return diff / max(ref.double().abs().max().item(), 1e-12)


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()


# target "interpret": the generated Triton kernels, run by Triton's interpreter on CPU
@pytest.mark.parametrize("strategy,target", [("none", "auto"), ("stitch", "auto"),
                                             ("stitch", "interpret")])
@pytest.mark.parametrize("name", W.names())
def test_zoo_matches_eager(name, strategy, target):
    eager, compiled = W.make(name, "small"), W.make(name, "small")
    ref = W.step(eager)
    fn = torch.compile(compiled.fn, backend=fusionstitch.backend(strategy=strategy,
                                                                 target=target))
    fusionstitch.reset_stats()
    got = W.step(compiled, fn)
    launched = fusionstitch.stats()
    assert len(got) == len(ref)
    for i, (g, r) in enumerate(zip(got, ref)):
        assert g.shape == r.shape and g.dtype == r.dtype, f"{name}: result {i}"
        err = rel_err(g, r)
        assert err <= RTOL, (f"{name}: result {i} relative error {err:.2e}; repro: "
                             f"pytest tests/frontend/test_zoo_numerics.py -k '{name}'")
    assert launched["kernels_launched"] > 0
    # the plan is executed as planned: one compiled step launches what explain() plans
    fresh = W.make(name, "small")
    with torch.no_grad() if fresh.workload.mode == "inference" else contextlib.nullcontext():
        rep = fusionstitch.explain(fresh.fn, *fresh.args, strategy=strategy, target=target)
    known_fallbacks.check(launched, rep, name)
    assert launched["kernels_launched"] == rep.num_kernels, name
    assert launched["library_calls"] == rep.num_library_calls, name
    assert rep.num_ops >= rep.num_kernels + rep.num_library_calls


def test_zoo_second_step_reuses_specialisation():
    inst = W.make("mlp", "small")
    fn = torch.compile(inst.fn, backend="fusionstitch")
    W.step(inst, fn)
    fusionstitch.reset_stats()
    W.step(inst, fn)
    assert fusionstitch.stats()["compiles"] == 0
