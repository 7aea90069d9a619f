"""Explicit conversions to float16 / bfloat16 round inside kernels as eager's do
(`x.half().float()` is x rounded to half, not x); FUSIONSTITCH_ELIDE_HALF_CASTS=1 elides
them (off by default)."""
import math
import shutil

import pytest
import torch

import fusionstitch

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    monkeypatch.delenv("FUSIONSTITCH_ELIDE_HALF_CASTS", raising=False)
    torch._dynamo.reset()
    fusionstitch.reset_stats()


def _x():
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.randn(2000, generator=g) * 3, torch.tensor(
        [0.0, -0.0, 1e-40, -1e-39, 65519.0, 65520.0, 1e5, 3.4e38, math.inf, -math.inf,
         1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8])])


def _same(got, want):
    """Bit for bit (NaNs anywhere the other has one)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan], want[~nan]), (got[~nan] != want[~nan]).sum()


ROUND_TRIPS = {
    "half": lambda x: x.half().float() * 2,
    "bfloat16": lambda x: x.bfloat16().float() + 1,
    "half_to_bfloat16": lambda x: x.half().bfloat16().float(),
    "bfloat16_to_half": lambda x: x.bfloat16().half().float(),
    "double_to_half": lambda x: x.double().half().double(),
    "int_to_half": lambda x: (x * 1000).long().half().float(),
    "softmax_bf16": lambda x: torch.softmax(x.bfloat16().view(-1, 19), -1).float() * 3,
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_explicit_half_conversions_round_as_eager(name, target):
    fn = ROUND_TRIPS[name]
    x = _x()
    got = torch.compile(fn, backend=fusionstitch.backend(target=target), dynamic=False)(x)
    _same(got, fn(x))
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0 and s["kernels_launched"] >= 1


@pytest.mark.parametrize("target", TARGETS)
def test_knob_elides_the_conversions(target, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_ELIDE_HALF_CASTS", "1")
    x = _x()[:2000]
    got = torch.compile(lambda x: x.half().float(), backend=fusionstitch.backend(
        target=target), dynamic=False)(x)
    torch.testing.assert_close(got, x, rtol=0, atol=0)   # no rounding: x itself
