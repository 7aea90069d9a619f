"""channels_last_convs (passes/conv_layout.py): on targets whose `conv_layout` is
"channels_last" (cpu), 2-D f32 convolutions take channels-last inputs and hand their
results to kernels as contiguous NHWC values; other targets, other convolutions and
results the caller sees are left alone. Numbers match torch within the error bound of a
sum evaluated in another order."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes import canonicalize
from fusionstitch.passes.conv_layout import channels_last_convs
from fusionstitch.targets import CPU, CUDA, INTERPRET, TORCH

from helpers_passes import random_inputs, run_graph

EPS32 = torch.finfo(torch.float32).eps


def _conv_graph(x_shape=(2, 4, 9, 7), w_shape=(6, 4, 3, 3), bias=True, stride=(1, 1),
                padding=(1, 1), dilation=(1, 1), groups=1, dtype="f32", out_is_conv=False,
                transposed=False):
    b = GraphBuilder()
    x = b.param(x_shape, dtype)
    w = b.param(w_shape, dtype)
    bb = b.param((w_shape[1] if transposed else w_shape[0],), dtype) if bias else None
    r = b.op("relu.default", x)
    y = b.op("convolution.default", r, w, bb, list(stride), list(padding), list(dilation),
             transposed, [0] * (len(x_shape) - 2), groups)
    out = b.op("mul.Scalar", b.op("relu.default", y), 2.0)
    return b.build(out, y) if out_is_conv else b.build(out)


def _ops(g):
    return [n.op for n in g.ops]


def _within_bound(a, b, x, w, bias, groups, stride, padding, dilation):
    """|a - b| within the bound of two evaluation orders of each output's sum of K
    products in f32 (Higham: gamma_K = K eps / (1 - K eps) each, so about 2 K eps
    together), scaled by the sum of the products' magnitudes (the convolution of |x|
    and |w|, bias included as one more term)."""
    k = w.shape[1] * w.shape[2] * w.shape[3] + 1
    mag = torch.nn.functional.conv2d(x.abs().double(), w.abs().double(),
                                     None if bias is None else bias.abs().double(), stride,
                                     padding, dilation, groups)
    gamma = k * EPS32 / (1 - k * EPS32)
    return bool(((a.double() - b.double()).abs() <= 2 * gamma * (mag + 1e-30)).all())


def test_cpu_rewrites_other_targets_do_not():
    g = _conv_graph()
    new = channels_last_convs(g, CPU)
    assert _ops(new).count("clone.default") == 1
    assert _ops(new).count("permute.default") == 4
    assert _ops(new).count("convolution.default") == 1
    for target in (CUDA, INTERPRET, TORCH, None):
        assert channels_last_convs(g, target) is g
    # through the pipeline: only with the cpu target
    assert "clone.default" in _ops(canonicalize(g, target=CPU))
    assert "clone.default" not in _ops(canonicalize(g, target=CUDA))
    assert "clone.default" not in _ops(canonicalize(g))


def test_graph_values_equal_torch():
    g = _conv_graph()
    new = channels_last_convs(g, CPU)
    for seed in (0, 1):
        xs = random_inputs(g, seed)
        (a,), (b,) = run_graph(g, xs), run_graph(new, xs)
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [
    dict(x_shape=(2, 4, 9), w_shape=(6, 4, 3), stride=(1,), padding=(1,), dilation=(1,)),
    dict(dtype="f64"),
    dict(transposed=True, w_shape=(4, 6, 3, 3)),
])
def test_other_convolutions_are_left_alone(kw):
    g = _conv_graph(**kw)
    assert channels_last_convs(g, CPU) is g


def test_a_result_the_caller_sees_keeps_its_layout():
    g = _conv_graph(out_is_conv=True)          # the convolution is output 1
    assert channels_last_convs(g, CPU) is g
    # saved for a backward (the frontend says so): its layout is free, and the output
    # is the convolution's own channels-last result, no view of it
    new = channels_last_convs(g, CPU, free_outputs=frozenset({1}))
    assert "clone.default" in _ops(new)
    assert new[new.outputs[1].name].op == "convolution.default"
    # readers inside the graph read the permute named as the convolution was
    assert new[g.outputs[1].name].op == "permute.default"
    for seed in (0, 1):
        xs = random_inputs(g, seed)
        for a, b in zip(run_graph(g, xs), run_graph(new, xs), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


# configs: (N, C, H, W), (O, C/groups, kh, kw), bias, stride, padding, dilation, groups
CONFIGS = [
    ((2, 4, 9, 7), (6, 4, 3, 3), True, (1, 1), (1, 1), (1, 1), 1),
    ((1, 3, 11, 13), (5, 3, 3, 3), False, (2, 2), (0, 0), (1, 1), 1),      # batch 1
    ((2, 8, 10, 10), (8, 1, 3, 3), True, (1, 1), (1, 1), (1, 1), 8),       # depthwise
    ((2, 8, 10, 10), (8, 1, 3, 3), False, (2, 2), (1, 1), (1, 1), 8),
    ((2, 6, 12, 9), (4, 3, 3, 3), True, (1, 2), (2, 1), (2, 1), 2),        # grouped, dilated
    ((2, 16, 5, 5), (32, 16, 1, 1), False, (1, 1), (0, 0), (1, 1), 1),     # pointwise
    ((3, 1, 7, 7), (4, 1, 5, 5), True, (1, 1), (2, 2), (1, 1), 1),         # one channel
    ((2, 4, 1, 1), (4, 4, 1, 1), True, (1, 1), (0, 0), (1, 1), 1),         # 1x1 image
    ((2, 5, 17, 3), (7, 5, 2, 3), True, (3, 1), (0, 1), (1, 1), 1),
    ((2, 8, 7, 6), (4, 8, 1, 1), True, (2, 2), (0, 0), (1, 1), 1),         # pointwise, s2
    ((2, 3, 8, 12), (5, 3, 2, 2), True, (2, 2), (0, 0), (1, 1), 1),        # patches
    ((1, 3, 16, 16), (6, 3, 8, 8), False, (8, 8), (0, 0), (1, 1), 1),      # ViT-like
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_compiled_convolutions_equal_torch(cfg):
    xs, ws, bias, stride, padding, dilation, groups = cfg

    def f(x, w, b):
        # relu and * 2 are exact: the result differs from eager's by the convolution's
        # summation order alone
        y = torch.nn.functional.conv2d(torch.relu(x), w, b, stride, padding, dilation, groups)
        return torch.relu(y) * 2

    g = torch.Generator().manual_seed(0)
    x = torch.randn(xs, generator=g)
    w = torch.randn(ws, generator=g)
    b = torch.randn(ws[0], generator=g) if bias else None
    copies = [x.clone(), w.clone()]
    strides = [x.stride(), w.stride()]
    torch._dynamo.reset()
    out = torch.compile(f, backend=fusionstitch.backend(target="cpu"))(x, w, b)
    ref = f(x, w, b)
    assert out.shape == ref.shape
    assert _within_bound(out / 2, ref / 2, torch.relu(x), w, b, groups, stride, padding,
                         dilation)
    assert out.stride() == ref.stride()            # the caller gets eager's layout
    # the caller's tensors are neither written nor re-laid out
    assert torch.equal(x, copies[0]) and torch.equal(w, copies[1])
    assert [x.stride(), w.stride()] == strides


def test_compiled_training_gradients_equal_torch():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, 3, padding=1, groups=8),
                              torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
    ref_net = __import__("copy").deepcopy(net)
    x = torch.randn(2, 3, 9, 9)

    torch._dynamo.reset()
    comp = torch.compile(net, backend=fusionstitch.backend(target="cpu"))
    for model, xin in ((comp, x.clone()), (ref_net, x.clone())):
        out = model(torch.relu(xin))
        out.sigmoid().sum().backward()
    for (name, p), q in zip(net.named_parameters(), ref_net.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
        # eager's layout (a size-1 dim's stride is no layout: a depthwise weight's
        # gradient from a channels-last backward has another one there)
        assert [s for s, n in zip(p.grad.stride(), p.shape) if n != 1] == \
            [s for s, n in zip(q.grad.stride(), q.shape) if n != 1], name


def test_a_convolution_next_to_batch_statistics_runs_channels_last():
    """Batch norm in training: statistics over (N, H, W) of the result, and the next
    convolution's input computed from them. Both convolutions run channels-last (they
    were left NCHW while the planners found no schedule for such a reduction fused with
    an NHWC read or store: resnet_bottleneck_train went from 6 to 37 kernels), and the
    statistics, the normalisation and the NHWC copy for the next convolution are one
    kernel (codegen/lower.py stores the copy at the statistics' own rows)."""
    from fusionstitch.fusion import make_plan
    b = GraphBuilder()
    x, w, w2 = b.param((2, 4, 6, 6)), b.param((4, 4, 3, 3)), b.param((4, 4, 3, 3))
    y = b.op("convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    vm = b.op("var_mean.correction", y, [0, 2, 3], correction=0, keepdim=True)
    z = b.op("relu.default", b.op("sub.Tensor", y, b.getitem(vm, 1)))
    y2 = b.op("convolution.default", z, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    g = b.build(b.op("relu.default", y2))
    h = channels_last_convs(g, CPU)
    assert _ops(h).count("clone.default") == 2      # x's copy and z's
    xs = random_inputs(g)
    torch.testing.assert_close(run_graph(h, xs)[0], run_graph(g, xs)[0], rtol=1e-5,
                               atol=1e-5)
    plan = make_plan(canonicalize(g, target=CPU), "stitch", "cpu")
    # x's copy, the statistics with z's copy, the last relu
    assert plan.num_kernels == 3, plan.to_text()


def test_compiled_batch_norm_training_equals_torch():
    """A residual block in training (convolution, batch norm, relu, twice, a strided
    one among them, and max pooling), every convolution channels-last in the forward and
    the backward: outputs, gradients and the running statistics as eager's, step after
    step, and the caller's tensors untouched."""
    import copy
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.b1 = torch.nn.BatchNorm2d(8)
            self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
            self.b2 = torch.nn.BatchNorm2d(8)
            self.c3 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
            self.b3 = torch.nn.BatchNorm2d(8)

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = torch.nn.functional.max_pool2d(y, 2)
            z = torch.relu(self.b2(self.c2(y)))
            return torch.relu(self.b3(self.c3(z)) + z)

    net = Block()
    ref, ref64 = copy.deepcopy(net), copy.deepcopy(net).double()
    torch._dynamo.reset()
    comp = torch.compile(net, backend=fusionstitch.backend(target="cpu"))
    for step in range(2):
        x = torch.randn(3, 3, 12, 12)
        kept = x.clone()
        outs = comp(x), ref(x.clone()), ref64(x.double())
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-4)
        assert torch.equal(x, kept) and outs[0].stride() == outs[1].stride()
        for o in outs:
            (o * o.sin()).sum().backward()
        # gradients: sums of thousands of products, in another order than eager's; held
        # to eager's own distance from float64 (4x, or 4 ulps of the largest gradient)
        for (name, p), q, d in zip(net.named_parameters(), ref.parameters(),
                                   ref64.parameters()):
            ours, eager = ((g.grad.double() - d.grad).abs().max() for g in (p, q))
            floor = EPS32 * d.grad.abs().max()
            assert ours <= 4 * max(eager, floor), (step, name, float(ours), float(eager))
        for (name, b), c in zip(net.named_buffers(), ref.buffers()):
            torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-6, msg=name)


def _saved_pointwise_then_statistics(batch=2, padding=(0, 0)):
    """A 1x1 convolution saved for the backward, batch statistics of its result, and a
    3x3 convolution of the normalised value."""
    b = GraphBuilder()
    x, w1, w2 = b.param((batch, 4, 6, 6)), b.param((4, 4, 1, 1)), b.param((4, 4, 3, 3))
    y = b.op("convolution.default", x, w1, None, [1, 1], list(padding), [1, 1], False,
             [0, 0], 1)
    vm = b.op("var_mean.correction", y, [0, 2, 3], correction=0, keepdim=True)
    z = b.op("relu.default", b.op("sub.Tensor", y, b.getitem(vm, 1)))
    y2 = b.op("convolution.default", z, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    return b.build(b.op("relu.default", y2), y)


def _rewritten(g):
    return sum(1 for n in g.nodes if n.op == "convolution.default"
               and g[n.args[0].name].op == "permute.default")


def test_convolutions_torch_runs_in_its_own_loops_stay_nchw(one_thread, monkeypatch):
    """An unstrided 1x1 convolution of a batch under 16 on one thread that is not a GEMM
    (padded, or GEMMs turned off) runs through torch's im2col loops, not oneDNN (ATen's
    use_mkldnn): channels-last buys it nothing. Batch statistics of its NCHW result feed
    the next convolution: its NHWC copy would be stored across the statistics kernel's
    grain, so that one stays NCHW too."""
    free = frozenset({1})
    g = _saved_pointwise_then_statistics(padding=(1, 1))
    assert _rewritten(channels_last_convs(g, CPU, free_outputs=free)) == 0
    # a batch of 16 runs through oneDNN: both channels-last
    g16 = _saved_pointwise_then_statistics(batch=16, padding=(1, 1))
    assert _rewritten(channels_last_convs(g16, CPU, free_outputs=free)) == 2
    # unpadded, it is a GEMM over NHWC rows: its statistics are of an NHWC value, and the
    # 3x3 convolution they normalise runs channels-last
    h = channels_last_convs(_saved_pointwise_then_statistics(), CPU, free_outputs=free)
    assert "mm.default" in _ops(h) and _rewritten(h) == 1
    monkeypatch.setenv("FUSIONSTITCH_CONV_GEMM", "0")
    h = channels_last_convs(_saved_pointwise_then_statistics(), CPU, free_outputs=free)
    assert "mm.default" not in _ops(h) and _rewritten(h) == 0
    torch.set_num_threads(2)        # two threads run every one through oneDNN
    assert _rewritten(channels_last_convs(g, CPU, free_outputs=free)) == 2


def _with_strides(g, name, strides):
    from fusionstitch.ir.graph import Graph
    return Graph(tuple(n.replace(kwargs=(("strides", strides),)) if n.name == name else n
                       for n in g.nodes), g.outputs, g.name)


def test_a_convolution_of_a_channels_last_weight_runs_channels_last(one_thread):
    """torch runs a convolution channels-last when its weight is (a model made
    channels-last: ATen's thnn_conv_use_channels_last / mkldnn_conv_use_channels_last),
    on its own loops too, and copies an NCHW input itself: a 1x1 convolution that would
    stay NCHW by the loops rule goes channels-last with such a weight, and the one after
    its batch statistics too. A 1x1 weight's channels-last strides differ from row-major
    only on its size-1 dims. (Padded: an unpadded one is a GEMM.)"""
    g = _saved_pointwise_then_statistics(padding=(1, 1))
    w1, w2 = [n.name for n in g.nodes if n.op == "parameter"][1:3]
    cl1 = _with_strides(g, w1, (4, 1, 4, 4))            # [4, 4, 1, 1] channels-last
    assert _rewritten(channels_last_convs(cl1, CPU, free_outputs=frozenset({1}))) == 2
    # row-major 1x1 strides recorded on their size-1 dims: NCHW to torch, left alone
    nchw = _with_strides(g, w1, (4, 1, 1, 1))
    assert _rewritten(channels_last_convs(nchw, CPU, free_outputs=frozenset({1}))) == 0
    # the 3x3 weight channels-last alone: the second convolution goes, the first stays
    cl2 = _with_strides(g, w2, (36, 1, 12, 4))
    h = channels_last_convs(cl2, CPU, free_outputs=frozenset({1}))
    assert _rewritten(h) == 1
    xs = random_inputs(cl1)
    xs[1] = xs[1].contiguous(memory_format=torch.channels_last)
    for a, b in zip(run_graph(channels_last_convs(cl1, CPU, free_outputs=frozenset({1})), xs),
                    run_graph(cl1, xs)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_backward_of_a_channels_last_weight_takes_its_gradient_channels_last(
        one_thread, monkeypatch):
    """The backward of a 1x1 convolution torch runs through its own loops (GEMMs off,
    `_backward_as_gemm`), of a channels-last input and weight: torch runs it
    channels-last, so the gradient is copied NHWC by its producer (it was copied by
    torch, ~600 us a copy in mobilenet_v2_train_cl, twice per backward)."""
    monkeypatch.setenv("FUSIONSTITCH_CONV_GEMM", "0")
    g = _conv_backward_graph(kernel=1)
    assert channels_last_convs(g, CPU) is g
    w = [n.name for n in g.nodes if n.op == "parameter"][2]
    h = channels_last_convs(_with_strides(g, w, (4, 1, 4, 4)), CPU)
    [cb] = [n for n in h.nodes if n.op == "convolution_backward.default"]
    assert h[h[cb.args[0].name].args[0].name].op == "clone.default"


class _InvertedResidual(torch.nn.Module):
    """mobilenet_v2's block: 1x1 expansion, depthwise 3x3, 1x1 projection (a bias on it
    with `bias`), batch norms, activation `act`, the residual sum."""

    def __init__(self, act, bias=False):
        super().__init__()
        self.act = act
        self.c1 = torch.nn.Conv2d(8, 24, 1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(24)
        self.c2 = torch.nn.Conv2d(24, 24, 3, padding=1, groups=24, bias=False)
        self.b2 = torch.nn.BatchNorm2d(24)
        self.c3 = torch.nn.Conv2d(24, 8, 1, bias=bias)
        self.b3 = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.act(self.b1(self.c1(x)))
        y = self.act(self.b2(self.c2(y)))
        return x + self.b3(self.c3(y))


def _no_copy_in_convolutions_and_eager_gradients(prof, net, ref, ref64):
    """No torch convolution in `prof` copied an operand to another layout, and `net`'s
    gradients are `ref`'s within 4x its own distance from `ref64`'s (float64)."""
    copies = [e for e in prof.events() if e.name == "aten::contiguous"
              and e.cpu_parent is not None and "conv" in e.cpu_parent.name
              and any(k.name == "aten::clone" for k in e.cpu_children)]
    assert not copies, [(e.cpu_parent.name, e.input_shapes) for e in copies]
    for (name, p), q, d in zip(net.named_parameters(), ref.parameters(), ref64.parameters()):
        ours, eager = ((g.grad.double() - d.grad).abs().max() for g in (p, q))
        assert ours <= 4 * max(eager, EPS32 * d.grad.abs().max()), (name, float(ours))


def test_a_compiled_channels_last_model_hands_torch_no_layout_to_copy(one_thread):
    """An inverted residual block made channels-last (1x1 convolutions, batch 4, one
    thread: torch's own loops, which run channels-last for a channels-last weight) in a
    training step: no convolution, forward or backward, copies an operand to another
    layout inside torch (mobilenet_v2_train_cl: two 600 us copies per 1x1 backward), and
    the gradients are eager's within its own distance from float64."""
    import copy
    torch.manual_seed(0)
    net = _InvertedResidual(torch.nn.functional.relu6).to(memory_format=torch.channels_last)
    ref, ref64 = copy.deepcopy(net), copy.deepcopy(net).double()
    torch._dynamo.reset()
    comp = torch.compile(net, backend=fusionstitch.backend(target="cpu"))
    x = torch.randn(4, 8, 10, 10).contiguous(memory_format=torch.channels_last)
    (comp(x) * x).sum().backward()                          # compile
    for m in (net, ref, ref64):
        m.zero_grad()
    with torch.profiler.profile() as prof:
        (comp(x) * x).sum().backward()
    for o in (ref(x), ref64(x.double())):
        (o * o.new_tensor(x)).sum().backward()
    _no_copy_in_convolutions_and_eager_gradients(prof, net, ref, ref64)


def test_a_convolution_input_saved_for_the_backward_is_saved_channels_last():
    """A forward's value saved for its backward (a free output) that a channels-last
    convolution reads is saved as the convolution's channels-last copy: the backward's
    convolution takes it as it is, and its producer stores it once, not twice."""
    b = GraphBuilder()
    x, w = b.param((2, 4, 6, 6)), b.param((4, 4, 3, 3))
    r = b.op("relu.default", x)
    y = b.op("convolution.default", r, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    g = b.build(b.op("relu.default", y), r)
    saved = channels_last_convs(g, CPU, free_outputs=frozenset({1}))
    out = saved[saved.outputs[1].name]
    assert out.op == "permute.default" and tuple(out.args[1]) == (0, 3, 1, 2)
    assert saved[out.args[0].name].op == "clone.default"
    # a value the caller sees keeps its own layout
    seen = channels_last_convs(g, CPU)
    assert seen.outputs[1].name == r.name


def test_a_pooling_input_saved_for_the_backward_is_saved_channels_last():
    """A pooling's input the backward reads too (resnet's stem: relu of batch-normalised
    values, read by the relu's and the max pooling's backward) is saved as the pooling's
    channels-last copy: the statistics' kernel stored it twice, once NHWC for the
    pooling and once NCHW across its grain (4.2x Inductor's time for that kernel in
    bench.groups)."""
    b = GraphBuilder()
    x = b.param((2, 4, 8, 8))
    r = b.op("relu.default", x)
    mp = b.op("max_pool2d_with_indices.default", r, [3, 3], [2, 2], [1, 1])
    g = b.build(b.op("relu.default", b.getitem(mp, 0)), r, b.getitem(mp, 1))
    saved = channels_last_convs(g, CPU, free_outputs=frozenset({1, 2}))
    out = saved[saved.outputs[1].name]
    assert out.op == "permute.default" and tuple(out.args[1]) == (0, 3, 1, 2)
    assert saved[out.args[0].name].op == "clone.default"
    assert _ops(saved).count("clone.default") == 1
    xs = random_inputs(g)
    for a, c in zip(run_graph(saved, xs), run_graph(g, xs)):
        assert torch.equal(a, c)
    # a value the caller sees keeps its own layout
    assert channels_last_convs(g, CPU).outputs[1].name == r.name


def _conv_backward_graph(strides=(144, 1, 24, 4), grad_input_out=False, kernel=3):
    """A backward's convolution_backward of a saved input `x` (recorded `strides`: those
    of the tensor the backward is compiled for) and a gradient our kernels compute."""
    from fusionstitch.ir.graph import Graph
    b = GraphBuilder()
    g0, x, w = b.param((2, 4, 6, 6)), b.param((2, 4, 6, 6)), b.param((4, 4, kernel, kernel))
    grad = b.op("mul.Scalar", g0, 2.0)
    pad = kernel // 2
    cb = b.op("convolution_backward.default", grad, x, w, [0], [1, 1], [pad, pad], [1, 1],
              False, [0, 0], 1, [True, True, False])
    gi, gw = b.getitem(cb, 0), b.getitem(cb, 1)
    out = gi if grad_input_out else b.op("relu.default", gi)
    g = b.build(out, gw)
    return Graph(tuple(n.replace(kwargs=(("strides", strides),))
                       if n.name == x.name and strides else n for n in g.nodes),
                 g.outputs, g.name)


def test_a_convolution_backward_of_a_channels_last_input_takes_its_gradient_so(one_thread):
    """torch runs a convolution's backward channels-last when its input is (the forward
    saved its channels-last copy) and copies an NCHW gradient to channels-last itself:
    our kernel stores the gradient NHWC instead (the copy fuses into its producer), and
    the input gradient, channels-last from torch, is spelled as the forward's result is
    (a permute to NHWC and back) for the kernels that read it."""
    g = _conv_backward_graph()
    h = channels_last_convs(g, CPU)
    [cb] = [n for n in h.nodes if n.op == "convolution_backward.default"]
    assert h[cb.args[0].name].op == "permute.default"
    assert h[h[cb.args[0].name].args[0].name].op == "clone.default"
    [gi] = [n for n in h.nodes if n.op == "getitem" and n.args[1] == 0]
    [back] = [n for n in h.nodes if n.op == "permute.default" and n.args[0].name in
              {m.name for m in h.nodes if m.op == "permute.default"
               and m.args[0].name == gi.name}]
    assert tuple(back.args[1]) == (0, 3, 1, 2)
    xs = random_inputs(g)
    xs[1] = xs[1].contiguous(memory_format=torch.channels_last)
    for a, b in zip(run_graph(h, xs), run_graph(g, xs)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # an NCHW input: torch runs NCHW, and an input gradient the caller sees keeps its own
    for other in (_conv_backward_graph(strides=None),
                  _conv_backward_graph(grad_input_out=True)):
        assert channels_last_convs(other, CPU) is other


def test_a_1x1_convolution_backward_torch_runs_in_its_own_loops_stays(one_thread,
                                                                     monkeypatch):
    """With GEMMs off, a 1x1 backward of a batch under 16 on one thread is left to
    torch's own loops, channels-last input or not."""
    monkeypatch.setenv("FUSIONSTITCH_CONV_GEMM", "0")
    g = _conv_backward_graph(kernel=1)
    assert channels_last_convs(g, CPU) is g


def test_kernels_after_a_channels_last_convolution_read_dense_inputs():
    """torch returns a channels-last convolution's result channels-last; the permute to
    NHWC (the order of its memory) runs before the kernels that read it, so every kernel
    input is contiguous and the kernels take their dense version (inside a kernel, the
    permute made its input the channels-last memory read as a strided NCHW tensor:
    index arithmetic per element, 3-13x slower on mobilenet_v2's batch norms)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                              torch.nn.ReLU6(), torch.nn.Conv2d(8, 8, 3, padding=1, groups=8),
                              torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
                              torch.nn.Conv2d(8, 4, 1), torch.nn.BatchNorm2d(4)).eval()
    x = torch.randn(2, 3, 9, 9)
    graphs: list = []
    torch._dynamo.reset()
    comp = torch.compile(net, backend=fusionstitch.backend(target="cpu", _sink=graphs))
    with torch.no_grad():
        ref = net(x)
        comp(x)
        [prog] = [s.program for g in graphs for s in g.specialisations.values()]
        seen = []
        for step in prog.kernel_steps.values():
            def run(buffers, syms, _run=step.run):
                seen.append([b.is_contiguous() for b in buffers])
                return _run(buffers, syms)
            step.run = run
        out = comp(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    assert len(seen) == len(prog.kernel_steps) >= 3
    assert all(all(flags) for flags in seen), seen
    graph = prog.plan.graph
    for g in prog.plan.groups:
        for n in g.nodes:
            node = graph[n]
            if node.op == "permute.default" and len(g.nodes) > 1:
                assert graph[node.inputs[0]].op != "convolution.default", (g.nodes, n)


def _pool_graph(avg=False):
    """relu -> 3x3 max (or average) pooling -> convolution."""
    b = GraphBuilder()
    x = b.param((2, 4, 9, 8))
    w = b.param((6, 4, 3, 3))
    r = b.op("relu.default", x)
    if avg:
        p = b.op("avg_pool2d.default", r, [3, 3], [2, 2], [1, 1])
    else:
        p = b.getitem(b.op("max_pool2d_with_indices.default", r, [3, 3], [2, 2], [1, 1]), 0)
    y = b.op("convolution.default", p, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    return b.build(b.op("mul.Scalar", y, 2.0))


@pytest.mark.parametrize("avg", [False, True], ids=["max", "avg"])
def test_a_pooling_runs_channels_last_and_its_convolution_takes_it_as_is(avg):
    """torch's pooling vectorises over the channels of a channels-last input (3x3 max
    pooling of [4, 32, 32, 32]: 825 us NCHW, 77 us channels-last, one thread): the
    pooling reads the NHWC copy its producer stores, and the convolution after it reads
    its channels-last result without a copy of its own."""
    g = _pool_graph(avg=avg)
    h = channels_last_convs(g, CPU)
    pool = next(n for n in h.nodes if "pool" in n.op)
    src = h[pool.args[0].name]
    assert src.op == "permute.default" and h[src.args[0].name].op == "clone.default"
    assert _ops(h).count("clone.default") == 1          # the pooling's copy alone
    conv = next(n for n in h.nodes if n.op == "convolution.default")
    assert h[conv.args[0].name].op in ("getitem", "avg_pool2d.default")
    xs = random_inputs(g)
    torch.testing.assert_close(run_graph(h, xs)[0], run_graph(g, xs)[0], rtol=0, atol=0)


def test_a_channels_last_input_is_not_copied():
    """A graph input whose recorded strides are channels-last (a model and its images in
    channels-last memory) goes to the convolution as it is."""
    from fusionstitch.ir.graph import Graph
    b = GraphBuilder()
    x = b.param((2, 4, 9, 8))
    w = b.param((6, 4, 3, 3))
    y = b.op("convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    g = b.build(b.op("relu.default", y))
    cl = Graph(tuple(n.replace(kwargs=(("strides", (288, 1, 32, 4)),))
                     if n.name == x.name else n for n in g.nodes), g.outputs, g.name)
    for graph, copies in ((g, 1), (cl, 0)):
        h = channels_last_convs(graph, CPU)
        assert _ops(h).count("clone.default") == copies
        assert "convolution.default" in _ops(h)


def test_a_permute_back_of_nhwc_rows_is_not_copied():
    """convnext: a layer norm over the channels of NHWC rows, permuted back to NCHW, is
    channels-last memory already: its convolution reads it without a copy."""
    b = GraphBuilder()
    x = b.param((2, 9, 8, 4))
    w = b.param((4, 1, 7, 7))
    m = b.op("mul.Scalar", x, 3.0)
    p = b.op("permute.default", m, [0, 3, 1, 2])
    y = b.op("convolution.default", p, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 4)
    g = b.build(b.op("relu.default", y))
    h = channels_last_convs(g, CPU)
    conv = next(n for n in h.nodes if n.op == "convolution.default")
    assert conv.args[0].name == p.name and "clone.default" not in _ops(h)


def test_compiled_pooling_networks_equal_torch():
    """A small CNN with max pooling and residuals, NCHW and channels-last, against
    eager (inference)."""
    torch.manual_seed(0)
    conv1, conv2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)

    def f(x):
        h = torch.relu(conv1(x))
        p = torch.nn.functional.max_pool2d(h, 3, 2, 1)
        return torch.relu(conv2(p) + p).mean((2, 3))
    for fmt in (torch.contiguous_format, torch.channels_last):
        torch._dynamo.reset()
        x = torch.randn(2, 3, 16, 16).contiguous(memory_format=fmt)
        c = torch.compile(f, backend=fusionstitch.backend(target="cpu"))
        with torch.no_grad():
            torch.testing.assert_close(c(x), f(x), rtol=1e-4, atol=1e-5)
