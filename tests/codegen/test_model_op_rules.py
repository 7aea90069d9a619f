"""Lowering rules for the ops the real-model suite (bench/models.py) ran through torch:
relu6 / hardtanh (MobileNetV2), `repeat` (Whisper), `slice_scatter` (the backward of a
slice: rotary embeddings' halves in LLaMA-style models, T5's and BART's shifted labels),
`linalg_vector_norm` (weight norm in wav2vec2; decomposed by the frontend into a sum of
powers), negative padding (a pad's backward: MobileNetV2's "same" padding) and integer
advanced indexing (`index.Tensor`: transformers' attention masks, position ids). Each was
a counted fallback ("no code generation rule"); with FUSIONSTITCH_STRICT=all a fallback
raises, so each test fails without its rule. Values against eager, on the cpu and
interpret targets, forward and backward, NaNs included.
"""
from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch
import torch.nn.functional as F

import fusionstitch

TARGETS = [pytest.param("cpu", marks=pytest.mark.skipif(not shutil.which("g++"),
                                                       reason="needs a C++ compiler")),
           pytest.param("interpret", marks=pytest.mark.skipif(
               importlib.util.find_spec("triton") is None, reason="needs triton"))]


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "all")
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    yield
    torch._dynamo.reset()


def _check(fn, args, target, grad=False):
    compiled = torch.compile(fn, backend=fusionstitch.backend(target=target))
    if grad:
        args = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
        twins = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
        fn(*twins).sum().backward()
        compiled(*args).sum().backward()
        for a, t in zip(args, twins):
            if t.grad is not None:
                torch.testing.assert_close(a.grad, t.grad, equal_nan=True)
    else:
        got, want = compiled(*args), fn(*args)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, equal_nan=True)
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0 and s["kernels_launched"] > 0, s


def _x(*shape, nan=True):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    if nan:
        x.view(-1)[0] = float("nan")
    return x


@pytest.mark.parametrize("target", TARGETS)
def test_hardtanh_and_relu6(target):
    _check(lambda x: (F.hardtanh(x * 3, -0.5, 2.0), F.relu6(x * 4), F.hardtanh(x + 1)),
           [_x(4, 9)], target)
    _check(lambda x: F.relu6(x * 4) * x, [_x(4, 9, nan=False)], target, grad=True)


@pytest.mark.parametrize("target", TARGETS)
def test_repeat(target):
    _check(lambda x: ((x * 2).repeat(2, 1, 3), (x + 1).repeat(1, 1), (x[:, :1] * 2).repeat(3, 4)),
           [_x(3, 5)], target)
    _check(lambda x: (x * 2).repeat(2, 3) * torch.arange(30.0).view(6, 5).repeat(1, 3),
           [_x(3, 5, nan=False)], target, grad=True)


@pytest.mark.parametrize("target", TARGETS)
def test_slice_scatter(target):
    def fn(x, y):
        z = x * 2
        return (torch.slice_scatter(z, y[:, :2], 1, 2, 8, 3),      # step 3, an end cut short
                torch.slice_scatter(z, y, 1, -5, None, 2),        # negative start
                torch.slice_scatter(z, y[:, :0], 1, 4, 4),        # nothing scattered
                torch.slice_scatter(z, y[:1, :1].expand(2, 10) + 1, 0, 1, 3, 1).t(),
                torch.slice_scatter(z, z[:, 3:6] + y, 1, 7, 100))
    _check(fn, [_x(3, 10), _x(3, 3, nan=False)], target)


@pytest.mark.parametrize("target", TARGETS)
def test_slice_backward_through_rotation(target):
    """rotate_half of LLaMA's rotary embeddings: its backward scatters into halves."""
    def fn(x, cos, sin):
        h = x.shape[-1] // 2
        rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
        return (x * cos + rot * sin) ** 2
    _check(fn, [_x(2, 3, 4, 8, nan=False), _x(4, 8, nan=False), _x(4, 8, nan=False)],
           target, grad=True)


@pytest.mark.parametrize("target", TARGETS)
def test_vector_norm(target):
    def fn(x):
        return (torch.linalg.vector_norm(x, dim=1), torch.linalg.vector_norm(x, 3, (0,), True),
                torch.linalg.vector_norm(x, float("inf")), torch.linalg.vector_norm(x, 1, -1))
    _check(fn, [_x(3, 10)], target)
    _check(lambda v: v / torch.linalg.vector_norm(v, dim=(1, 2), keepdim=True),
           [_x(4, 3, 5, nan=False)], target, grad=True)


@pytest.mark.parametrize("target", TARGETS)
def test_negative_padding(target):
    """A negative pad crops (the backward of a pad: MobileNetV2's "same" padding)."""
    def fn(x):
        y = x * 2
        return (F.pad(y, (-1, 2, 3, -2)), F.pad(y, (-2, -1)), F.pad(y, (1, -3), value=7.0),
                F.pad(y, (0, 0, -1, -1)))
    _check(fn, [_x(3, 5, 6)], target)
    _check(lambda x: F.pad(x * 3, (1, 2, 0, 1)) ** 2, [_x(2, 4, 5, nan=False)], target,
           grad=True)


@pytest.mark.parametrize("target", TARGETS)
def test_advanced_indexing(target):
    """x[i, j] with integer index tensors (transformers' masks read a padding mask at
    [batch, kv] positions; BERT's position ids): adjacent and split index dims, broadcast
    index tensors, negative indices, an integer source."""
    def fn(x, i, j, m):
        y = x * 2
        return (y[i, j],                        # both leading dims, broadcast (3,1) x (4,)
                y[:, i.view(-1)],                # one middle dim
                y[:, :, j] + 1,                  # the last dim, negative indices in j
                y[i, :, j.view(1, 4)],           # split index dims: B first
                m[j.view(-1, 1).abs(), j.abs()] * 3,   # an integer source
                torch.ops.aten.index.Tensor(y, [None, None, j.abs()]))
    x = _x(3, 4, 5)
    i = torch.tensor([[2], [0], [1]])
    j = torch.tensor([0, -1, 3, -4])
    m = torch.arange(25).view(5, 5)
    _check(fn, [x, i, j, m], target)
    # (its backward is index_put, a scatter: a counted fallback, tests/frontend/known_fallbacks)
