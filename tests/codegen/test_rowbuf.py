"""Row buffers (targets/cpp/rowbuf.py): which values a later loop over the row reads back."""
from fusionstitch.codegen import expr as E
from fusionstitch.codegen.kernel import Component, Constant, Load, Loop, Op, Reduce, Store
from fusionstitch.targets.cpp.rowbuf import plan_rows

X, R = E.Var("x"), E.Var("r")
IDX = X * E.Sym("n", 8) + R


def comp(*loops) -> Component:
    return Component("reduce", E.Sym("m", 4), E.Sym("n", 8),
                     tuple(Loop(tuple(b)) for b in loops), ())


def softmax_loops():
    return comp(
        [Load("v0", "in0", IDX, None, "f32"), Reduce("mx", "max", "v0", "f32")],
        [Load("v1", "in0", IDX, None, "f32"), Op("d1", "sub", ("v1", "mx"), "f32"),
         Op("e1", "exp", ("d1",), "f32"), Reduce("sm", "sum", "e1", "f32")],
        [Load("v2", "in0", IDX, None, "f32"), Op("d2", "sub", ("v2", "mx"), "f32"),
         Op("e2", "exp", ("d2",), "f32"), Op("y", "truediv", ("e2", "sm"), "f32"),
         Store("out0", IDX, "y", None)])


def test_softmax_keeps_exp_for_the_last_loop():
    plan = plan_rows(softmax_loops())
    assert plan.buffers == {"rb0": "f32"}
    assert plan.saves == {1: {"e1": "rb0"}}
    assert plan.reuses == {2: {"e2": "rb0"}}
    # the last loop no longer loads, subtracts or exponentiates
    assert plan.live[2] & {"v2", "d2", "e2", "y"} == {"e2", "y"}
    assert {"v1", "d1", "e1"} <= plan.live[1]


def test_cheap_values_are_recomputed():
    # x * 2 (one op on a load) costs less than a trip through the row buffer
    c = comp(
        [Load("a", "in0", IDX, None, "f32"), Constant("k", 2.0, "f32"),
         Op("b", "mul", ("a", "k"), "f32"), Reduce("s", "sum", "b", "f32")],
        [Load("a2", "in0", IDX, None, "f32"), Constant("k2", 2.0, "f32"),
         Op("b2", "mul", ("a2", "k2"), "f32"), Op("y", "sub", ("b2", "s"), "f32"),
         Store("out0", IDX, "y", None)])
    assert not plan_rows(c)


def test_different_inputs_or_constants_do_not_match():
    c = comp(
        [Load("a", "in0", IDX, None, "f32"), Op("e", "exp", ("a",), "f32"),
         Reduce("s", "sum", "e", "f32")],
        [Load("a2", "in1", IDX, None, "f32"), Op("e2", "exp", ("a2",), "f32"),
         Op("y", "sub", ("e2", "s"), "f32"), Store("out0", IDX, "y", None)])
    assert not plan_rows(c)


def test_gathered_loads_are_not_matched():
    # a load indexed by a value of its own loop: equal text, but each loop's own value
    c = comp(
        [Load("i", "idx", IDX, None, "i64"),
         Load("a", "in0", E.Value("i"), None, "f32"), Op("e", "exp", ("a",), "f32"),
         Reduce("s", "sum", "e", "f32")],
        [Load("i2", "idx", IDX, None, "i64"),
         Load("a2", "in0", E.Value("i2"), None, "f32"), Op("e2", "exp", ("a2",), "f32"),
         Op("y", "sub", ("e2", "s"), "f32"), Store("out0", IDX, "y", None)])
    assert not plan_rows(c)


def test_flat_and_single_loop_components_have_no_plan():
    assert not plan_rows(Component("flat", E.Sym("m", 4), E.ONE, (), ()))
    assert not plan_rows(comp([Load("v", "in0", IDX, None, "f32"),
                               Reduce("s", "sum", "v", "f32")]))


def test_work_that_does_not_vary_with_r_is_not_kept():
    # the variance's d = x - pivot (reductions._variance_passes): the pivot (the row's first
    # element, with its isinf check) is computed once per x, so d is one op on a load and
    # the second loop recomputes it instead of storing and reading a row buffer
    first = X * E.Sym("n", 8)
    c = comp(
        [Load("a", "in0", IDX, None, "f32"), Load("p", "in0", first, "xmask", "f32"),
         Op("inf", "isinf", ("p",), "b8"), Constant("z", 0.0, "f32"),
         Op("pv", "where", ("inf", "z", "p"), "f32"), Op("d", "sub", ("a", "pv"), "f32"),
         Reduce("s", "sum", "d", "f32")],
        [Load("a2", "in0", IDX, None, "f32"), Load("p2", "in0", first, "xmask", "f32"),
         Op("inf2", "isinf", ("p2",), "b8"), Constant("z2", 0.0, "f32"),
         Op("pv2", "where", ("inf2", "z2", "p2"), "f32"), Op("d2", "sub", ("a2", "pv2"), "f32"),
         Op("e2", "exp", ("d2",), "f32"), Reduce("t", "sum", "e2", "f32")])
    assert not plan_rows(c)
