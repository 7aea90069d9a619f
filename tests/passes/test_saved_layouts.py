"""save_channels_last (passes/saved_layouts.py): a value a training forward saves for its
backward, computed elementwise from channels-last values, is saved channels-last (a view
of an NHWC copy its kernel stores), so the statistics kernel that computes it and the
backward kernels that read it do not cross their NHWC loop's grain. Values equal; seen
outputs, values from NCHW data, views and other targets are left alone."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.verify import verify
from fusionstitch.passes.read_copies import read_channels_last_copies
from fusionstitch.passes.saved_layouts import channels_last_values, save_channels_last
from fusionstitch.targets import CPU, CUDA

from helpers_passes import assert_same_results


def _graph(nhwc=True, copy=False):
    """y: an NCHW view of NHWC memory (conv_layout's convolution result) or a plain NCHW
    value; s = sigmoid(y) saved (output 1), m = y * s the forward's result (output 0);
    copy: m also copies s channels-last (a convolution's input)."""
    b = GraphBuilder()
    if nhwc:
        y = b.op("permute.default", b.op("exp.default", b.param((2, 5, 6, 8))), (0, 3, 1, 2))
    else:
        y = b.op("exp.default", b.param((2, 8, 5, 6)))
    s = b.op("sigmoid.default", y)
    m = b.op("mul.Tensor", y, s)
    outs = [m, s]
    if copy:
        c = b.op("clone.default", b.op("permute.default", s, (0, 2, 3, 1)),
                 memory_format=torch.contiguous_format)
        outs.append(b.op("sum.default", c))
    return b.build(*outs), s.name


def test_a_saved_value_of_channels_last_data_is_saved_channels_last():
    g, s = _graph()
    assert s in channels_last_values(g)
    h = save_channels_last(g, CPU, frozenset({1}))
    verify(h)
    out = h[h.outputs[1].name]
    assert out.op == "permute.default" and tuple(out.args[1]) == (0, 3, 1, 2)
    clone = h[out.args[0].name]
    assert clone.op == "clone.default" and h[clone.args[0].name].args[0].name == s
    assert h.outputs[0] == g.outputs[0]
    assert_same_results(g, h)
    # read_copies then has the product read s from the copy: s is read by its copy alone
    r = read_channels_last_copies(h, CPU)
    assert [r[u].op for u in r.users[s]] == ["permute.default"]
    assert_same_results(g, r)


def test_a_value_with_a_copy_is_saved_as_that_copy():
    g, s = _graph(copy=True)
    h = save_channels_last(g, CPU, frozenset({1}))
    verify(h)
    assert [n.op for n in h.nodes].count("clone.default") == 1
    out = h[h.outputs[1].name]
    assert out.op == "permute.default" and h[out.args[0].name].op == "clone.default"
    assert_same_results(g, h)


@pytest.mark.parametrize("case", ["seen", "nchw", "cuda", "no_target", "also_seen"])
def test_left_alone(case):
    g, s = _graph(nhwc=case != "nchw")
    free = {"seen": frozenset(), "also_seen": frozenset({1})}.get(case, frozenset({1}))
    if case == "also_seen":         # s at a seen position too: its layout is the caller's
        g = type(g)(g.nodes, g.outputs + (g.outputs[1],), g.name)
    target = {"cuda": CUDA, "no_target": None}.get(case, CPU)
    assert save_channels_last(g, target, free) is g


def test_a_view_is_not_spelled():
    """A saved view of channels-last memory (the convolution's own result) is left as
    it is: it is no value a kernel stores."""
    b = GraphBuilder()
    y = b.op("permute.default", b.op("exp.default", b.param((2, 5, 6, 8))), (0, 3, 1, 2))
    g = b.build(b.op("relu.default", y), y)
    assert save_channels_last(g, CPU, frozenset({1})) is g


class Block(torch.nn.Module):
    """mobilevit's and resnet's pattern: convolution, training batch norm, SiLU (its
    sigmoid saved for the backward), convolution, relu."""

    def __init__(self, c=16):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)

    def forward(self, x):
        # (the relu: a convolution whose result the caller sees keeps NCHW)
        return self.conv2(torch.nn.functional.silu(self.bn(self.conv(x)))).relu()


@pytest.mark.usefixtures("strict_fresh")
def test_a_training_step_saves_its_activations_channels_last(one_thread):
    torch.manual_seed(0)
    m, ref = Block(), Block()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(4, 16, 16, 16)
    c = torch.compile(m, backend=fusionstitch.backend(target="cpu"))
    saved = []

    def pack(t):
        saved.append(t)
        return t

    for step in range(2):
        if step:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = c(x)
        else:
            out = c(x)
        out.square().sum().backward()
        ref(x).square().sum().backward()
    assert fusionstitch.stats()["fallbacks"] == 0
    # every full-size activation the compiled forward saves is channels-last memory
    # (before the pass: the SiLU's sigmoid was saved NCHW)
    # (the caller's input, saved for the first weight gradient, keeps its own layout)
    acts = [t for t in saved if t.shape == (4, 16, 16, 16) and not torch.equal(t, x)]
    assert acts and all(t.is_contiguous(memory_format=torch.channels_last) for t in acts), \
        [t.stride() for t in acts]
    # gradients: sums of 144-4096 products in another order (convolution, batch
    # statistics), values up to ~1e3: within 1e-5 relative of their scale
    for p, q in zip(m.parameters(), ref.parameters(), strict=True):
        scale = q.grad.abs().max().item()
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5 * scale)
    torch.testing.assert_close(m.bn.running_var, ref.bn.running_var)


def _gradient_sum(nchw_reader=False, one_reader=False):
    """a = y1 + y2 of two NCHW views of NHWC memory (two convolutions' input gradients),
    read by batch statistics (a sum over N, H, W) and by a product with y1 (or with an
    NCHW value), or by the product alone (summed over the channels)."""
    b = GraphBuilder()
    y1 = b.op("permute.default", b.op("exp.default", b.param((2, 5, 6, 8))), (0, 3, 1, 2))
    y2 = b.op("permute.default", b.op("neg.default", b.param((2, 5, 6, 8))), (0, 3, 1, 2))
    a = b.op("add.Tensor", y1, y2)
    other = b.op("exp.default", b.param((2, 8, 5, 6))) if nchw_reader else y1
    m = b.op("mul.Tensor", a, other)
    if one_reader:      # (a sum over the channels: its kernel loops NCHW)
        return b.build(b.op("sum.dim_IntList", m, [1])), a.name
    return b.build(b.op("sum.dim_IntList", a, [0, 2, 3]), m), a.name


def test_a_value_between_nhwc_kernels_is_stored_nhwc():
    g, a = _gradient_sum()
    h = save_channels_last(g, CPU, frozenset())
    verify(h)
    [copy] = [n for n in h.nodes if n.op == "clone.default"]
    assert h[copy.args[0].name].args[0].name == a
    r = read_channels_last_copies(h, CPU)
    assert [r[u].op for u in r.users[a]] == ["permute.default"]   # its copy's alone
    assert_same_results(g, r)


@pytest.mark.parametrize("case", ["nchw_reader", "one_reader"])
def test_a_value_read_across_the_grain_or_fused_is_not_copied(case):
    g, _ = _gradient_sum(**{case: True})
    assert save_channels_last(g, CPU, frozenset()) is g
