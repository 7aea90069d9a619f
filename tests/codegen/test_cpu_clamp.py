"""maximum/minimum against a constant bound (a clamp's) on the cpu target: one compare
and one select (`a < c ? c : a`), whose NaN `a` comes through by itself, instead of the
general NaN-propagating `fs::maximum` (4-6 mask compares a vector). Same values as
eager's, NaN, infinities and signed zeros included; a NaN bound keeps the general form."""
import math
import shutil

import pytest
import torch

from fusionstitch.targets.cpp import printer as cpu
from fusionstitch.codegen.kernel import Constant, Op
from test_cpu import compile_one, elementwise_kernel, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

X = torch.tensor([-2.0, -0.5, -0.0, 0.0, 0.25, 0.5, 3.0, math.inf, -math.inf, math.nan,
                  1e-40, -1e38] * 5)


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.5), (0.0, math.inf), (-math.inf, 0.0), (-0.0, 0.0)])
def test_clamp_by_constants_matches_eager(lo, hi):
    kb, k = elementwise_kernel("clampk", [X], [
        ("f32", [Constant("lo", lo, "f32"), Op("m", "maximum", ("a0", "lo"), "f32"),
                 Constant("hi", hi, "f32"), Op("y0", "minimum", ("m", "hi"), "f32")])])
    src = cpu.cpp_source(k)
    assert "fs::maximum" not in src and "fs::minimum" not in src
    (got,) = launch(compile_one(k), kb, [X], [torch.empty_like(X)])
    want = torch.minimum(torch.maximum(X, torch.tensor(lo)), torch.tensor(hi))
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


def test_a_nan_or_variable_bound_keeps_the_general_form():
    b = torch.tensor([0.0, math.nan, 1.0] * 20)
    a = torch.linspace(-2, 2, 60)
    kb, k = elementwise_kernel("maxk", [a, b], [
        ("f32", [Constant("n", math.nan, "f32"), Op("y0", "maximum", ("a0", "n"), "f32")]),
        ("f32", [Op("y1", "minimum", ("a0", "a1"), "f32")])])
    src = cpu.cpp_source(k)
    assert src.count("fs::maximum") == 2 and src.count("fs::minimum") == 2  # (two versions)
    n_out, v_out = launch(compile_one(k), kb, [a, b], [torch.empty(60), torch.empty(60)])
    assert n_out.isnan().all()
    torch.testing.assert_close(v_out, torch.minimum(a, b), equal_nan=True, rtol=0, atol=0)
