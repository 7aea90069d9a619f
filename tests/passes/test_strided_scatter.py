"""rewrite_strided_scatters (passes/strided_scatter.py): an as_strided_scatter of a
row-major window into a fresh tensor becomes a slice_scatter of flat elements (or src
reshaped, where the window is all of it), equal to torch's op bit for bit; any other
window or base keeps the op. A compiled channels-last classifier head (a pooling,
flatten, linear), whose backward writes its gradient into zeros so, runs with no part
through torch."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes.strided_scatter import rewrite_strided_scatters

from helpers_passes import random_inputs, run_graph


def _graph(base=(64,), size=(4, 16), stride=(16, 1), offset=0, factory="full.default",
           src=None):
    b = GraphBuilder()
    s = b.param(src or size)
    x = b.op("mul.Scalar", s, 2.0)
    if factory == "parameter":
        f = b.param(base)
    elif factory == "full.default":
        f = b.op("full.default", tuple(base), 0.5, dtype=torch.float32)
    else:
        f = b.op(factory, tuple(base), dtype=torch.float32)
    y = b.op("as_strided_scatter.default", f, x, list(size), list(stride), offset)
    return b.build(b.op("add.Scalar", y, 1.0))


@pytest.mark.parametrize("case", [
    dict(),                                                   # all of base
    dict(base=(4, 16)),                                       # all of a 2-D base
    dict(base=(100,), offset=7),                              # a window inside
    dict(base=(10, 10), size=(3, 1, 5), stride=(5, 99, 1), offset=20),  # size-1 dim
    dict(base=(64,), size=(2, 8), stride=(8, 1), offset=48, factory="zeros.default"),
], ids=["whole", "whole_2d", "inside", "size1_dim", "at_the_end"])
def test_a_row_major_window_is_a_slice_scatter(case):
    g = _graph(**case)
    h = rewrite_strided_scatters(g)
    assert "as_strided_scatter.default" not in [n.op for n in h.nodes]
    xs = random_inputs(g)
    for a, b in zip(run_graph(h, xs), run_graph(g, xs)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("case", [
    dict(size=(4, 16), stride=(1, 4)),                        # transposed window
    dict(size=(4, 8), stride=(16, 1)),                        # rows with gaps
    dict(factory="parameter"),                                # a base of any layout
    dict(base=(64,), size=(4, 16), offset=1),                 # past the end
], ids=["transposed", "gaps", "parameter_base", "past_end"])
def test_other_windows_and_bases_keep_the_op(case):
    g = _graph(**case)
    assert rewrite_strided_scatters(g) is g


def test_a_compiled_channels_last_classifier_head_runs_no_part_through_torch():
    """adaptive_avg_pool2d of a channels-last activation, flatten, linear: AOTAutograd
    restrides the pooled value (`as_strided`) and writes the gradient of the flatten
    into zeros through it (mobilenet_v2_train_cl's head)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 5)

    def f(x):
        return lin(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, (1, 1)), 1))

    x = torch.randn(4, 16, 3, 3).contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    torch._dynamo.reset()
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"))
    fusionstitch.reset_stats()
    c(x).sum().backward()
    assert fusionstitch.stats()["fallbacks"] == 0
    ours, x.grad = x.grad, None
    f(x).sum().backward()
    torch.testing.assert_close(ours, x.grad, rtol=1e-6, atol=1e-7)
