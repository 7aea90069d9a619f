"""hoist_views: selects and slices move above the elementwise ops they read and onto
the source of the broadcasts they read; the numbers are the same (each element is the
same op of the same operands), and nothing else is rewritten."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes import canonicalize, hoist_views

from helpers_passes import assert_left_alone, random_inputs, run_graph


def _ops(g):
    return [n.op for n in g.ops]


def _same(before, after):
    for seed in (0, 1):
        xs = random_inputs(before, seed)
        for a, b in zip(run_graph(before, xs), run_graph(after, xs), strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            assert torch.equal(a, b)


def _stacked_mean_backward(steps=5, b_=4, h=6, op="div.Scalar"):
    """The backward of mean(stack(outs, 1), 1) read per step: select(op(expand(g)), 1, t)."""
    b = GraphBuilder()
    g = b.param((b_, h), "f32")
    u = b.op("unsqueeze.default", g, 1)
    e = b.op("expand.default", u, [b_, steps, h])
    d = b.op(op, e, float(steps))
    outs = [b.op("neg.default", b.op("select.int", d, 1, t)) for t in range(steps)]
    return b.build(*outs)


def test_a_stacked_means_backward_reads_the_gradient_once():
    g = _stacked_mean_backward()
    new = canonicalize(g)
    ops = _ops(new)
    # one div of the [4, 6] gradient for every step; no broadcast, no select
    assert ops.count("div.Scalar") == 1 and "expand.default" not in ops \
        and "select.int" not in ops
    div = next(n for n in new.ops if n.op == "div.Scalar")
    assert div.type.shape == (4, 6)
    _same(g, new)


def test_slices_of_selects_and_a_chain_of_ops_move_too():
    b = GraphBuilder()
    x = b.param((3, 4, 8), "f32")
    y = b.op("mul.Tensor", b.op("exp.default", x), 2.0)     # two ops: two rounds
    outs = []
    for t in range(4):
        s = b.op("select.int", y, 1, t)
        outs += [b.op("neg.default", b.op("slice.Tensor", s, 1, 0, 4)),
                 b.op("neg.default", b.op("slice.Tensor", s, 1, 4, 8))]
    g = b.build(*outs)
    new = hoist_views(g)
    # every exp and mul reads a view of x: none is [3, 4, 8]
    assert all(n.type.shape != (3, 4, 8) for n in new.ops if n.op in ("exp.default", "mul.Tensor"))
    _same(g, new)


def test_a_0d_operand_stays_and_a_same_shape_operand_is_viewed_alike():
    b = GraphBuilder()
    x, y, s = b.param((4, 6), "f32"), b.param((4, 6), "f32"), b.param((), "f32")
    z = b.op("add.Tensor", b.op("mul.Tensor", x, s), y)
    g = b.build(b.op("neg.default", b.op("slice.Tensor", z, 1, 0, 3)),
                b.op("neg.default", b.op("slice.Tensor", z, 1, 3, 6)))
    new = hoist_views(g)
    assert [n.type.shape for n in new.ops if n.op == "add.Tensor"] == [(4, 3), (4, 3)]
    _same(g, new)


def _left_alone(build):
    assert_left_alone(hoist_views, build)


def test_a_result_read_whole_stays():
    def build(b):
        y = b.op("exp.default", b.param((4, 6), "f32"))
        return [b.op("select.int", y, 0, 1), b.op("sum.default", y)]
    _left_alone(build)


def test_a_result_or_view_that_is_an_output_stays():
    _left_alone(lambda b: [b.op("select.int", b.op("exp.default", b.param((4, 6), "f32")), 0, 1)])

    def output(b):
        y = b.op("exp.default", b.param((4, 6), "f32"))
        return [b.op("neg.default", b.op("select.int", y, 0, 1)), y]
    _left_alone(output)


def test_overlapping_slices_would_compute_twice_and_stay():
    def build(b):
        y = b.op("exp.default", b.param((4, 6), "f32"))
        return [b.op("neg.default", b.op("slice.Tensor", y, 1, 0, 4)),
                b.op("neg.default", b.op("slice.Tensor", y, 1, 2, 6))]
    _left_alone(build)


def test_a_broadcast_operand_and_a_0d_view_stay():
    def broadcast(b):
        y = b.op("add.Tensor", b.param((4, 6), "f32"), b.param((6,), "f32"))
        return [b.op("neg.default", b.op("select.int", y, 0, 1))]
    _left_alone(broadcast)

    def to_0d(b):
        y = b.op("exp.default", b.param((4,), "f32"))
        return [b.op("neg.default", b.op("select.int", y, 0, t)) for t in range(4)]
    _left_alone(to_0d)


def test_a_select_along_a_real_dim_of_the_broadcast_source_stays():
    def build(b):
        e = b.op("expand.default", b.param((4, 1, 6), "f32"), [4, 3, 6])
        return [b.op("neg.default", b.op("select.int", e, 2, 1))]
    _left_alone(build)


@pytest.mark.parametrize("dim, index", [(0, 1), (1, 2), (-2, 0)])
def test_a_select_of_a_broadcast_dim_reads_the_source(dim, index):
    b = GraphBuilder()
    e = b.op("expand.default", b.param((3, 1, 6), "f32"), [5, 3, 4, 6])   # new dim 0, dim 2 1->4
    dim = 2 if dim == 1 else dim
    g = b.build(b.op("neg.default", b.op("select.int", e, dim, index)))
    new = canonicalize(g)
    assert "select.int" not in _ops(new)
    _same(g, new)


def test_a_birnns_gradients_match_eager():
    torch.manual_seed(0)
    ih, hh = torch.nn.Linear(5, 16), torch.nn.Linear(16, 16, bias=False)
    x = torch.randn(4, 6, 5)

    def f(x):
        h, outs = torch.zeros(4, 16), []
        for t in range(6):
            h = torch.tanh(ih(x[:, t]) + hh(h))
            outs.append(torch.cat([h, h * 2], -1))
        return torch.stack(outs, 1).mean(1).square().sum()

    def grads(fn):
        ih.zero_grad()
        hh.zero_grad()
        fn(x).backward()
        return [p.grad.clone() for p in (*ih.parameters(), *hh.parameters())]
    want = grads(f)
    torch._dynamo.reset()
    comp = torch.compile(f, backend=fusionstitch.backend(target="cpu"))
    for _ in range(2):
        for a, b in zip(grads(comp), want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
