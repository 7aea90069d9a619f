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


# The C library's functions (libmvec's vector variants where it has them: glibc documents
# them within 4 ulp; eager's are Sleef's, 1 ulp): a value within 5 ulp of eager's (8 allowed),
# eager's NaNs, infinities and signed zeros exactly
D = torch.tensor([-1.5, -1.0, -0.5, -1e-30, -0.0, 0.0, 1e-30, 0.5, 0.99, 1.0, 1.5, 3.0, 50.0,
                  95.0, NAN, INF, -INF])
LIBM = {
    "asin": lambda x, y: torch.asin(x), "acos": lambda x, y: torch.acos(x),
    "atan": lambda x, y: torch.atan(x), "sinh": lambda x, y: torch.sinh(x),
    "cosh": lambda x, y: torch.cosh(x), "asinh": lambda x, y: torch.asinh(x),
    "acosh": lambda x, y: torch.acosh(x), "atanh": lambda x, y: torch.atanh(x),
    "erfc": lambda x, y: torch.erfc(x), "log10": lambda x, y: torch.log10(x),
    "atan2": lambda x, y: torch.atan2(x, y), "hypot": lambda x, y: torch.hypot(x, y),
    "copysign": lambda x, y: torch.copysign(x, y),
    "chain": lambda x, y: torch.atan2(torch.sinh(x * 0.1), torch.hypot(y, x)) + torch.erfc(x),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(LIBM))
def test_library_functions_like_eager(name, dtype):
    fn = LIBM[name]
    x = D.to(dtype)[:, None].expand(17, 17).contiguous()
    y = D.to(dtype)[None, :].expand(17, 17).contiguous()
    got = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))(x, y)
    want = fn(x, y)
    assert torch.equal(got.isnan(), want.isnan()), name
    fin = want.isfinite()
    assert torch.equal(got[~fin & ~want.isnan()], want[~fin & ~want.isnan()]), name
    zero = want == 0
    assert torch.equal(got[zero].signbit(), want[zero].signbit()), name
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got[fin], want[fin], rtol=8 * eps, atol=0)
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0 and s["kernels_launched"] >= 1, s


def test_the_interpreter_leaves_them_to_torch_with_the_reason(caplog):
    pytest.importorskip("triton")
    import logging
    fn = lambda x: torch.asin(x * 0.5) + 1       # noqa: E731
    x = torch.rand(8)
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        got = torch.compile(fn, backend=fusionstitch.backend(target="interpret"))(x)
    torch.testing.assert_close(got, fn(x))
    assert fusionstitch.stats()["fallbacks"] >= 1
    assert any("no form for asin" in r.getMessage() for r in caplog.records)


def test_the_cuda_source_of_the_library_functions_compiles_for_sm90():
    """(no GPU here: Triton compiles the cuda kernel to a cubin; libdevice's functions)"""
    pytest.importorskip("triton")
    from fusionstitch.fusion import make_plan
    from fusionstitch.fusion.lowered import lower_plan
    from tests.codegen._sm90 import compile_sm90

    def fn(x, y):
        return (torch.asin(x * 0.5) + torch.acos(x * 0.5) + torch.atan(x) + torch.sinh(x)
                + torch.cosh(x) + torch.asinh(x) + torch.acosh(x.abs() + 1)
                + torch.atanh(x * 0.5) + torch.erfc(x) + torch.log10(x.abs() + 1)
                + torch.atan2(x, y) + torch.hypot(x, y) + torch.copysign(x, y))
    compiled = 0
    rep = fusionstitch.explain(fn, torch.rand(64), torch.rand(64), strategy="none")
    for g in [g.plan.graph for g in rep.graphs if g.plan is not None]:
        plan = make_plan(g, "stitch", "cuda")
        for k in lower_plan(plan, "cuda").kernels.values():
            src, out = compile_sm90(k)
            assert "cubin" in out.asm and "libdevice.asin" in src
            compiled += 1
    assert compiled == 1


def test_the_interpreters_missing_ops_are_the_gpu_forms_it_lacks():
    from fusionstitch.targets.triton import INTERPRET
    from fusionstitch.targets.triton.elementwise import MATH_GPU, MATH_INTERPRET
    assert INTERPRET.missing_ops == set(MATH_GPU) - set(MATH_INTERPRET)
