"""Convolutions that are GEMMs on cpu (passes/conv_layout.py, FUSIONSTITCH_CONV_GEMM):
1x1 convolutions over the NHWC rows of the pixels their stride picks, forward and
backward (strided too), and convolutions whose patches tile the image over those
patches. Numbers match torch within the error bound of a sum evaluated in another
order; compiled blocks run no torch convolution where a GEMM stands for it."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes.conv_layout import channels_last_convs
from fusionstitch.targets import CPU

from helpers_passes import random_inputs, run_graph
from test_conv_layout import (EPS32, _conv_graph, _InvertedResidual, _ops, _within_bound,
                              _no_copy_in_convolutions_and_eager_gradients)


@pytest.mark.parametrize("bias", [True, False])
def test_a_pointwise_convolution_is_a_gemm_over_the_channels_last_rows(bias, monkeypatch):
    g = _conv_graph(x_shape=(2, 4, 5, 3), w_shape=(6, 4, 1, 1), bias=bias, padding=(0, 0))
    new = channels_last_convs(g, CPU)
    assert "convolution.default" not in _ops(new)
    assert _ops(new).count("addmm.default" if bias else "mm.default") == 1
    assert _ops(new).count("clone.default") == 1           # the input's NHWC copy
    for seed in (0, 1):
        xs = random_inputs(g, seed)
        (a,), (b,) = run_graph(g, xs), run_graph(new, xs)
        x, w = torch.relu(xs[0]), xs[1]
        assert _within_bound(a / 2, b / 2, x, w, xs[2] if bias else None, 1, (1, 1),
                             (0, 0), (1, 1))
    monkeypatch.setenv("FUSIONSTITCH_CONV_GEMM", "0")       # the A/B: convolutions
    assert "convolution.default" in _ops(channels_last_convs(g, CPU))


@pytest.mark.parametrize("stride", [(2, 2), (2, 1), (1, 3)])
def test_a_strided_pointwise_convolution_is_a_gemm_over_the_pixels_it_picks(stride):
    g = _conv_graph(x_shape=(2, 4, 7, 6), w_shape=(6, 4, 1, 1), padding=(0, 0),
                    stride=stride)
    new = channels_last_convs(g, CPU)
    assert "convolution.default" not in _ops(new)
    assert _ops(new).count("slice.Tensor") == sum(s != 1 for s in stride)
    for seed in (0, 1):
        xs = random_inputs(g, seed)
        (a,), (b,) = run_graph(g, xs), run_graph(new, xs)
        assert _within_bound(a / 2, b / 2, torch.relu(xs[0]), xs[1], xs[2], 1, stride,
                             (0, 0), (1, 1))


@pytest.mark.parametrize("kw", [dict(padding=(1, 1)), dict(w_shape=(4, 2, 1, 1), groups=2)])
def test_other_pointwise_convolutions_stay_convolutions(kw):
    base = dict(x_shape=(2, 4, 5, 3), w_shape=(6, 4, 1, 1), padding=(0, 0))
    g = _conv_graph(**{**base, **kw})
    new = channels_last_convs(g, CPU)
    assert "convolution.default" in _ops(new) and "mm.default" not in _ops(new) \
        and "addmm.default" not in _ops(new)


def test_a_pointwise_convolution_saved_for_a_backward_is_a_gemm_and_saves_its_rows():
    """Its result saved for a backward (a free output) is the GEMM's NHWC result viewed
    NCHW, and its input, saved too, is the NHWC rows the GEMM read (viewed NCHW: the
    input's producer stores it once); a result the caller sees stays a convolution."""
    b = GraphBuilder()
    x, w = b.param((2, 4, 5, 3)), b.param((6, 4, 1, 1))
    r = b.op("relu.default", x)
    y = b.op("convolution.default", r, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    g = b.build(b.op("relu.default", y), y, r)
    new = channels_last_convs(g, CPU, free_outputs=frozenset({1, 2}))
    assert "convolution.default" not in _ops(new) and "mm.default" in _ops(new)
    saved_y, saved_r = (new[o.name] for o in new.outputs[1:])
    assert saved_y.op == "permute.default" and new[saved_y.args[0].name].op == "view.default"
    assert saved_r.op == "permute.default" and tuple(saved_r.args[1]) == (0, 3, 1, 2)
    assert new[saved_r.args[0].name].op == "clone.default"      # the GEMM's rows
    xs = random_inputs(g)
    for a, c in zip(run_graph(new, xs), run_graph(g, xs)):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5)
    seen = channels_last_convs(g, CPU, free_outputs=frozenset({2}))
    assert seen[seen.outputs[1].name].op == "convolution.default"


def _pointwise_backward_graph(mask=(True, True, True), strides=(60, 1, 12, 4), stride=1):
    """A backward's convolution_backward of a 1x1 convolution with a bias, of a saved
    input `x` with recorded `strides`, and a gradient our kernels compute."""
    from fusionstitch.ir.graph import Graph
    b = GraphBuilder()
    h = 5 if stride == 1 else 3
    g0, x, w = b.param((2, 6, h, 3)), b.param((2, 4, 5, 3)), b.param((6, 4, 1, 1))
    grad = b.op("mul.Scalar", g0, 2.0)
    cb = b.op("convolution_backward.default", grad, x, w, [6], [stride, 1], [0, 0],
              [1, 1], False, [0, 0], 1, list(mask))
    outs = [b.op("relu.default", b.getitem(cb, 0))] if mask[0] else []
    outs += [b.getitem(cb, k) for k in (1, 2) if mask[k]]
    g = b.build(*outs)
    return Graph(tuple(n.replace(kwargs=(("strides", strides),))
                       if n.name == x.name and strides else n for n in g.nodes),
                 g.outputs, g.name)


@pytest.mark.parametrize("mask", [(True, True, True), (False, True, True),
                                  (True, True, False), (True, False, False)])
def test_a_pointwise_convolution_backward_of_saved_rows_is_gemms(one_thread, mask):
    """The backward of a 1x1 convolution whose input the forward saved as NHWC rows (a
    channels-last input): GEMMs over the gradient's NHWC copy and the rows (torch's own
    loops would copy the NCHW gradient to channels-last themselves), each result within
    the f32 bound of a sum of N*H*W (weight) or O (input) products of torch's."""
    g = _pointwise_backward_graph(mask)
    h = channels_last_convs(g, CPU)
    assert "convolution_backward.default" not in _ops(h)
    assert _ops(h).count("mm.default") == sum(mask[:2])
    assert _ops(h).count("clone.default") == 1                  # the gradient's copy
    for seed in (0, 1):
        _within_sum_bound(h, g, seed, True, rows=2 * 5 * 3)
    # an NCHW input of an unstrided convolution: torch's backward as before
    other = _pointwise_backward_graph(strides=None)
    assert "convolution_backward.default" in _ops(channels_last_convs(other, CPU))


@pytest.mark.parametrize("mask", [(True, True, True), (False, True, True), (True, False, False)])
@pytest.mark.parametrize("strides", [(60, 1, 12, 4), None])
def test_a_strided_pointwise_convolution_backward_is_gemms_of_the_picked_pixels(
        one_thread, mask, strides):
    """The backward of a 1x1 convolution of stride 2 (a ResNet's downsampling shortcut),
    of a channels-last or NCHW input: grad_weight the GEMM of the gradient's rows by a
    copy of the pixels the stride picks, grad_input the GEMM's rows placed at those
    pixels and zeros elsewhere (slice_scatter): no torch convolution backward (torch
    2.13's corrupts the heap for a channels-last input of 8 channels, tests/fuzz/cnn.py);
    each result within the f32 bound of torch's, zeros exactly where no pixel was read."""
    g = _pointwise_backward_graph(mask, strides=strides, stride=2)
    h = channels_last_convs(g, CPU)
    assert "convolution_backward.default" not in _ops(h)
    assert _ops(h).count("mm.default") == sum(mask[:2])
    assert _ops(h).count("slice_scatter.default") == (1 if mask[0] else 0)
    for seed in (0, 1):
        ours = _within_sum_bound(h, g, seed, strides is not None, rows=2 * 3 * 3)
        if mask[0]:   # relu(grad_input): rows 1 and 3 of H read no pixel
            assert ours[0][:, :, 1::2].abs().max() == 0


def _within_sum_bound(h, g, seed: int, channels_last: bool, rows: int) -> list:
    """`h`'s results (returned) on `_pointwise_backward_graph` `g`'s random inputs are
    within the f32 bound of a sum of `rows` (weight, bias) or O (input) products of the
    float64 results, or 4x torch's own distance from them."""
    xs = random_inputs(g, seed)
    if channels_last:
        xs[1] = xs[1].contiguous(memory_format=torch.channels_last)
    ref64 = run_graph(g, [t.double() for t in xs])
    ours = run_graph(h, xs)
    for a, c, d in zip(ours, run_graph(g, xs), ref64):
        k = rows if a.dim() != 4 or a.shape[0] != 2 else 6
        bound = 2 * k * EPS32 / (1 - k * EPS32) * d.abs().max() * 8 + 1e-30
        assert (a.double() - d).abs().max() <= max(bound, (c.double() - d).abs().max() * 4)
    return ours


def test_a_compiled_inverted_residual_training_step_runs_its_1x1_convolutions_as_gemms(
        one_thread):
    """An NCHW inverted residual block (1x1, batch norm, depthwise 3x3, batch norm, 1x1:
    mobilenet_v2's and mobilevit's) in a training step, batch 4, one thread: its 1x1
    convolutions are GEMMs forward and backward and the depthwise one runs channels-last
    (it ran NCHW, 2.5x slower in oneDNN, behind the NCHW statistics of a 1x1 result
    torch computed in its own loops), no convolution copies an operand inside torch, and
    the gradients and running statistics are eager's within its own distance from
    float64."""
    import copy
    torch.manual_seed(0)
    net = _InvertedResidual(torch.nn.functional.silu, bias=True)
    ref, ref64 = copy.deepcopy(net), copy.deepcopy(net).double()
    torch._dynamo.reset()
    comp = torch.compile(net, backend=fusionstitch.backend(target="cpu"))
    x = torch.randn(4, 8, 10, 10)
    (comp(x) * x).sum().backward()                          # compile (a step each)
    (ref(x) * x).sum().backward()
    (ref64(x.double()) * x.double()).sum().backward()
    for m in (net, ref, ref64):
        m.zero_grad()
    with torch.profiler.profile(record_shapes=True) as prof:
        (comp(x) * x).sum().backward()
    (ref(x) * x).sum().backward()
    (ref64(x.double()) * x.double()).sum().backward()
    names = [e.name for e in prof.events()]
    assert "aten::_slow_conv2d_forward" not in names
    assert "aten::_slow_conv2d_backward" not in names
    convs = [e for e in prof.events() if e.name == "aten::convolution_backward"]
    assert len(convs) == 1 and convs[0].input_shapes[2][2:] == [3, 3]
    _no_copy_in_convolutions_and_eager_gradients(prof, net, ref, ref64)
    for (name, b), c in zip(net.named_buffers(), ref.buffers()):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("cfg", [((2, 3, 8, 12), (5, 3, 2, 2), True),
                                 ((1, 4, 9, 6), (6, 4, 3, 3), False),
                                 ((2, 2, 8, 8), (3, 2, 4, 2), True)])
def test_a_patchwise_convolution_is_a_gemm_over_the_patches(cfg):
    xs, ws, bias = cfg
    stride = tuple(ws[2:])
    g = _conv_graph(x_shape=xs, w_shape=ws, bias=bias, padding=(0, 0), stride=stride)
    new = channels_last_convs(g, CPU)
    assert "convolution.default" not in _ops(new)
    assert _ops(new).count("addmm.default" if bias else "mm.default") == 1
    for seed in (0, 1):
        inputs = random_inputs(g, seed)
        (a,), (b,) = run_graph(g, inputs), run_graph(new, inputs)
        assert _within_bound(a / 2, b / 2, torch.relu(inputs[0]), inputs[1],
                             inputs[2] if bias else None, 1, stride, (0, 0), (1, 1))


@pytest.mark.parametrize("kw", [dict(x_shape=(2, 3, 9, 8)),          # 9 rows: not tiled
                                dict(padding=(1, 1)), dict(stride=(1, 1)),
                                dict(dilation=(2, 2), x_shape=(2, 3, 8, 8))])
def test_other_patch_shapes_stay_convolutions(kw):
    base = dict(x_shape=(2, 3, 8, 8), w_shape=(5, 3, 2, 2), padding=(0, 0), stride=(2, 2))
    g = _conv_graph(**{**base, **kw})
    assert "mm.default" not in _ops(channels_last_convs(g, CPU)) and \
        "addmm.default" not in _ops(channels_last_convs(g, CPU))


def test_a_compiled_channels_last_downsampling_shortcut_runs_no_torch_1x1_backward(
        one_thread):
    """A ResNet downsampling block made channels-last (3x3, batch norm, relu, then the
    1x1 convolution of stride 2, 8 -> 16 channels, whose backward torch 2.13 runs with a
    heap corruption for a channels-last input, tests/fuzz/cnn.py) in two training steps:
    the 1x1 backward is GEMMs (the one torch convolution backward left is the 3x3's),
    and the gradients and running statistics are eager's (eager NCHW, which torch runs
    safely) within its own distance from float64."""
    import copy
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1, bias=False),
                              torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 16, 1, stride=2))
    ref, ref64 = copy.deepcopy(net), copy.deepcopy(net).double()
    net = net.to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    comp = torch.compile(net, backend=fusionstitch.backend(target="cpu"))
    x = torch.randn(3, 8, 12, 12)
    xc = x.contiguous(memory_format=torch.channels_last)
    (comp(xc) * 2).sum().backward()                        # compile (a step each)
    (ref(x) * 2).sum().backward()
    (ref64(x.double()) * 2).sum().backward()
    for m in (net, ref, ref64):
        m.zero_grad()
    with torch.profiler.profile(record_shapes=True) as prof:
        (comp(xc) * 2).sum().backward()
    (ref(x) * 2).sum().backward()
    (ref64(x.double()) * 2).sum().backward()
    convs = [e for e in prof.events() if e.name == "aten::convolution_backward"]
    assert len(convs) == 1 and convs[0].input_shapes[2][2:] == [3, 3]
    for (name, p), q, d in zip(net.named_parameters(), ref.parameters(), ref64.parameters()):
        ours, eager = ((g.grad.double() - d.grad).abs().max() for g in (p, q))
        assert ours <= 4 * max(eager, EPS32 * d.grad.abs().max()), (name, float(ours))
    for (name, b), c in zip(net.named_buffers(), ref.buffers()):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-6, msg=name)
