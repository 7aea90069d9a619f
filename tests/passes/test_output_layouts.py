"""spell_output_layouts (passes/output_layouts.py): an output the caller sees in another
order than row-major (eager's layout of a channels-last or transposed result) is stored
by its kernel in that order, so the frontend finds it in eager's strides and copies
nothing. Same values; parameters, views and library results are left alone."""
import pytest
import torch
import torch.nn.functional as F

import fusionstitch
from fusionstitch.frontend import output_layout
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.verify import verify
from fusionstitch.passes.output_layouts import spell_output_layouts

from helpers_passes import assert_same_results

NHWC = (0, 2, 3, 1)


def _graph():
    b = GraphBuilder()
    x = b.param((2, 8, 5, 6))
    w = b.param((8, 3))
    v = b.op("sigmoid.default", x)
    t = b.op("permute.default", v, (0, 2, 3, 1))
    rows = b.op("view.default", b.op("clone.default", t,
                                     memory_format=torch.contiguous_format), (60, 8))
    mm = b.op("mm.default", rows, w)
    tx = b.op("permute.default", x, (0, 2, 3, 1))
    return b.build(v, v, x, tx, mm, b.op("add.Tensor", v, 1.0))


def test_computed_outputs_are_spelled_in_eager_order():
    g = _graph()
    h = spell_output_layouts(g, {0: NHWC, 1: NHWC, 2: NHWC, 3: (0, 3, 1, 2), 4: (1, 0),
                                 5: (0, 1, 2, 3)})
    verify(h)
    assert_same_results(g, h)
    outs = [h[o.name] for o in h.outputs]
    # v, at two positions: one copy in NHWC order, read through the inverse permute
    assert outs[0] is outs[1] and outs[0].op == "permute.default"
    assert tuple(outs[0].args[1]) == (0, 3, 1, 2)
    copy = h[outs[0].args[0].name]
    assert copy.op == "clone.default" and tuple(h[copy.args[0].name].args[1]) == NHWC
    # a parameter, a view, a GEMM's result and a row-major order: left alone
    assert [o.name for o in h.outputs[2:]] == [o.name for o in g.outputs[2:]]


def test_a_value_other_outputs_view_is_left_to_the_frontend():
    """Eager returns `v` and `v.t()` aliasing one memory; the frontend copies v into
    eager's layout and views the copy: the pass leaves v alone."""
    b = GraphBuilder()
    x = b.param((6, 5))
    v = b.op("exp.default", x)
    g = b.build(v, b.op("t.default", v))
    assert spell_output_layouts(g, {0: (1, 0)}) is g


def test_nothing_to_spell_is_the_same_graph():
    g = _graph()
    assert spell_output_layouts(g, {}) is g
    assert spell_output_layouts(g, {2: NHWC}) is g


def _restrides(monkeypatch):
    """How many outputs the frontend had to copy into eager's layout, per call."""
    copies = []
    original = output_layout.restride

    def counting(outs, expected, inputs):
        got = original(list(outs), expected, inputs)
        copies.append(sum(a is not b for a, b in zip(outs, got)))
        return got
    monkeypatch.setattr(output_layout, "restride", counting)
    return copies


cl = dict(memory_format=torch.channels_last)
CASES = {
    # an elementwise chain of a channels-last image (eager keeps channels-last)
    "channels_last": (lambda x: torch.sigmoid(x) * x + 1,
                      lambda: [torch.randn(2, 16, 8, 8).to(**cl)]),
    # a transposed matrix's elementwise result (eager keeps the transpose's order)
    "transposed": (lambda a: torch.exp(a) * 2, lambda: [torch.randn(64, 48).t()]),
    # batch norm (eval) + relu after a channels-last convolution, and a residual
    "conv_block": (lambda x, w: torch.relu(F.conv2d(x, w, padding=1) * 0.5 + x),
                   lambda: [torch.randn(2, 8, 10, 10).to(**cl), torch.randn(8, 8, 3, 3)]),
    # a reduction over the channels, kept: eager's [2, 1, 8, 8] result of a channels-last
    # input, with its channel dim of one
    "channel_sum": (lambda x: torch.tanh(x).sum(1, keepdim=True) * x,
                    lambda: [torch.randn(2, 16, 8, 8).to(**cl)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_come_in_eager_layout_without_a_copy(case, monkeypatch):
    torch._dynamo.reset()
    copies = _restrides(monkeypatch)
    fn, make = CASES[case]
    args = make()
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    with torch.no_grad():
        got, want = c(*args), fn(*args)
        got = c(*args)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert copies and copies[-1] == 0, copies


def test_training_outputs_in_eager_layout():
    """A training step's forward output (channels-last) and the gradients: right values
    and eager's strides."""
    torch._dynamo.reset()
    w = torch.randn(8, 8, 3, 3, requires_grad=True)

    def fn(x):
        return torch.relu(F.conv2d(x, w, padding=1)) * torch.sigmoid(x)
    x = torch.randn(2, 8, 10, 10).to(**cl).requires_grad_()
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    got = c(x)
    got.sum().backward()
    gx, gw = x.grad, w.grad
    x.grad = w.grad = None
    want = fn(x)
    want.sum().backward()
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gx, x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gw, w.grad, rtol=1e-4, atol=1e-4)
