"""read_channels_last_copies (passes/read_copies.py): a value with an NHWC copy (made by
conv_layout for a convolution or a 1x1 GEMM) is read by its other readers from that copy,
so that the kernel computing it stores it once. Bit-identical results; graph outputs,
parameters and other targets are left alone."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.verify import verify
from fusionstitch.passes.read_copies import read_channels_last_copies
from fusionstitch.schedule.propagate import escaping_values
from fusionstitch.targets import CPU, CUDA

from helpers_passes import assert_same_results


def _graph(output_v=False, copy_first=False):
    """v = sigmoid(x); its NHWC copy's rows times w; u = v + 1 (a reader before or after
    the copy)."""
    b = GraphBuilder()
    x = b.param((2, 8, 5, 6))
    w = b.param((8, 3))
    v = b.op("sigmoid.default", x)
    u = None if copy_first else b.op("add.Tensor", v, 1.0)
    p = b.op("permute.default", v, (0, 2, 3, 1))
    c = b.op("clone.default", p, memory_format=torch.contiguous_format)
    rows = b.op("view.default", c, (60, 8))
    mm = b.op("mm.default", rows, w)
    if copy_first:
        u = b.op("add.Tensor", v, 1.0)
    return b.build(mm, u, v) if output_v else b.build(mm, u)


@pytest.mark.parametrize("copy_first", [False, True], ids=["reader_first", "copy_first"])
def test_readers_read_the_copy(copy_first):
    g = _graph(copy_first=copy_first)
    h = read_channels_last_copies(g, CPU)
    verify(h)
    users = h.users
    v = next(n.name for n in h.nodes if n.op == "sigmoid.default")
    assert [h[u].op for u in users[v]] == ["permute.default"], users[v]
    add = next(n for n in h.nodes if n.op == "add.Tensor")
    view = h[add.inputs[0]]
    assert view.op == "permute.default" and tuple(view.args[1]) == (0, 3, 1, 2)
    assert h[view.inputs[0]].op == "clone.default"
    assert_same_results(g, h)


def test_left_alone():
    """A graph output (its layout is seen), another target, a value read by its copy
    alone: no rewrite."""
    g = _graph(output_v=True)
    assert read_channels_last_copies(g, CPU) is g
    g = _graph()
    assert read_channels_last_copies(g, CUDA) is g
    assert read_channels_last_copies(g, None) is g
    b = GraphBuilder()
    x = b.param((2, 8, 5, 6))
    v = b.op("sigmoid.default", x)
    c = b.op("clone.default", b.op("permute.default", v, (0, 2, 3, 1)),
             memory_format=torch.contiguous_format)
    g = b.build(b.op("mm.default", b.op("view.default", c, (60, 8)), b.param((8, 3))))
    assert read_channels_last_copies(g, CPU) is g


class Block(torch.nn.Module):
    """An inverted residual (mobilenet's, mobilevit's): the activation is read by a 1x1
    convolution (a GEMM over its NHWC copy) and by the residual add."""

    def __init__(self, c=8, zero_pad=False):
        super().__init__()
        self.zero_pad = zero_pad
        self.bn = torch.nn.BatchNorm2d(c)
        self.expand = torch.nn.Conv2d(c, 2 * c, 1)
        self.dw = torch.nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c)
        self.project = torch.nn.Conv2d(2 * c, c, 1)

    def forward(self, x):
        a = torch.nn.functional.silu(self.bn(x))
        # transformers' TF "same" padding pads a 1x1 convolution's input by zeros
        e = torch.nn.functional.pad(a, (0, 0, 0, 0)) if self.zero_pad else a
        y = self.project(torch.nn.functional.silu(self.dw(self.expand(e))))
        return y + a


@pytest.mark.usefixtures("strict_fresh")
@pytest.mark.parametrize("zero_pad", [False, True], ids=["plain", "zero_pad"])
def test_block_matches_eager(zero_pad):
    """With a zero pad between the activation and its 1x1 convolution too: the pad is
    the identity (fold_views), so the copy is the activation's and the add reads it."""
    torch.manual_seed(0)
    m = Block(zero_pad=zero_pad).eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 8, 12, 12)
    with torch.no_grad():
        want = m(x)
        got = torch.compile(m, backend=fusionstitch.backend(target="cpu"))(x)
    # convolutions and GEMMs sum 16-144 products in another order: within 1e-5 of
    # values of magnitude about 1 (2 K eps for K = 144: 3.4e-5 worst case)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=4e-5)
    assert fusionstitch.stats()["fallbacks"] == 0
    with torch.no_grad():
        rep = fusionstitch.explain(m, x, target="cpu")
    # the residual add reads the activation from the expand GEMM's NHWC copy
    assert any("_from_copy" in n.name for g in rep.graphs for n in g.plan.graph.nodes)
    # the kernel computing the activation stores it once (NHWC), not NCHW beside it
    [plan] = [g.plan for g in rep.graphs]
    [act] = [k for k in plan.groups
             if any(plan.graph[n].op == "sqrt.default" for n in k.nodes)]
    assert len(escaping_values(plan.graph, act.nodes)) == 1, plan.to_text()
