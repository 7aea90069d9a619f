"""Every kernel input expects, at lowering, the strides it gets at launch
(codegen/view_strides.py), so that the dense version of its kernel is the one that
runs: row-major for what our kernels and GEMMs write, the view's strides for a view,
torch's layout for a library call's result (a convolution of a channels-last input,
flash attention's gradients), the recorded strides for a graph input that is not
row-major (a slice of a larger tensor, a transpose, a channels-last image).

The check is the property itself: each launch's actual strides against the kernel's
expectation, on programs whose values come in each of those layouts."""
import math

import pytest
import torch
import torch.nn.functional as F

import fusionstitch
from fusionstitch.runtime.launch import KernelStep


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()


def launches(fn, args, backward=False, dynamic=False):
    """(buffer, expected strides, strides at launch) of every kernel input of every
    launch of one call of `fn` compiled, after one call that compiles it."""
    sink: list = []
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu", _sink=sink),
                      dynamic=dynamic)

    def call():
        out = c(*args)
        if backward:
            out.sum().backward()
        return out
    call()
    for cg in sink:           # the generated per-call code launches kernels inline
        for spec in cg.specialisations.values():
            spec.program.use_generated(False)
    seen = []
    original = KernelStep.__call__

    def record(self, values, pool=None):
        for (slot, element), b in zip(self.inputs, self.kernel.inputs):
            v = values[slot] if element is None else values[slot][element]
            shape = [int(d) for d in v.shape]
            want = b.expected or tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))
            seen.append((b, want, v.stride(), shape))
        return original(self, values, pool)
    KernelStep.__call__ = record
    try:
        out = call()
    finally:
        KernelStep.__call__ = original
    torch._dynamo.reset()
    ref = fn(*[a.detach().requires_grad_(a.requires_grad) for a in args])
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    return seen


def mismatches(seen):
    return [(b.name, b.value, want, got) for b, want, got, shape in seen
            if any(n > 1 and w != g for n, w, g in zip(shape, want, got))]


wt = torch.randn(8, 4, 3, 3)


def _attention(x):
    """Attention training, as a transformer layer runs it: q, k, v are views of one
    projection, q and k go through a rotary-like epilogue; the gradients of flash
    attention come laid out (batch, seq, heads, dim) under (batch, heads, seq, dim)
    shapes, and the backward of the epilogue and of the views reads them."""
    qkv = (x * 1.5).view(2, 16, 3, 4, 16).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    q = torch.cat([-q[..., 8:], q[..., :8]], -1) * 0.5 + q
    k = k * torch.sigmoid(k)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return (o * 2).transpose(1, 2).reshape(2, 16, 64)


CASES = {
    # a view of a convolution's result (contiguous input: contiguous result)
    "conv_view": (lambda x: F.conv2d(x, wt).permute(0, 2, 3, 1) * 2,
                  lambda: [torch.randn(2, 4, 10, 10)], False),
    # a convolution of channels-last input returns channels-last memory
    "conv_channels_last": (lambda x: torch.relu(F.conv2d(x, wt)) * 2,
                           lambda: [torch.randn(2, 4, 10, 10).to(
                               memory_format=torch.channels_last)], False),
    # an input that is a slice of a larger tensor (a chunk of a GEMM's result)
    "slice_input": (lambda x: F.silu(x) * 3,
                    lambda: [torch.randn(40, 512)[:, :256]], False),
    # a transposed input
    "transposed_input": (lambda x: torch.exp(x) + 1, lambda: [torch.randn(64, 48).t()],
                         False),
    # a channels-last image
    "channels_last_input": (lambda x: torch.sigmoid(x) * x,
                            lambda: [torch.randn(2, 16, 8, 8).to(
                                memory_format=torch.channels_last)], False),
    # training through flash attention: its gradients' layout
    "attention_backward": (_attention,
                           lambda: [torch.randn(2, 16, 192, requires_grad=True)], True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_launch_strides_are_the_expected_ones(case):
    fn, make, backward = CASES[case]
    torch.manual_seed(0)
    seen = launches(fn, make(), backward=backward)
    assert seen, "no kernel launched"
    assert not mismatches(seen), mismatches(seen)


def test_the_expectation_is_printed_as_the_dense_version():
    """A sliced input's strides are recorded on its parameter and are the constants of
    the kernel's dense version."""
    seen = launches(lambda x: F.silu(x) * 3, [torch.randn(40, 512)[:, :256]])
    (b, want, got, _), = seen
    assert b.expected == (512, 1) == tuple(got)


def test_a_symbolic_graph_expects_the_strides_of_its_first_call():
    """Under dynamic shapes the kernel expects the strides of the call it was compiled
    for (a slice of a [n, 512] GEMM result: 512, as Mixtral's experts' chunks)."""
    seen = launches(lambda x: F.silu(x) * 3, [torch.randn(40, 512)[:, :256]], dynamic=True)
    assert [b.expected for b, *_ in seen] == [(512, 1)]


def test_wrong_expectations_give_right_numbers():
    """The expectation is checked at launch: a compiled graph called with other strides
    than it was compiled for (no guard on them: a symbolic graph) runs its general
    version."""
    fn = torch.compile(lambda x: F.silu(x) * 3, backend=fusionstitch.backend(target="cpu"),
                       dynamic=True)
    for x in (torch.randn(40, 512)[:, :256], torch.randn(40, 256), torch.randn(256, 40).t()):
        torch.testing.assert_close(fn(x), F.silu(x) * 3)


def test_answers_do_not_depend_on_the_order_of_the_questions():
    """expected_strides keeps its answers per graph (planning asks the same ones again
    and again); each answer is the one a fresh graph gives, asked in any order (its
    memo is keyed by the depth left: a library call followed from far is cut short)."""
    from fusionstitch.codegen.view_strides import expected_strides
    from fusionstitch.frontend.build import GraphBuilder
    from fusionstitch.ir.graph import Graph
    b = GraphBuilder()
    x = b.param((2, 4, 9, 8))
    w = b.param((4, 4, 3, 3))
    y = x
    for _ in range(6):          # a chain of convolutions longer than the depth followed
        y = b.op("convolution.default", y, w, None, [1, 1], [1, 1], [1, 1], False,
                 [0, 0], 1)
    b.op("permute.default", y, [0, 2, 3, 1])
    g = b.build(y)
    g = Graph(tuple(n.replace(kwargs=(("strides", (288, 1, 32, 4)),))
                    if n.name == x.name else n for n in g.nodes), g.outputs, g.name)
    names = [n.name for n in g.nodes]

    def fresh(name):
        return expected_strides(Graph(g.nodes, g.outputs, g.name), name)
    want = {n: fresh(n) for n in names}
    assert any(want.values())
    h = Graph(g.nodes, g.outputs, g.name)
    assert {n: expected_strides(h, n) for n in reversed(names)} == want
    assert {n: expected_strides(h, n) for n in names} == want
