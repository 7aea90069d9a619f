"""scaled_dot_product_attention through the backend: forward values and gradients.

torch's fused attention kernels run as library calls (their logsumexp output is what
their backward reads; a decomposition had stood in for the forward and handed the
backward the attention matrix instead: gradients 50-70x eager's). Each case is judged
against eager and against a float64 run: the compiled result is within 1e-4 (norm-wise,
relative) of eager's and no more than 3x further from float64 than eager is.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fusionstitch
from fusionstitch.frontend.decompositions import decompositions
from fusionstitch.ir.graph import TensorType, TupleType
from fusionstitch.ir.ops import ATTENTION, Category, infer_type, lookup, type_of_value
from fusionstitch.ir.graph import Ref

RTOL = 1e-4


pytestmark = pytest.mark.usefixtures("strict_fresh")   # tests/conftest.py


def _qkv(b, hq, hk, lq, lk, e, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, e, generator=g) for h, n in ((hq, lq), (hk, lk), (hk, lk))]


def _mask(kind, lq, lk):
    if kind == "bool":
        m = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
        m[:, 0] = True
        return m
    if kind == "float":
        g = torch.Generator().manual_seed(7)
        return torch.randn(1, 1, lq, lk, generator=g)
    return None


# name: (b, hq, hk, lq, lk, e, keyword arguments of scaled_dot_product_attention)
CASES = {
    "causal": ((2, 4, 4, 32, 32, 16), dict(is_causal=True)),
    "plain_cross": ((2, 2, 2, 8, 24, 16), {}),
    "bool_mask": ((1, 2, 2, 16, 16, 8), dict(mask="bool")),
    "float_mask_scale": ((2, 2, 2, 16, 16, 8), dict(mask="float", scale=0.3)),
    "gqa": ((1, 4, 2, 16, 16, 8), dict(is_causal=True, enable_gqa=True)),
}


def _attention(case):
    dims, kw = CASES[case]
    kw = dict(kw)
    mask = _mask(kw.pop("mask", None), dims[3], dims[4])

    def fn(q, k, v, m=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)
    return fn, dims, mask


def _run(fn, qkv, mask, dtype=None):
    """out and the q/k/v gradients of sum(out * out)."""
    qkv = [t.detach().to(dtype or t.dtype).requires_grad_() for t in qkv]
    m = mask if mask is None or mask.dtype == torch.bool else mask.to(dtype or mask.dtype)
    out = fn(*qkv, m) if m is not None else fn(*qkv)
    (out * out).sum().backward()
    return [out.detach()] + [t.grad for t in qkv]


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("target", ["cpu", "interpret"])
@pytest.mark.parametrize("case", list(CASES))
def test_attention_forward_and_gradients_match_eager(case, target):
    if target == "interpret":
        pytest.importorskip("triton")
    fn, dims, mask = _attention(case)
    qkv = _qkv(*dims)
    eager = _run(fn, qkv, mask)
    exact = _run(fn, qkv, mask, torch.float64)
    compiled = torch.compile(fn, backend=fusionstitch.backend(target=target))
    for call in range(2):   # the second call reuses the compiled graphs and their buffers
        got = _run(compiled, qkv, mask)
        for what, g, e, x in zip(("out", "dq", "dk", "dv"), got, eager, exact):
            assert _rel(g, e) <= RTOL, (case, call, what, _rel(g, e))
            assert _rel(g, x) <= 3 * _rel(e, x) + 1e-6, (case, call, what, _rel(g, x),
                                                          _rel(e, x))
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0, s
    assert s["library_calls"] >= 4, s   # the attention forward and backward, twice


def test_attention_ops_are_library_calls_kept_whole():
    """No decomposition stands in for a fused attention op: its outputs are its own."""
    table = {f"{op._opname}.{op._overloadname}" for op in decompositions()}
    assert not (table & ATTENTION), sorted(table & ATTENTION)
    for name in ATTENTION:
        d = lookup(name)
        assert d.category == Category.LIBRARY and not d.fallback, d


def test_attention_ir_types_are_the_ops_outputs():
    """The IR type of each attention op is what the op returns, numbers among its results
    (flash attention's max_q, max_k) included as None elements, its RNG state as u64."""
    q = TensorType((2, 4, 16, 32), "f16")
    types = {"q": q, "k": q, "v": q}
    r = (Ref("q"), Ref("k"), Ref("v"))
    flash = infer_type("_scaled_dot_product_flash_attention.default", r, (), types)
    assert isinstance(flash, TupleType) and len(flash.elements) == 9
    assert flash.elements[0] == q and flash.elements[1] == TensorType((2, 4, 16), "f32")
    assert flash.elements[4] is None and flash.elements[5] is None   # max_q, max_k
    assert flash.elements[6].dtype == "u64"
    eff = infer_type("_scaled_dot_product_efficient_attention.default", r + (None, True),
                     (), types)
    assert len(eff.elements) == 4 and eff.elements[0] == q
    # on the CPU, the real op: output and logsumexp (B, H, L), never the (B, H, L, L) matrix
    qkv = _qkv(2, 4, 4, 16, 16, 8)
    real = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(*qkv)
    t = TensorType((2, 4, 16, 8), "f32")
    typed = infer_type("_scaled_dot_product_flash_attention_for_cpu.default", r, (),
                       {"q": t, "k": t, "v": t})
    assert typed == type_of_value(real) == TupleType((t, TensorType((2, 4, 16), "f32")))


def test_view_of_an_attention_output_whose_layout_follows_our_kernel():
    """The CPU flash attention's output takes its query's strides. Traced, the query is
    eager's `x.transpose(1, 2) * 2` (x's layout: the output's (B, L, H, E) memory makes
    the graph's `transpose(1, 2).view(B, L, H * E)` a view); here a kernel of ours makes
    that query contiguous, so the output is too and the view must copy (it crashed)."""
    def fn(x, k, v):
        q = x.transpose(1, 2) * 2
        out = F.scaled_dot_product_attention(q, k, v)
        return out.transpose(1, 2).view(x.shape[0], x.shape[1], -1)

    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 4, 16, generator=g)
    k, v = (torch.randn(2, 4, 8, 16, generator=g) for _ in range(2))
    expected = fn(x, k, v)
    got = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))(x, k, v)
    assert _rel(got, expected) <= RTOL
    assert fusionstitch.stats()["fallbacks"] == 0
