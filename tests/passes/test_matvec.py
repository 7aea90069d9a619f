"""decompose_matvec: f32/f64 mm/bmm with one output row or column become mul + sum, which
fusion can stitch to their neighbours; everything else is left alone."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes import decompose_matvec

from helpers_passes import random_inputs, run_graph


def _ops(g):
    return [n.op for n in g.ops]


def _product_then_neg(a_shape, b_shape, dtype):
    """(graph, the product's node): neg(bmm or mm of two parameters)."""
    b = GraphBuilder()
    x, y = b.param(a_shape, dtype), b.param(b_shape, dtype)
    out = b.op("bmm.default" if len(a_shape) == 3 else "mm.default", x, y)
    return b.build(b.op("neg.default", out)), out


def _close(before, after, dtype=torch.float32):
    for seed in (0, 1):
        xs = random_inputs(before, seed)
        for a, b in zip(run_graph(before, xs), run_graph(after, xs), strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((4, 5, 6), (4, 6, 1)),      # bmm, one column: reduce along rows of a
    ((4, 1, 6), (4, 6, 7)),      # bmm, one row: reduce along columns of b
    ((4, 1, 6), (4, 6, 1)),      # a dot product per batch entry
    ((5, 6), (6, 1)),            # mm
    ((1, 6), (6, 7)),
])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_vector_products_become_mul_and_sum(a_shape, b_shape, dtype):
    g, out = _product_then_neg(a_shape, b_shape, dtype)
    new = decompose_matvec(g)
    assert _ops(new) == ["permute.default", "mul.Tensor", "sum.dim_IntList", "neg.default"]
    assert new[out.name].type == g[out.name].type     # the sum keeps the product's name
    _close(g, new)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((4, 5, 1), (4, 1, 7)),      # bmm over one term: the backward of a matrix-vector product
    ((5, 1), (1, 7)),            # mm
    ((4, 1, 1), (4, 1, 7)),
])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
def test_outer_products_become_a_mul(a_shape, b_shape, dtype):
    # one product per element, rounded once either way: bitwise equal in every float type
    g, out = _product_then_neg(a_shape, b_shape, dtype)
    new = decompose_matvec(g)
    assert _ops(new) == ["mul.Tensor", "neg.default"]
    assert new[out.name].type == g[out.name].type
    for seed in (0, 1):
        xs = random_inputs(g, seed)
        for p, q in zip(run_graph(g, xs), run_graph(new, xs), strict=True):
            assert p.dtype == q.dtype and torch.equal(p, q)


@pytest.mark.parametrize("a_shape, b_shape, dtype", [
    ((4, 5, 6), (4, 6, 7), "f32"),   # a real GEMM
    ((4, 5, 6), (4, 6, 1), "bf16"),  # mul would round each product before the sum
    ((4, 5, 6), (4, 6, 1), "f16"),
])
def test_other_products_are_left_alone(a_shape, b_shape, dtype):
    b = GraphBuilder()
    x, y = b.param(a_shape, dtype), b.param(b_shape, dtype)
    g = b.build(b.op("bmm.default", x, y))
    assert decompose_matvec(g) is g


def test_compiled_matvec_fuses_with_its_neighbours():
    # weighted sum of rows then an elementwise epilogue: one kernel, no GEMM call
    def f(w, u):
        z = torch.bmm(torch.softmax(w, -1).unsqueeze(1), u).squeeze(1)
        return torch.tanh(z) * 2
    w, u = torch.randn(8, 50), torch.randn(8, 50, 16)
    torch._dynamo.reset()
    rep = fusionstitch.explain(f, w, u, target="cpu")
    assert rep.num_library_calls == 0
    torch._dynamo.reset()
    out = torch.compile(f, backend=fusionstitch.backend(target="cpu"))(w, u)
    torch.testing.assert_close(out, f(w, u), rtol=1e-5, atol=1e-6)
