"""Merged digits on the cpu target (targets/cpp/index.merge_plan, merge_digits): adjacent
dims of an unravelled x that every index of a component reads as one (row-major in each,
or absent in each) become one dim, so a flat loop runs rows of their product. IR text in,
C++ text out; the expressions' values; and the kernels against torch."""
import itertools
import os
import shutil
from unittest import mock

import pytest
import torch

import fusionstitch
from fusionstitch.codegen import expr as E
from fusionstitch.codegen.lower import lower_group
from fusionstitch.ir.graph import CONSTANT, PARAMETER
from fusionstitch.ir.text import parse
from fusionstitch.targets.cpp.index import merge_digits, merge_plan
from fusionstitch.targets.cpp.printer import cpp_source

X = E.Var("x")

# sigmoid(x * x[:, :1, :1]): the [64, 1, 1] operand reads neither dim 1 nor dim 2 and x
# reads both row-major: rows of 8 * 16
BCAST_COL = """
graph b(%x: f32[64,8,16]) {
  %s1: f32[64,1,16] = slice.Tensor(%x, 1, 0, 1)
  %s2: f32[64,1,1] = slice.Tensor(%s1, 2, 0, 1)
  %mul: f32[64,8,16] = mul.Tensor(%x, %s2)
  %sig: f32[64,8,16] = sigmoid.default(%mul)
  return (%sig)
}
"""

# the same with an [8, 1] operand that reads dim 1 alone: dims 1 and 2 stay apart
BCAST_ONE_OPERAND = """
graph b(%x: f32[64,8,16], %c: f32[64,1,1], %m: f32[8,1]) {
  %mul: f32[64,8,16] = mul.Tensor(%x, %c)
  %mul2: f32[64,8,16] = mul.Tensor(%mul, %m)
  %sig: f32[64,8,16] = sigmoid.default(%mul2)
  return (%sig)
}
"""

# the same with a transposed operand: it reads dims 1 and 2, not row-major
BCAST_TRANSPOSED = """
graph b(%x: f32[64,8,16], %c: f32[64,1,1], %t: f32[64,16,8]) {
  %p: f32[64,8,16] = permute.default(%t, [0, 2, 1])
  %mul: f32[64,8,16] = mul.Tensor(%x, %c)
  %add: f32[64,8,16] = add.Tensor(%mul, %p)
  %sig: f32[64,8,16] = sigmoid.default(%add)
  return (%sig)
}
"""


def dense(text: str) -> str:
    """The dense version of the (one) component of the kernel of `text`."""
    g = parse(text)
    ops = [n.name for n in g.nodes if n.op not in (PARAMETER, CONSTANT)]
    with mock.patch.dict(os.environ, {"FUSIONSTITCH_CPU_VECMATH": "0"}):
        src = cpp_source(lower_group(g, ops, "k"), "fs_k")
    return src[src.index("// dense"):].split("} else {")[0]


def test_dims_no_index_tells_apart_merge_into_rows_of_their_product():
    src = dense(BCAST_COL)
    assert "xinner = ks1 * ks2 > 0 ? ks1 * ks2 : 1;" in src, src
    # the broadcast operand's offset: once per row of 8 * 16, no division (its stride the
    # constant the dense version expects: index.fixed_strides)
    assert "const int64_t xoff = 128 * xo;" in src and "xo / " not in src, src
    assert "in0[x]" in src and "in0[xoff]" in src and "out0[x] = " in src, src


@pytest.mark.parametrize("text", [BCAST_ONE_OPERAND, BCAST_TRANSPOSED],
                         ids=["broadcast-in-one-operand", "transposed-operand"])
def test_dims_one_operand_tells_apart_stay_apart(text):
    src = dense(text)
    # rows of ks2 (in tiles where the transposed operand asks for them)
    assert ("xinner = ks2 > 0 ? ks2 : 1;" in src or "xinner = ks2;" in src) \
        and "ks1 * ks2" not in src, src
    assert "const int64_t xoff = xo / ks1;" in src, src


def _value(e: E.Expr, x: int) -> int:
    return eval(E.to_source(e), {}, {"x": x})


def test_merged_expressions_keep_their_values():
    a, b, c, d = (E.Const(n) for n in (3, 4, 5, 2))
    sizes = (a, b, c, d)
    dg = [E.Digit(X, sizes, k) for k in range(4)]
    exprs = [
        E.add(E.mul(dg[0], E.Const(7)), E.mul(dg[1], E.Const(10)), E.mul(dg[2], E.Const(2)),
              dg[3]),                                    # dims 1..3 row-major (times 1)
        E.mul(dg[0], E.Const(100)),                      # reads neither 1, 2 nor 3
        E.add(E.mul(dg[1], E.Const(30)), E.mul(dg[2], E.Const(6)), E.mul(dg[3], E.Const(3))),
    ]
    plan = merge_plan(exprs)
    assert plan == {(X, sizes): ((0, 0), (1, 3))}
    for e in exprs:
        m = merge_digits(e, plan)
        assert all(_value(m, v) == _value(e, v) for v in range(3 * 4 * 5 * 2)), (e, m)
    # one expression reading dims 2 and 3 in the other order, and one reading dim 1 by
    # a division: nothing merges
    odd = [E.add(dg[0], E.mul(dg[2], E.Const(1)), E.mul(dg[3], E.Const(5))),
           E.floordiv(dg[2], E.Const(2))]
    plan = merge_plan(exprs + odd)
    assert plan == {}, plan


def test_merge_digits_leaves_an_expression_the_plan_did_not_see_exact():
    sizes = (E.Const(3), E.Const(4), E.Const(5))
    dg = [E.Digit(X, sizes, k) for k in range(3)]
    plan = merge_plan([E.mul(dg[0], E.Const(9))])          # 1 and 2 absent: merged
    for e in (E.add(dg[1], E.mul(dg[2], E.Const(4))),       # not row-major: kept
              E.mod(dg[2], E.Const(3)), E.add(dg[0], dg[1]), E.mul(dg[1], dg[2])):
        m = merge_digits(e, plan)
        assert all(_value(m, v) == _value(e, v) for v in range(60)), (e, m)


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@needs_gxx
@pytest.mark.parametrize("shape", [(6, 8, 16), (3, 40, 130), (2, 3, 1), (5, 1, 7)])
def test_merged_and_unmerged_kernels_match_torch(shape):
    """The three graphs above and a broadcast alone, compiled, on contiguous inputs (the
    dense version: merged rows, some longer than a block of the parallel loop) and on
    strided ones (the general version), against eager."""
    torch._dynamo.reset()
    fns = {
        "col": lambda x, c, m, t: torch.sigmoid(x * x[:, :1, :1]),
        "one": lambda x, c, m, t: torch.sigmoid(x * c * m),
        "tr": lambda x, c, m, t: torch.sigmoid(x * c + t.permute(0, 2, 1)),
        # the output's dims 1 and 2 (row-major) merge with the operand's (absent) in the
        # general version too: the store's index is one merged digit times its stride
        "out": lambda x, c, m, t: torch.sigmoid(c * 3.0).expand(-1, b, k) * 1.5,
    }
    a, b, k = shape
    g = torch.Generator().manual_seed(a * 100 + b * 10 + k)

    def rand(*s):
        return torch.randn(*s, generator=g)
    layouts = [
        (rand(a, b, k), rand(a, 1, 1), rand(b, 1), rand(a, k, b)),
        (rand(k, b, a).permute(2, 1, 0), rand(a, 1, 2)[:, :, :1], rand(b, 3)[:, 1:2],
         rand(a, b, k).transpose(1, 2)),
        (rand(a, b, 2 * k)[:, :, ::2], rand(a, 1, 1), rand(b, 1), rand(a, k, 2 * b)[..., ::2]),
        # unit last strides, the others not row-major (a slice of wider rows): the dense
        # version assumes those constant too (index.fixed_strides), so the general one runs
        (rand(a, b, 2 * k)[:, :, :k], rand(a, 1, 3)[:, :, :1], rand(b, 2)[:, :1],
         rand(a, k, 2 * b)[..., :b]),
    ]
    for name, fn in fns.items():
        c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"), dynamic=False)
        for args in layouts:
            torch.testing.assert_close(c(*args), fn(*args), rtol=2e-6, atol=1e-7,
                                       msg=lambda m: f"{name} {shape}: {m}")


@needs_gxx
def test_merge_in_a_reduction_component_matches_torch():
    """Merged digits in reduce components too (x of a column reduction over dims 1 and 2
    read by a [1, 1, k] operand and row-major by the stream), on every loop order."""
    torch._dynamo.reset()

    def fn(x, w):
        y = torch.exp(-x * x) * w
        return (y - y.amax(0, keepdim=True)) * 2.0, y.sum((1, 2))
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"), dynamic=False)
    g = torch.Generator().manual_seed(1)
    eps = 2.0 ** -24
    for a, b, k in itertools.product((3, 70), (4, 9), (5, 16)):
        x, w = torch.randn(a, b, k, generator=g), torch.randn(k, generator=g)
        (d, s), (d64, s64) = c(x, w), fn(x.double(), w.double())
        # bounds against float64: exp within 4 ulp (libmvec, the preamble's exp_f32), a
        # rounding per op; a float sum of n terms within n ulps of their absolute sum
        y = (torch.exp(-x.double() ** 2) * w.double()).abs()
        assert ((d - d64).abs() <= 32 * eps * (y + y.amax(0, keepdim=True))).all()
        assert ((s - s64).abs() <= (b * k + 16) * eps * y.sum((1, 2))).all()


# batch norm + ReLU6 of an NHWC convolution's output, zero-padded for the next (mobilenet):
# the dense version reads the input's W and C as one digit (x % (33 * 48) at the expected
# strides), which rows over (N, 33, 33, 48) must read as a row offset plus xi
PADDED_NHWC = """
graph p(%c: f32[2,8,8,16], %w: f32[16,1,1]) {
  %nchw: f32[2,16,8,8] = permute.default(%c, [0, 3, 1, 2])
  %m: f32[2,16,8,8] = mul.Tensor(%nchw, %w)
  %r: f32[2,16,8,8] = hardtanh.default(%m, 0.0, 6.0)
  %pad: f32[2,16,9,9] = constant_pad_nd.default(%r, [0, 1, 0, 1], 0.0)
  %nhwc: f32[2,9,9,16] = permute.default(%pad, [0, 2, 3, 1])
  %out: f32[2,9,9,16] = clone.default(%nhwc)
  return (%out)
}
"""


def test_trailing_digits_merged_for_the_dense_strides_split_into_rows():
    from fusionstitch.targets.cpp.index import split_rows
    rows = (E.Const(2), E.Const(9), E.Const(9), E.Const(16))
    merged = (E.Const(2), E.Const(9), E.Const(9 * 16))
    split = [split_rows(E.Digit(X, merged, k), rows) for k in range(3)]
    assert all("x" not in E.free_vars(s) for s in split), split
    for x in range(2 * 9 * 9 * 16):
        xo, xi = divmod(x, 16)
        for k, s in enumerate(split):
            got = eval(E.to_source(s), {}, {"xo": xo, "xi": xi})
            assert got == _value(E.Digit(X, merged, k), x), (k, x)


def test_a_padded_nhwc_operand_reads_a_row_offset_not_a_division_per_element():
    src = dense(PADDED_NHWC)
    assert "in0[xoff + xi]" in src, src
    assert "x / " not in src and "x % " not in src, src


@needs_gxx
def test_a_padded_nhwc_kernel_matches_torch():
    torch._dynamo.reset()

    def fn(c, w):
        r = torch.nn.functional.hardtanh(c.permute(0, 3, 1, 2) * w, 0.0, 6.0)
        return torch.nn.functional.pad(r, [0, 1, 0, 1]).permute(0, 2, 3, 1).contiguous()
    g = torch.Generator().manual_seed(0)
    for shape in [(2, 8, 8, 16), (1, 5, 7, 3), (3, 4, 4, 40)]:
        c = torch.randn(*shape, generator=g) * 4
        w = torch.randn(shape[-1], 1, 1, generator=g)
        f = torch.compile(fn, backend=fusionstitch.backend(target="cpu"), dynamic=False)
        torch.testing.assert_close(f(c, w), fn(c, w), rtol=0, atol=0)
