"""Ops called for their effect alone (no result: `torch._assert_async`, which an MoE
router's code calls): the graph compiles around them, they run where the graph has them
as library calls (no fallback, nothing unfused), are never dropped although nothing reads
their result, and raise as eager does. A graph holding one ran entirely through torch."""
import pytest
import torch

import fusionstitch
from fusionstitch.ir.graph import TupleType
from fusionstitch.ir.ops import EFFECTS, effect_type, lookup
from fusionstitch.passes._effects import has_side_effect


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "all")     # a fallback raises
    torch._dynamo.reset()
    fusionstitch.reset_stats()


def _checked(x):
    torch._assert_async((x > -100).all(), "too small")
    return (x * 2 + 1).softmax(-1)


def _checked_in_the_middle(x, w):
    h = torch.tanh(x @ w)
    torch._assert_async(torch.isfinite(h).all(), "not finite")
    return (h * 3).sum(-1)


@pytest.mark.parametrize("target", ["cpu", "interpret"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_an_assertion_runs_in_place_and_raises(target, dynamic):
    if target == "interpret":
        pytest.importorskip("triton")
    f = torch.compile(_checked, backend=fusionstitch.backend(target=target), dynamic=dynamic)
    x = torch.randn(4, 8)
    torch.testing.assert_close(f(x), _checked(x))
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0 and s["kernels_launched"] >= 1 and s["library_calls"] >= 1, s
    with pytest.raises(RuntimeError, match="too small"):
        f(torch.full((4, 8), -1000.0))
    torch.testing.assert_close(f(x), _checked(x))


def test_an_assertion_in_a_training_step():
    w = torch.randn(8, 8, requires_grad=True)
    f = torch.compile(_checked_in_the_middle, backend=fusionstitch.backend(target="cpu"))
    x = torch.randn(4, 8)
    f(x, w).sum().backward()
    got, w.grad = w.grad.clone(), None
    _checked_in_the_middle(x, w).sum().backward()
    torch.testing.assert_close(got, w.grad)
    assert fusionstitch.stats()["fallbacks"] == 0
    with pytest.raises(RuntimeError, match="not finite"):
        f(torch.full((4, 8), float("nan")), w)


def test_effect_ops_are_typed_kept_and_library_calls():
    for op in EFFECTS:
        assert effect_type(op) == TupleType(())
        assert has_side_effect(op)            # DCE, CSE, constant folding leave it
        assert lookup(op).category.value == "library"
    assert effect_type("add.Tensor") is None
