"""opinfo_sweep.py: when a compiled result counts as right, and which samples a case runs."""
import math

import pytest
import torch

from opinfo_sweep import Result, compare, mismatch, pick_samples

F16 = torch.float16


def t(*values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def test_equal_and_within_tolerance_pass():
    assert mismatch(t(1.0, 2.0), t(1.0, 2.0), None, "x") is None
    assert mismatch(t(1.0, 2.0 + 1e-6), t(1.0, 2.0), None, "x") is None
    assert mismatch(t(1, 2, dtype=torch.int64), t(1, 2, dtype=torch.int64), None, "x") is None


def test_wrong_value_fails_even_with_a_reference():
    why = mismatch(t(1.0, 2.5), t(1.0, 2.0), t(1.0, 2.0, dtype=torch.float64), "x")
    assert why is not None and "0.5" in why
    assert mismatch(t(1, 3, dtype=torch.int64), t(1, 2, dtype=torch.int64), None, "x")
    assert "shape" not in mismatch(t(1.0), t(2.0), None, "x")
    assert "(2,)" in mismatch(t(1.0, 2.0), t(1.0), None, "x")
    assert "float16" in mismatch(t(1.0, dtype=F16), t(1.0), None, "x")


def test_nearer_to_float64_than_eager_passes():
    """Eager rounds after each op; rounding once lands elsewhere, nearer to float64."""
    ref = t(1.0 + 3 * 2**-11, dtype=torch.float64)
    eager = t(1.0 + 4 * 2**-10, dtype=F16)     # 5 ulps of fp16 off the reference
    ours = t(1.0 + 2**-10, dtype=F16)          # one ulp off it
    assert mismatch(ours, eager, ref, "x") is None
    far = t(1.0 + 80 * 2**-10, dtype=F16)      # 10x further than eager
    assert mismatch(far, eager, ref, "x") is not None


def test_nan_and_inf_positions_must_agree():
    assert mismatch(t(math.nan, 1.0), t(math.nan, 1.0), None, "x") is None
    assert mismatch(t(math.inf), t(math.inf), None, "x") is None
    assert mismatch(t(1.0), t(math.nan), t(math.nan, dtype=torch.float64), "x")
    assert mismatch(t(math.nan), t(1.0), t(1.0, dtype=torch.float64), "x")
    assert mismatch(t(-math.inf), t(math.inf), t(math.inf, dtype=torch.float64), "x")


def test_beyond_the_dtype_range_infinity_is_right():
    ref = t(1e6, -3.0, dtype=torch.float64)          # beyond fp16's 65504
    assert mismatch(t(math.inf, -3.0, dtype=F16), t(math.nan, -3.0, dtype=F16), ref, "x") is None
    # where eager overflowed, ours must be near float64 or overflowed too, never a finite
    # wrong number
    ref = t(7700.0, -3.0, dtype=torch.float64)
    eager = t(math.nan, -3.0, dtype=F16)
    assert mismatch(t(7696.0, -3.0, dtype=F16), eager, ref, "x") is None
    assert mismatch(t(math.inf, -3.0, dtype=F16), eager, ref, "x") is None
    assert mismatch(t(100.0, -3.0, dtype=F16), eager, ref, "x") is not None


def test_compare_walks_outputs_gradients_and_updated_inputs():
    ok = Result([t(1.0), 3], [t(2.0), None], [t(0.5)])
    assert compare(ok, ok, None) == []
    bad = Result([t(1.0), 4], [None, t(1.0)], [t(0.7)])
    problems = compare(bad, ok, None)
    assert len(problems) == 4
    assert any(p.startswith("inputs[0]") for p in problems)
    assert any("no gradient" in p for p in problems)
    # values unchecked (empty_like's): shapes and dtypes only
    assert compare(Result([t(9.0)], [], []), Result([t(1.0)], [], []), None, values=False) == []


def test_samples_are_deterministic_and_spread_over_dtypes():
    from torch.testing._internal.common_methods_invocations import op_db
    op = next(o for o in op_db if o.name == "add")
    a = pick_samples(op, "float32", "fwd", 1)
    b = pick_samples(op, "float32", "fwd", 1)
    assert [i for i, _ in a] == [0] and torch.equal(a[0][1].input, b[0][1].input)
    assert [i for i, _ in pick_samples(op, "float16", "grad", 2)] == [5, 6]
    every = pick_samples(op, "bfloat16", "fwd", None)
    assert [i for i, _ in every] == list(range(len(every))) and len(every) > 5


@pytest.mark.parametrize("value,ok", [("ci", 1), ("all", None), ("3", 3)])
def test_size_knob(monkeypatch, value, ok):
    from opinfo_sweep import samples_per_case
    monkeypatch.setenv("FUSIONSTITCH_OPINFO", value)
    assert samples_per_case() == ok
