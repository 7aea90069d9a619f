"""The Triton printer keeps the sign of zero and the digits of tiny values where torch
does (targets/triton/printer.py): found by the interpret fuzz (seed 343434), where
`copysign(v, -where(c, x, 0.0))` took the wrong sign.

- `neg` of a float prints as a product by -1: Triton's unary minus is `0 - x`, which
  gives +0.0 for +0.0 (IEEE negation gives -0.0). The cuda target prints the same.
- the interpret target's own formulas for expm1, tanh and round (the interpreter has no
  libdevice): -0.0 gives -0.0, a tiny x gives x, round(-0.3) is -0.0, and expm1 near 0
  keeps its digits (Kahan's (u - 1) x / log u: e^x - 1 alone was 56940 ulp off at 1e-5).
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
