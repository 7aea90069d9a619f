"""unbroadcast_bmm: a bmm of a b-only and a k-only broadcast (torch.matmul of [B,1,L,D] and
[1,K,D,C]) becomes one mm; other bmm are left alone."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.graph import Ref
from fusionstitch.passes import unbroadcast_bmm
from fusionstitch.passes.dce import dce

from helpers_passes import random_inputs, run_graph


def _broadcast_bmm(e_shape, w_shape, B, K, dtype="f32"):
    """AOTAutograd's spelling of matmul(e, w) for rank-4 broadcasting operands."""
    b = GraphBuilder()
    e, w = b.param(e_shape, dtype), b.param(w_shape, dtype)
    L, D, C = e_shape[-2], e_shape[-1], w_shape[-1]
    ex = b.op("clone.default", b.op("expand.default", e, (B, K, L, D)),
              memory_format=torch.contiguous_format)
    wx = b.op("clone.default", b.op("expand.default", w, (B, K, D, C)),
              memory_format=torch.contiguous_format)
    out = b.op("bmm.default", b.op("view.default", ex, (B * K, L, D)),
               b.op("view.default", wx, (B * K, D, C)))
    return b.build(b.op("view.default", out, (B, K, L, C)))


def _close(before, after):
    for seed in (0, 1):
        xs = random_inputs(before, seed)
        for a, b in zip(run_graph(before, xs), run_graph(after, xs), strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("e_shape, w_shape", [
    ((3, 1, 5, 4), (1, 2, 4, 6)),
    ((3, 1, 5, 4), (2, 4, 6)),       # a rank-3 weight broadcast over b
])
def test_bmm_of_b_and_k_broadcasts_becomes_one_mm(e_shape, w_shape):
    g = _broadcast_bmm(e_shape, w_shape, 3, 2)
    new = dce(unbroadcast_bmm(g))
    ops = [n.op for n in new.ops]
    assert "bmm.default" not in ops and ops.count("mm.default") == 1
    assert "expand.default" not in ops          # no broadcast is materialised any more
    # the weight's blocks are laid side by side by a copy (a kernel's), then viewed: no
    # reshape of a permute, which torch would copy at every call
    nodes = {n.name: n for n in new.ops}
    for n in new.ops:
        if n.op == "reshape.default" and isinstance(n.args[0], Ref):
            assert nodes.get(n.args[0].name) is None or \
                nodes[n.args[0].name].op != "permute.default", n
    assert "clone.default" in ops
    _close(g, new)


@pytest.mark.parametrize("e_shape, w_shape", [
    ((3, 2, 5, 4), (1, 2, 4, 6)),    # e varies with k too: a real batched GEMM
    ((3, 1, 5, 4), (3, 1, 4, 6)),    # w varies with b: not one GEMM
])
def test_other_broadcasts_are_left_alone(e_shape, w_shape):
    g = _broadcast_bmm(e_shape, w_shape, 3, 2)
    assert unbroadcast_bmm(g) is g


def test_compiled_broadcast_matmul_matches_eager_and_calls_no_bmm():
    def f(e, w, v):
        u = torch.matmul(e.unsqueeze(1), w.unsqueeze(0))      # [B, K, L, C]
        return torch.relu(u).sum(2) * v
    e, w, v = torch.randn(6, 7, 8), torch.randn(3, 8, 5), torch.randn(6, 3, 5)
    torch._dynamo.reset()
    rep = fusionstitch.explain(f, e, w, v, target="cpu")
    ops = [n.op for g in rep.graphs for n in g.plan.graph.nodes]
    assert "bmm.default" not in ops and "mm.default" in ops
    torch._dynamo.reset()
    out = torch.compile(f, backend=fusionstitch.backend(target="cpu"))(e, w, v)
    torch.testing.assert_close(out, f(e, w, v), rtol=1e-5, atol=1e-5)
