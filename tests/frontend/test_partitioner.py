"""How training graphs are split (frontend/decompositions.py's `partitioner`,
FUSIONSTITCH_PARTITION): AOTAutograd's default by default; the min-cut rematerialisation
partitioner (Inductor's) on request, whose forward saves fewer tensors (the fuzzer's
regression in tests/fuzz/regressions.py is why min-cut is not the default)."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.decompositions import partitioner

pytestmark = pytest.mark.usefixtures("strict_fresh")


def _step(w, x):
    h = torch.tanh(x @ w).sin() * 2 + x.cos().mean()
    return (h.exp() * h).mean()


def _saved(monkeypatch, choice):
    """(number of forward outputs, gradient of w) with partitioner `choice`."""
    monkeypatch.setenv("FUSIONSTITCH_PARTITION", choice)
    torch._dynamo.reset()
    sink = []
    torch.manual_seed(0)
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)
    comp = torch.compile(_step, backend=fusionstitch.backend(target="cpu", _sink=sink))
    comp(w, x).backward()
    [fwd] = [g for g in sink if g.kind == "forward"]
    outs = len(next(n for n in fwd.gm.graph.nodes if n.op == "output").args[0])
    return outs, w.grad


def test_the_min_cut_forward_saves_fewer_tensors_and_the_gradients_match(monkeypatch):
    n_default, g_default = _saved(monkeypatch, "default")
    n_mincut, g_mincut = _saved(monkeypatch, "mincut")
    assert n_mincut < n_default
    torch.manual_seed(0)
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)
    _step(w, x).backward()
    for g in (g_default, g_mincut):
        torch.testing.assert_close(g, w.grad, rtol=1e-4, atol=1e-6)


def test_an_unknown_partitioner_is_refused(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_PARTITION", "greedy")
    with pytest.raises(ValueError, match="FUSIONSTITCH_PARTITION='greedy'"):
        partitioner()
