"""x unravelled twice in one component (a view after a transposition: attention heads
merged back) is read over one finer unravelling (targets/cpp/refine.py): the rows run
along the contiguous dim without a division per element, and the values are eager's."""
import itertools
import math

import pytest
import torch

import fusionstitch
from fusionstitch.codegen import expr as E
from fusionstitch.codegen.lower import lower_group
from fusionstitch.fusion.plan import KERNEL
from fusionstitch.targets.cpp import printer as cpu
from fusionstitch.targets.cpp.refine import flatten, refine_digits, refine_plan


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()


def sources(fn, *args):
    with torch.no_grad():
        rep = fusionstitch.explain(fn, *args, target="cpu")
    return [cpu.cpp_source(lower_group(g.plan.graph, grp.nodes, "k"))
            for g in rep.graphs for grp in g.plan.groups if grp.kind == KERNEL]


def heads_merged(x):
    b, h, s, d = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(b * s, h * d) * 2


def heads_merged_3d(x):
    b, h, s, d = x.shape
    return torch.tanh(x.transpose(1, 2).reshape(b, s, h * d))


@pytest.mark.parametrize("fn", [heads_merged, heads_merged_3d])
def test_merged_heads_run_in_rows_of_the_head_dim(fn):
    x = torch.randn(2, 4, 24, 32)
    srcs = sources(fn, x)
    dense = [s[s.index("// dense"):].split("} else {")[0] for s in srcs if "// dense" in s]
    assert any("xinner = 32 > 0" in d for d in dense), dense
    for d in dense:
        inner = d[d.index("for (int64_t xi = "):]
        assert "xi /" not in inner and "xi %" not in inner, inner
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    # exact, or tanh within libmvec's 4 ulp (targets/cpp/vecmath.py) plus torch's own
    # (Sleef's u10: 1 ulp) of the true value
    tol = {"rtol": 0, "atol": 0} if fn is heads_merged else {"rtol": 5 * 2.0 ** -23,
                                                             "atol": 2.0 ** -126}
    with torch.no_grad():
        torch.testing.assert_close(c(x), fn(x), **tol)
        # other strides at run time: the general version
        y = torch.randn(2, 24, 4, 32).transpose(1, 2)
        torch.testing.assert_close(c(y), fn(y), **tol)


def _value(e, x, consts):
    def sym(s):
        return consts[s.name]
    env = E.rewrite(e, lambda t: E.Const(x) if t == E.Var("x") else None)
    return E.evaluate(_expand(env), sym)


def _expand(e):
    return E.rewrite(e, lambda t: _expand(t.expand()) if isinstance(t, E.Digit) else None)


def test_refined_digits_are_the_same_values_everywhere():
    """Every digit of every unravelling, flattened and refined, equals the original at
    every x (sizes with syms of constant value, nested digits, sums of refined digits)."""
    consts = {"a": 6, "b": 4, "c": 2, "d": 12}
    A, B, C, D = (E.Sym(n, v) for n, v in consts.items())
    x = E.Var("x")
    outer = E.Digit(x, (D, D), 0)       # [12, 12] as one family, [6, 2] inside each
    inner = E.Digit(x, (D, D), 1)
    exprs = [E.add(E.mul(E.Digit(outer, (A, C), 0), E.Const(100)), E.Digit(outer, (A, C), 1),
                   E.mul(E.Digit(inner, (C, A), 0), E.Const(7)), E.Digit(inner, (C, A), 1)),
             E.add(E.mul(E.Digit(x, (D, B, E.Const(3)), 1), E.Const(5)),
                   E.Digit(x, (D, B, E.Const(3)), 2), E.Digit(x, (D, D), 0))]
    plan = refine_plan(exprs, consts)
    assert plan and plan[(D, D)][0] == tuple(E.Const(v) for v in (6, 2, 2, 2, 3))
    for e in exprs:
        r = refine_digits(e, plan)
        for v in range(144):
            assert _value(r, v, consts) == _value(e, v, consts), (e, v)
    assert flatten(exprs[0], {}) == exprs[0]            # sizes not static: left alone


@pytest.mark.parametrize("sizes", [((6, 4), (4, 6)), ((12,), (3, 4)), ((4, 6), (4, 5))])
def test_no_plan_without_a_common_refinement(sizes):
    """Cut points that do not nest (6 against 4), one unravelling only, unequal totals."""
    x = E.Var("x")
    exprs = [E.Digit(x, tuple(E.Const(v) for v in s), 0) for s in sizes if len(s) > 1]
    assert refine_plan(exprs, {}) == {}


def test_refinement_cuts_cover_every_family():
    for s1, s2 in itertools.product([(8, 64), (512,)], [(64, 8), (2, 256)]):
        if len(s1) == 1:
            continue
        x = E.Var("x")
        exprs = [E.Digit(x, tuple(map(E.Const, s1)), 0), E.Digit(x, tuple(map(E.Const, s2)), 0)]
        plan = refine_plan(exprs, {})
        refined = [c.value for c in next(iter(v for k, v in plan.items() if k))[0]]
        assert math.prod(refined) == 512
