"""Kernel outputs stored into the memory of a value read for the last time
(runtime/inplace.py's `plan_dying_writes`, Inductor's in-place buffers).

Every case compares compiled against eager and against the same program with the
feature off (FUSIONSTITCH_INPLACE=0), checks that the caller's tensors are untouched,
and counts `inplace_writes` where a write must (or must not) happen. Sizes are above
INPLACE_MIN_BYTES."""
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion import make_plan
from fusionstitch.runtime.inplace import INPLACE_MIN_BYTES, plan_dying_writes

pytestmark = [pytest.mark.skipif(not shutil.which("g++"), reason="needs a C++ compiler"),
              pytest.mark.usefixtures("strict_fresh")]


def _run(fn, args, monkeypatch, inplace=True, grad=False):
    monkeypatch.setenv("FUSIONSTITCH_INPLACE", "1" if inplace else "0")
    torch._dynamo.reset()
    comp = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    ctx = torch.enable_grad if grad else torch.no_grad
    outs = []
    for _ in range(3):           # the first call decides; later ones run the generated code
        fusionstitch.reset_stats()
        with ctx():
            outs.append(comp(*args))
    return outs[-1], fusionstitch.stats()["inplace_writes"], outs


def _conv_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 1), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 32, 1), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 16, 1)).eval()


def test_a_conv_nets_elementwise_kernels_write_into_the_convolutions_results(monkeypatch):
    # (1x1 convolutions would run as GEMMs, passes/conv_layout.py: these stay
    # convolutions. A GEMM's 2-D result, read in NHWC order by a kernel writing NCHW,
    # is not written into: its elements are not read where they are written)
    monkeypatch.setenv("FUSIONSTITCH_CONV_GEMM", "0")
    m, x = _conv_net(), torch.randn(4, 16, 32, 32)
    assert 4 * 32 * 32 * 32 * 4 >= INPLACE_MIN_BYTES
    before = x.clone()
    got, writes, outs = _run(m, (x,), monkeypatch)
    off, none, _ = _run(m, (x,), monkeypatch, inplace=False)
    with torch.no_grad():
        want = m(x)
    assert writes >= 1 and none == 0
    assert torch.equal(got, off)                 # the same kernels, the same numbers
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(x, before)
    # each call's result is its own memory: an earlier result is not overwritten
    torch.testing.assert_close(outs[0], want, rtol=1e-5, atol=1e-5)


def test_a_value_read_again_later_keeps_its_memory(monkeypatch):
    # y is read by the relu kernel and again by a GEMM after it: no write into y
    def fn(a, b):
        y = a @ b
        z = torch.relu(y) * 2
        return z @ b.t() + y.mean()
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=gen), torch.randn(256, 256, generator=gen)
    got, writes, _ = _run(fn, (a, b), monkeypatch)
    off, _, _ = _run(fn, (a, b), monkeypatch, inplace=False)
    assert torch.equal(got, off)                 # the same kernels, the same numbers
    # (the mean, not the sum, of y: a sum of 65536 values near 16 in another order than
    # eager's is off by more than any fixed atol; the mean is the same test of y's memory)
    torch.testing.assert_close(got, fn(a, b), rtol=1e-4, atol=1e-3)


def test_a_graph_output_and_a_callers_tensor_are_never_written(monkeypatch):
    def fn(x, w):
        y = x @ w               # returned too: its memory is the caller's
        return y, torch.tanh(y) + 1, torch.sigmoid(x)
    x, w = torch.randn(256, 256), torch.randn(256, 256)
    before = x.clone()
    (y, t, s), writes, _ = _run(fn, (x, w), monkeypatch)
    ry, rt, rs = fn(x, w)
    assert writes == 0
    torch.testing.assert_close(y, ry, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(t, rt, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s, rs)
    assert torch.equal(x, before)
    assert y.data_ptr() != t.data_ptr()


def test_a_training_step_keeps_what_the_backward_reads(monkeypatch):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
    x = torch.randn(256, 128)

    def step(x):
        return m(x).square().mean()
    loss, _, _ = _run(step, (x,), monkeypatch, grad=True)
    m.zero_grad()
    loss.backward()
    got = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    step(x).backward()
    for g, p in zip(got, m.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)


def _plan(build):
    b = GraphBuilder()
    g = build(b)
    plan = make_plan(g, "stitch", target="cpu")
    from fusionstitch.fusion.lowered import lower_plan
    lowered = lower_plan(plan, "cpu")
    return plan, {gid: k for gid, k in lowered.kernels.items()}


def test_only_new_memory_read_for_the_last_time_is_taken():
    n = 256

    def build(b):
        x, w = b.param((n, n), "f32"), b.param((n, n), "f32")
        y = b.op("mm.default", x, w)              # new memory, read once: taken
        r = b.op("relu.default", y)
        s = b.op("sigmoid.default", x)            # a parameter: never
        return b.build(r, s)
    plan, kernels = _plan(build)
    writes = plan_dying_writes(plan, kernels, {})
    targets = {v for pairs in writes.values() for _, v in pairs}
    assert targets and all(plan.graph[v].op == "mm.default" for v in targets)
