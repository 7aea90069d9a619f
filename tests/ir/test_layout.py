"""ir/layout.py: `suggests_channels_last` is torch's reading of a 4-D tensor's strides as
a memory format, checked against what torch does with it (the layout a convolution
returns for a weight of those strides), and the frontend records the strides of a
weight torch reads as channels-last even where they differ from row-major only on
size-1 dims."""
import random

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from fusionstitch.frontend.fx_to_ir import fx_to_ir, input_specs
from fusionstitch.ir.layout import suggests_channels_last


def _weight(shape, strides):
    size = 1 + sum((d - 1) * s for d, s in zip(shape, strides))
    return torch.randn(size).as_strided(shape, strides)


def _cases(n=400, seed=7):
    rng = random.Random(seed)
    for _ in range(n):
        shape = (rng.choice([1, 2, 3, 8]), rng.choice([1, 2, 3, 8]),
                 rng.choice([1, 2, 3]), rng.choice([1, 2, 3]))
        if rng.random() < 0.5:
            fmt = rng.choice([torch.contiguous_format, torch.channels_last])
            strides = torch.empty(shape).contiguous(memory_format=fmt).stride()
        else:
            strides = tuple(rng.choice([0, 1, 2, 3, 8, 24, 48]) for _ in range(4))
        yield shape, tuple(strides)


@pytest.mark.parametrize("threads", [1, 2])
def test_it_is_the_layout_torchs_convolution_takes_from_a_weight(threads):
    """A convolution of an NCHW input returns channels-last exactly when its weight
    suggests channels-last (ATen's thnn_conv_use_channels_last and
    mkldnn_conv_use_channels_last: the input's or the weight's suggested format), on
    oneDNN and on torch's own loops (batch 4, 1x1 kernels on one thread) alike. Results
    whose strides say both or neither are skipped."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        checked = 0
        for shape, strides in _cases():
            x = torch.randn(4, shape[1], 5, 5)
            y = torch.nn.functional.conv2d(x, _weight(shape, strides))
            nchw = y.is_contiguous()
            cl = y.is_contiguous(memory_format=torch.channels_last)
            if nchw == cl:
                continue
            checked += 1
            assert cl == suggests_channels_last(shape, strides), (shape, strides)
        assert checked > 200
    finally:
        torch.set_num_threads(old)


def test_the_ambiguous_cases():
    assert suggests_channels_last((48, 8, 1, 1), (8, 1, 8, 8))      # a 1x1 weight, CL
    assert not suggests_channels_last((48, 8, 1, 1), (8, 1, 1, 1))  # row-major
    assert not suggests_channels_last((4, 1, 1, 1), (1, 1, 1, 1))   # N111: NCHW
    assert not suggests_channels_last((2, 3, 4, 5), (60, 0, 15, 3))  # a trivial C
    assert not suggests_channels_last((2, 3, 4), (12, 4, 1))        # not 4-D


def test_the_frontend_records_a_pointwise_weight_made_channels_last():
    """A [48, 8, 1, 1] weight of a model made channels-last (`Module.to(memory_format=)`)
    has strides (8, 1, 8, 8):
    the same as row-major on every dim longer than 1, yet torch runs its convolution
    channels-last; its parameter records the strides (the row-major one records none)."""
    def f(x, w):
        return torch.ops.aten.convolution.default(x, w, None, [1, 1], [0, 0], [1, 1],
                                                  False, [0, 0], 1)
    x = torch.randn(4, 8, 6, 6)
    for w, recorded in ((torch.randn(48, 8, 1, 1), None),
                        (torch.randn(48, 8, 1, 1).to(memory_format=torch.channels_last),
                         (8, 1, 8, 8))):
        gm = make_fx(f)(x, w)
        g = fx_to_ir(gm, input_specs((x, w)), "g", strides=[x.stride(), w.stride()])
        params = [n for n in g.nodes if n.op == "parameter"]
        assert params[0].kwarg("strides") is None
        assert params[1].kwarg("strides") == recorded
