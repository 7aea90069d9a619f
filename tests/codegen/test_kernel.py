"""The kernel IR's analyses (codegen/kernel.py): which values of a loop over r vary with
r, and the arithmetic work the planner's recompute limit compares (fusion/profit.py)."""
import torch
import torch.nn.functional as F

import fusionstitch
from fusionstitch.codegen import expr as E
from fusionstitch.codegen.kernel import (Component, Constant, Kernel, Load, Loop, Op, Reduce,
                                         Store, arithmetic_work, varies_with_r)

X, R = E.Var("x"), E.Var("r")
N = E.Sym("n", 8)


def test_values_of_a_row_do_not_vary_with_r():
    body = (Load("a", "in0", X * N + R, None, "f32"),
            Load("p", "in0", X * N, "xmask", "f32"),      # the row's first element
            Op("m", "and", ("xmask", "rmask"), "b8"),
            Op("q", "mul", ("p", "mean"), "f32"),         # `mean`: an earlier loop's result
            Op("d", "sub", ("a", "q"), "f32"),
            Constant("z", 0.0, "f32"),
            Op("w", "where", ("m", "d", "z"), "f32"),
            Reduce("s", "sum", "w", "f32"))
    assert varies_with_r(body) == {"a", "m", "d", "w", "s", "rmask"}


def test_per_x_values_count_once_per_x():
    body = (Load("a", "in0", X * N + R, None, "f32"),
            Load("p", "in0", X * N, "xmask", "f32"),
            Op("e", "exp", ("p",), "f32"),
            Op("d", "sub", ("a", "e"), "f32"),
            Reduce("s", "sum", "d", "f32"))
    c = Component("reduce", E.Sym("m", 4), N, (Loop(body),),
                  (Store("out0", X, "s", "xmask"),))
    k = Kernel("k", (), (), (c,))
    assert arithmetic_work(k) == 4 * 8 * 1 + 4 * 1      # sub per (x, r), exp per x


def test_layer_norm_is_one_kernel_on_cpu():
    """Its mean, rstd and the variance's pivot are per-row values: fusing the
    normalisation into the statistics' kernel recomputes nothing per element."""
    x, w, b = torch.randn(64, 768), torch.randn(768), torch.randn(768)
    torch._dynamo.reset()
    with torch.no_grad():
        rep = fusionstitch.explain(lambda t: F.layer_norm(t, (768,), w, b), x, target="cpu")
    assert rep.num_kernels == 1
