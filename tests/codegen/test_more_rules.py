"""Ops that ran through torch for want of a code-generation rule (and cut the fusion
groups around them), now lowered from the IR's ops (codegen/lowerings.py): leaky_relu,
elu (selu, celu), fmax / fmin, clamp with tensor bounds, flip. Eager's bits on NaN,
infinities and signed zeros, static and symbolic sizes, cpu and interpret; one kernel,
no fallback."""
import pytest
import torch
import torch.nn.functional as F

import fusionstitch

pytestmark = pytest.mark.usefixtures("strict_fresh")

NAN, INF = float("nan"), float("inf")
_G = torch.Generator().manual_seed(11)
X = torch.tensor([[-2.0, -0.0, 0.0, 1.5, NAN, INF, -INF, 3.0]]).repeat(3, 1) * \
    (torch.rand(3, 1, generator=_G) + 0.5)
Y = torch.tensor([[NAN, 1.0, -1.0, NAN, 2.0, 0.5, NAN, -4.0]]).repeat(3, 1)

CASES = {
    "leaky_relu": lambda x, y: F.leaky_relu(x * 2, 0.2) + 1,
    "elu": lambda x, y: F.elu(x, 0.7) * 2,
    "selu": lambda x, y: F.selu(x) * 2,
    "celu": lambda x, y: F.celu(x, 0.5) * 2,
    "fmax": lambda x, y: torch.fmax(x, y) + 1,
    "fmin": lambda x, y: torch.fmin(x, y) + 1,
    "fmax_int": lambda x, y: torch.fmax(x.nan_to_num().long(), y.nan_to_num().long()) + 1,
    "clamp_tensor": lambda x, y: torch.clamp(x, y - 1, y + 1) * 2,
    "clamp_min_tensor": lambda x, y: torch.clamp_min(x, y) * 2,
    "clamp_max_tensor": lambda x, y: torch.clamp_max(x, y) * 2,
    "flip": lambda x, y: torch.flip(x * 2, [0]) + y,
    "flip_two_dims_sum": lambda x, y: torch.flip(x * 2, [0, -1]).nan_to_num().sum(-1),
    "flip_transposed_softmax": lambda x, y: torch.flip(x.nan_to_num().t() * 2, [1]).softmax(-1),
}


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        torch.where(a.isnan(), 0, a), torch.where(b.isnan(), 0, b)) and torch.equal(
        a.isnan(), b.isnan())


@pytest.mark.parametrize("target", ["cpu", "interpret"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_like_eager(name, dynamic, target):
    if target == "interpret":
        pytest.importorskip("triton")
    fn = CASES[name]
    got = torch.compile(fn, backend=fusionstitch.backend(target=target), dynamic=dynamic)(X, Y)
    want = fn(X, Y)
    if name == "flip_transposed_softmax" or name.startswith("elu") or name in ("selu", "celu"):
        # exp / expm1 through libmvec (within 4 ulp, glibc's bound; vecmath.py) against
        # eager's Sleef (1 ulp), then a product or a softmax's sum and division: a few
        # more roundings, well within 32 ulp
        torch.testing.assert_close(got, want, equal_nan=True, rtol=4e-6, atol=0)
    else:
        assert _same(got, want), (got, want)
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0 and s["kernels_launched"] >= 1, s
