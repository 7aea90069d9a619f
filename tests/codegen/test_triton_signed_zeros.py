"""The Triton printer keeps the sign of zero and the digits of tiny values where torch
does, and divides floats with floor as torch does (targets/triton/printer.py): found by
the interpret fuzz (seed 343434), where `copysign(v, -where(c, x, 0.0))` took the wrong
sign, and by a scan of special values (1.0 // 0.1 was 10).

- `neg` of a float prints as a product by -1: Triton's unary minus is `0 - x`, which
  gives +0.0 for +0.0 (IEEE negation gives -0.0). The cuda target prints the same.
- the interpret target's own formulas for expm1, tanh and round (the interpreter has no
  libdevice): -0.0 gives -0.0, a tiny x gives x, round(-0.3) is -0.0, and expm1 near 0
  keeps its digits (Kahan's (u - 1) x / log u: e^x - 1 alone was 56940 ulp off at 1e-5).
- float floor division from the remainder (c10's div_floor_floating), on both targets.
"""
import pytest
import torch

import fusionstitch

pytestmark = pytest.mark.usefixtures("strict_fresh")

SPECIAL = torch.tensor([-0.0, 0.0, -1e-30, 1e-30, -1e-6, 1e-6, -0.3, 0.3, -0.5, 0.5, -2.5, 2.5,
                        -7.0, 7.0])
CASES = {
    "neg": lambda x: -(x * 1.0),
    "neg_of_where": lambda x: -torch.where(x > 0, x, 0.0),
    "reciprocal_of_neg": lambda x: 1.0 / -torch.where(x > 0, x, 0.0),
    "expm1": lambda x: torch.expm1(x * 1.0),
    "tanh": lambda x: torch.tanh(x * 1.0),
    "round": lambda x: torch.round(x * 1.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_signs_and_tiny_values_on_interpret(name):
    pytest.importorskip("triton")
    fn = CASES[name]
    got = torch.compile(fn, backend=fusionstitch.backend(target="interpret"))(SPECIAL)
    want = fn(SPECIAL)
    assert torch.equal(torch.signbit(got), torch.signbit(want)), (got, want)
    if name in ("expm1", "tanh"):
        # the interpreter's exp and log are numpy's: the formulas stay within a few ulp
        torch.testing.assert_close(got, want, rtol=16 * torch.finfo(torch.float32).eps, atol=0)
    else:
        assert torch.equal(got, want), (got, want)
    assert fusionstitch.stats()["fallbacks"] == 0


@pytest.mark.parametrize("name", ["expm1", "tanh"])
def test_small_arguments_keep_their_digits(name):
    """Over a grid of small and moderate arguments of both signs: within 16 ulp of
    torch's (it was 56940 ulp for expm1 at 1.4e-5)."""
    pytest.importorskip("triton")
    x = torch.cat([torch.logspace(-12, 0.5, 400), -torch.logspace(-12, 0.5, 400)])
    fn = CASES[name]
    got = torch.compile(fn, backend=fusionstitch.backend(target="interpret"))(x)
    ref = fn(x.double())
    ulp = torch.finfo(torch.float32).eps * ref.abs()
    assert ((got.double() - ref).abs() <= 16 * ulp).all()


def test_float_floor_division_as_torch():
    """floor_divide of floats through the remainder (c10's div_floor_floating), as the cpu
    target does: floor(1.0 / 0.1) is 10, torch's 1.0 // 0.1 is 9; -2 // inf is -1, not
    -0.0. The interpret target's f32 fmod is exact for these (in f64, then corrected)."""
    pytest.importorskip("triton")
    a = torch.tensor([1.0, -1.0, 7.0, 0.3, -2.0, 2.0, 5.0, -0.0, 1.0, 0.0, 2.5, -7.5, 1e6, 3.0])
    b = torch.tensor([0.1, 0.1, 0.7, 0.1, float("inf"), -float("inf"), -0.0, 3.0, -0.1, -2.0,
                      0.5, 2.5, 0.3, 0.0])
    for fn in (torch.floor_divide, torch.fmod, torch.remainder):
        torch._dynamo.reset()
        f = lambda a, b, fn=fn: fn(a * 1.0, b * 1.0)
        got = torch.compile(f, backend=fusionstitch.backend(target="interpret"))(a, b)
        want = f(a, b)
        assert torch.equal(got.isnan(), want.isnan()), (fn, got, want)
        ok = ~want.isnan()
        assert torch.equal(got[ok], want[ok]) and \
            torch.equal(torch.signbit(got[ok]), torch.signbit(want[ok])), (fn, got, want)


def test_the_cuda_source_compiles_for_sm90():
    """(no GPU here: Triton compiles the cuda kernel to a cubin) the negation, the floor
    division through libdevice's fmod."""
    pytest.importorskip("triton")
    from fusionstitch.fusion import make_plan
    from fusionstitch.fusion.lowered import lower_plan
    from tests.codegen._sm90 import compile_sm90

    def fn(x, y):
        return torch.floor_divide(-x * 1.0, y + 1.0) + torch.tanh(x)
    rep = fusionstitch.explain(fn, torch.rand(64), torch.rand(64), strategy="none")
    compiled = 0
    for g in [g.plan.graph for g in rep.graphs if g.plan is not None]:
        for k in lower_plan(make_plan(g, "stitch", "cuda"), "cuda").kernels.values():
            src, out = compile_sm90(k)
            assert "cubin" in out.asm and "libdevice.fmod" in src and "* -1.0" in src
            compiled += 1
    assert compiled == 1
