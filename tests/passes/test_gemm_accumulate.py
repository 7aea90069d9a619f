"""accumulate_products: an f32/f64 sum of matrix products (a shared weight's gradient)
becomes a chain of addmms into the running sum; any other add of a product is left alone."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes import accumulate_products

from helpers_passes import assert_left_alone, random_inputs, run_graph


def _ops(g):
    return [n.op for n in g.ops]


def _close(before, after, rtol=1e-5, atol=1e-5):
    for seed in (0, 1):
        xs = random_inputs(before, seed)
        for a, b in zip(run_graph(before, xs), run_graph(after, xs), strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def _sum_of_products(k, dtype="f32", m=6, n=5, depth=3):
    b = GraphBuilder()
    w = [(b.param((m, depth), dtype), b.param((depth, n), dtype)) for _ in range(k)]
    prods = [b.op("mm.default", x, y) for x, y in w]
    acc = prods[0]
    for p in prods[1:]:
        acc = b.op("add.Tensor", acc, p)
    return b.build(acc), acc


@pytest.mark.parametrize("k", [2, 3, 7])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_a_sum_of_products_becomes_a_chain_of_addmms(k, dtype):
    g, total = _sum_of_products(k, dtype)
    new = accumulate_products(g)
    assert _ops(new) == ["mm.default"] + ["addmm.default"] * (k - 1)
    assert new[total.name].op == "addmm.default"      # the sum keeps its name
    # each link adds into the one before it
    links = [n for n in new.ops if n.op == "addmm.default"]
    for prev, link in zip([new.ops[0]] + links, links):
        assert link.args[0].name == prev.name
    _close(g, new)


def test_the_product_may_come_first_or_second():
    b = GraphBuilder()
    x, y, u, v, p, q = (b.param(s, "f32") for s in [(4, 3), (3, 5)] * 3)
    s1 = b.op("add.Tensor", b.op("mm.default", x, y), b.op("mm.default", u, v))
    s2 = b.op("add.Tensor", b.op("mm.default", p, q), s1)     # product, then the sum
    g = b.build(s2)
    new = accumulate_products(g)
    assert _ops(new) == ["mm.default", "addmm.default", "addmm.default"]
    _close(g, new)


def test_a_biased_gemm_is_an_addend_too():
    # an RNN's i2h(x) + h2h(h), the second linear without a bias
    b = GraphBuilder()
    bias, x, w, h, u = b.param((5,), "f32"), b.param((4, 3), "f32"), b.param((3, 5), "f32"), \
        b.param((4, 6), "f32"), b.param((6, 5), "f32")
    s = b.op("add.Tensor", b.op("addmm.default", bias, x, w), b.op("mm.default", h, u))
    g = b.build(s)
    new = accumulate_products(g)
    assert _ops(new) == ["addmm.default", "addmm.default"]
    _close(g, new)


def _left_alone(build):
    assert_left_alone(accumulate_products, build)


def test_a_residual_add_stays_elementwise():
    # the addend is no GEMM's result: the add fuses with what is around it
    _left_alone(lambda b: [b.op("add.Tensor", b.op("mm.default", b.param((4, 3), "f32"),
                                                   b.param((3, 5), "f32")),
                                b.param((4, 5), "f32"))])


def test_a_product_read_elsewhere_is_kept():
    def build(b):
        p = b.op("mm.default", b.param((4, 3), "f32"), b.param((3, 5), "f32"))
        q = b.op("mm.default", b.param((4, 2), "f32"), b.param((2, 5), "f32"))
        # both products are read twice: neither can be folded
        return [b.op("add.Tensor", p, q), b.op("neg.default", p), b.op("neg.default", q)]
    _left_alone(build)


def test_a_product_that_is_a_graph_output_is_kept():
    def build(b):
        p = b.op("mm.default", b.param((4, 3), "f32"), b.param((3, 5), "f32"))
        q = b.op("mm.default", b.param((4, 2), "f32"), b.param((2, 5), "f32"))
        return [b.op("add.Tensor", p, q), p, q]
    _left_alone(build)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_types_keep_the_rounded_product(dtype):
    g, _ = _sum_of_products(3, dtype)
    assert accumulate_products(g) is g


def test_a_broadcast_addend_and_an_alpha_are_left_alone():
    def broadcast(b):
        row = b.op("mm.default", b.param((1, 3), "f32"), b.param((3, 5), "f32"))
        p = b.op("mm.default", b.param((4, 3), "f32"), b.param((3, 5), "f32"))
        return [b.op("add.Tensor", p, row)]        # [4, 5] + [1, 5]
    _left_alone(broadcast)

    def alpha(b):
        p = b.op("mm.default", b.param((4, 3), "f32"), b.param((3, 5), "f32"))
        q = b.op("mm.default", b.param((4, 3), "f32"), b.param((3, 5), "f32"))
        return [b.op("add.Tensor", p, q, alpha=2.0)]
    _left_alone(alpha)


def test_a_shared_weights_gradient_is_a_chain_and_matches_eager():
    # one weight used at four steps: its gradient sums four products
    torch.manual_seed(0)
    w = torch.randn(24, 32, requires_grad=True)
    xs = torch.randn(4, 8, 24)

    def f(w, xs):
        h = torch.zeros(8, 32)
        for t in range(4):
            h = torch.tanh(xs[t] @ w + h)
        return h.square().sum()
    torch._dynamo.reset()
    comp = torch.compile(f, backend=fusionstitch.backend(target="cpu"))
    for _ in range(3):
        w.grad = None
        comp(w, xs).backward()
    got = w.grad.clone()
    w.grad = None
    f(w, xs).backward()
    torch.testing.assert_close(got, w.grad, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    rep = fusionstitch.explain(f, w, xs, target="cpu")
    backward = next(g for g in rep.graphs if g.kind == "backward")
    ops = [n.op for n in backward.plan.graph.nodes]
    assert ops.count("addmm.default") == 3 and "mm.default" in ops


@pytest.mark.parametrize("target", ["cpu", "interpret"])
def test_a_chain_with_an_epilogue_computes_on_every_target(target, monkeypatch):
    # the Triton side may fuse the addmms into kernels (a 2-D addend read as a bias)
    if target == "interpret":
        pytest.importorskip("triton")
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    gen = torch.Generator().manual_seed(0)
    xs, ws = torch.randn(3, 16, 8, generator=gen), torch.randn(3, 8, 12, generator=gen)

    def fn(xs, ws):
        acc = xs[0] @ ws[0] + xs[1] @ ws[1] + xs[2] @ ws[2]
        return torch.tanh(acc) * 2
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    got = torch.compile(fn, backend=fusionstitch.backend(target=target))(xs, ws)
    torch.testing.assert_close(got, fn(xs, ws), rtol=1e-5, atol=1e-5)
    assert fusionstitch.stats()["fallbacks"] == 0
    torch._dynamo.reset()
