"""ir/symbolic.py: sizes as expressions, decided comparisons and guards."""
import pickle

import pytest
import sympy

from fusionstitch.ir import symbolic as S
from fusionstitch.ir.graph import TensorType

s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)


def dim(hint, expr):
    return S.make(hint, expr)


def test_arithmetic_keeps_expressions():
    a, b = dim(8, s0), dim(3, s1)
    n = a * b * 64
    assert S.is_symbolic(n) and n == 8 * 3 * 64 and n.expr == 64 * s0 * s1
    assert (a + 1).expr == s0 + 1 and (2 - a).expr == 2 - s0 and (-a).expr == -s0
    assert (a // 2).expr != s0 and S.hint(a // 2) == 4 and S.hint(a % 3) == 2
    assert sum([a, b]).expr == s0 + s1          # sum() starts from a plain 0
    assert TensorType((a, 64), "f32").numel.expr == 64 * s0
    assert S.make(5, sympy.Integer(5)) == 5 and not S.is_symbolic(S.make(5, sympy.Integer(5)))


def test_comparisons_decided_for_every_size_record_nothing():
    a, b = dim(8, s0), dim(3, s1)
    with S.recording() as g:
        assert a > 0 and a >= 2 and a != 1 and a != 0 and bool(a)
        assert a * b > b and a * b != b             # s1 * (s0 - 1) > 0
        assert a * 64 == 64 * a
        assert not (a < 2)
    assert not g


def test_undecided_comparisons_record_the_hints_answer():
    a, b = dim(8, s0), dim(3, s1)
    with S.recording() as g:
        assert a * 64 <= 1024
        assert a != b                               # equal only by coincidence at others
        assert not (a == 16)                        # a Dim against a plain size
    assert g == {sympy.Le(64 * s0, 1024), sympy.Ne(s0, s1), sympy.Ne(s0, 16)}


def test_conversions_specialise_and_suspended_records_nothing():
    a = dim(8, s0)
    with S.recording() as g:
        assert int(a) == 8 and type(int(a)) is int
        with S.suspended():
            assert a <= 4096 and float(a) == 8.0
    assert g == {sympy.Eq(s0, 8)}
    # outside any recorder the hint's answer is all there is
    assert a <= 4096


def test_nested_recorders_both_see_guards():
    a = dim(8, s0)
    with S.recording() as outer:
        with S.recording() as inner:
            assert a < 100
    assert inner == outer == {sympy.Lt(s0, 100)}


def test_float_of_sizes_specialises_when_used_as_a_number():
    from torch.utils._sympy.functions import IntTrueDiv
    f = S.FloatDim(4.0, IntTrueDiv(s0, 2), {s0: 8})
    with S.recording() as g:
        assert f * 2 == 8.0
    assert g == {sympy.Eq(IntTrueDiv(s0, 2), sympy.Float(4.0))}
    assert str(f) == "IntTrueDiv(s0, 2)" and S.has_symbols((1, [f]))


def test_compile_values_evaluates_sizes_and_guards():
    fn = S.compile_values([s0, s1], [64 * s0 * s1, sympy.Le(s0, 4), (s0 * s1) // 3])
    assert fn(2, 5) == (640, True, 3)
    assert fn(7, 1) == (448, False, 2)


def test_dims_pickle_and_print():
    a = dim(8, s0 * 2)
    assert str(a) == "2*s0" and f"{a}" == "2*s0" and f"{a:d}" == "8"
    b = pickle.loads(pickle.dumps(a))
    assert S.is_symbolic(b) and b.expr == a.expr and S.hint(b) == 8


@pytest.mark.parametrize("expr,lo,hi", [(s0, 2, float("inf")), (s0 - 1, 1, float("inf")),
                                        (3 - s0, float("-inf"), 1), (s0 * s1, 4, float("inf"))])
def test_bounds(expr, lo, hi):
    assert S.bounds(expr) == (lo, hi)
