"""The C++ target's reductions: hand-built kernels compiled with g++ against torch (row,
column and two-level orders, blocked sums, NaN and integer reductions)."""
import shutil

import pytest
import torch

from fusionstitch.targets.cpp import printer as cpu
from fusionstitch.codegen import expr as E
from fusionstitch.codegen.kernel import Index, Load, Op, Reduce, Store

from tests.codegen._cpu_kernels import (  # noqa: F401 (_cache: autouse fixture)
    X, R, _cache, KB, reduce, compile_one, launch, row_kernel)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# ---------------------------------------------------------------------------
# reductions


def test_row_mean_strided():
    a = torch.randn(7, 40)[:, 3:36]                    # rows 33 long, stride 40
    kb, k = row_kernel(a, "sum", mean=True)
    run = compile_one(k)
    out = launch(run, kb, [a], [torch.empty(7)])[0]
    torch.testing.assert_close(out, a.mean(-1), rtol=1e-5, atol=1e-6)
    big = torch.randn(300, 1000)                       # parallel and vectorised
    out = launch(run, kb, [big], [torch.empty(300)], [300, 1000, 1000, 1])[0]
    torch.testing.assert_close(out, big.mean(-1), rtol=1e-5, atol=1e-6)


def test_softmax_two_loops_then_store():
    def build(a):
        kb = KB()
        m, n = kb.sym("m", a.shape[0]), kb.sym("n", a.shape[1])
        ina, (s0, s1) = kb.input(a)
        out = kb.output(tuple(a.shape), "f32")
        idx = X * s0 + R * s1
        k = kb.kernel("softmax", reduce(m, n, [
            [Load("v0", ina, idx, None, "f32"), Reduce("mx", "max", "v0", "f32")],
            [Load("v1", ina, idx, None, "f32"), Op("d1", "sub", ("v1", "mx"), "f32"),
             Op("e1", "exp", ("d1",), "f32"), Reduce("sm", "sum", "e1", "f32")],
            [Load("v2", ina, idx, None, "f32"), Op("d2", "sub", ("v2", "mx"), "f32"),
             Op("e2", "exp", ("d2",), "f32"), Op("y", "truediv", ("e2", "sm"), "f32"),
             Store(out, X * n + R, "y", None)]]))
        return kb, k

    a = torch.randn(64, 300) * 5
    a[3, :] = float("-inf")
    a[3, 7] = 2.0
    kb, k = build(a)
    src = cpu.cpp_source(k)
    # the sum runs in float blocks added up in double (cpu_reduce.SUM_BLOCK)
    assert "#pragma omp simd reduction(+:sm_part)" in src and "sm_acc += sm_part;" in src
    # exp(a - max) is kept in a row buffer by the sum's loop and read back by the last
    assert "rb0[r] = e1;" in src and "const float e2 = rb0[r];" in src
    run = compile_one(k)
    out = launch(run, kb, [a], [torch.empty(64, 300)])[0]
    torch.testing.assert_close(out, a.softmax(-1), rtol=1e-5, atol=1e-7)
    t = torch.randn(300, 64).t()                       # the strided (generic) path
    out = launch(run, kb, [t], [torch.empty(64, 300)], [64, 300, 1, 64])[0]
    torch.testing.assert_close(out, t.softmax(-1), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("n", [5, 256, 257, 100_003])
def test_float_sums_in_blocks_stay_accurate(n):
    """Row sums of n positive floats (blocks of SUM_BLOCK in float, then double): as
    close to the exact sum as torch's own, for short rows, a block edge and long rows."""
    from fusionstitch.targets.cpp.reduce import SUM_BLOCK
    assert SUM_BLOCK == 256
    a = torch.rand(3, n, generator=torch.Generator().manual_seed(n)) + 0.5
    kb = KB()
    m, r = kb.sym("m", a.shape[0]), kb.sym("n", a.shape[1])
    ina, (s0, s1) = kb.input(a)
    out = kb.output((a.shape[0],), "f32")
    k = kb.kernel("rowsum", reduce(m, r, [[Load("v", ina, X * s0 + R * s1, None, "f32"),
                                          Reduce("t", "sum", "v", "f32")]],
                                   [Store(out, X, "t", None)]))
    got = launch(compile_one(k), kb, [a], [torch.empty(a.shape[0])])[0]
    exact = a.double().sum(1)
    err = ((got.double() - exact).abs() / exact).max().item()
    assert err <= max(4 * ((a.sum(1).double() - exact).abs() / exact).max().item(), 2e-7)


def test_reduce_over_two_dims_dense_and_strided():
    """sum over dims 1 and 2 of a 3-d tensor: r unravels over (B, C)."""
    a = torch.randn(4, 6, 7)
    kb = KB()
    da, db, dc = (kb.sym(f"d{i}", v) for i, v in enumerate(a.shape))
    ina, (s0, s1, s2) = kb.input(a)
    out = kb.output((4,), "f32")
    rdig = E.unravel(R, (db, dc))
    k = kb.kernel("sum12", reduce(da, db * dc, [[
        Load("v", ina, E.add(X * s0, rdig[0] * s1, rdig[1] * s2), None, "f32"),
        Reduce("s", "sum", "v", "f32")]], [Store(out, X, "s", None)]))
    src = cpu.cpp_source(k)
    # the dense version: the row's base offset computed once per x, then + r
    assert "const int64_t xoff = x * in0_stride0;" in src and "in0[xoff + r]" in src
    run = compile_one(k)
    for t in (a, torch.randn(7, 6, 4).permute(2, 1, 0), torch.randn(4, 6, 14)[:, :, ::2]):
        got = launch(run, kb, [t], [torch.empty(4)], [*t.shape, *t.stride()])[0]
        torch.testing.assert_close(got, t.sum((1, 2)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("w", [20, 1000, 17])
def test_batch_norm_like_reduction_splits_r_in_rows(w):
    """mean over N, H, W of (N, C, H, W): r = (n, h, w) runs as rows with no division in
    the inner loop: rows of H * W, one contiguous stretch, in the dense version (H and W
    merged, cpu_index.specialize), rows of W in the general one; the last row of r may be
    partial (rnumel not a multiple of the row)."""
    a = torch.randn(3, 5, 4, w)
    kb = KB()
    dn, dc, dh, dw = (kb.sym(f"d{i}", v) for i, v in enumerate(a.shape))
    rn = kb.sym("rn", 3 * 4 * w)
    ina, (s0, s1, s2, s3) = kb.input(a)
    out = kb.output((5,), "f32")
    rdig = E.unravel(R, (dn, dh, dw))
    k = kb.kernel("bnmean", reduce(dc, rn, [[
        Load("v", ina, E.add(rdig[0] * s0, X * s1, rdig[1] * s2, rdig[2] * s3), None, "f32"),
        Reduce("s", "sum", "v", "f32")]], [Store(out, X, "s", None)]))
    src = cpu.cpp_source(k)
    assert "const int64_t r = ro * rinner + ri;" in src
    dense, general = src.split("} else {", 1)
    assert "rinner = d2 * d3 > 0" in dense and "(ro * in0_stride0) + ri]" in dense
    assert "in0_stride2 == d3" in dense                     # checked at launch
    assert "rinner = d3 > 0" in general
    run = compile_one(k)
    for t in (a, a.transpose(2, 3).contiguous().transpose(2, 3)):
        got = launch(run, kb, [t], [torch.empty(5)], [*t.shape, 3 * 4 * w, *t.stride()])[0]
        torch.testing.assert_close(got, t.sum((0, 2, 3)), rtol=1e-5, atol=1e-4)
    # a shorter r (rows of W, the last one partial) reads only its elements
    got = launch(run, kb, [a], [torch.empty(5)], [*a.shape, 3 * 4 * w - 3, *a.stride()])[0]
    want = a.permute(1, 0, 2, 3).reshape(5, -1)[:, :3 * 4 * w - 3].sum(1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


def test_column_reduction():
    a = torch.randn(50, 13)
    kb = KB()
    m, n = kb.sym("m", 50), kb.sym("n", 13)
    ina, (s0, s1) = kb.input(a)
    o_sum, o_max = kb.output((13,), "f32"), kb.output((13,), "f32")
    k = kb.kernel("colsum", reduce(n, m, [[
        Load("v", ina, R * s0 + X * s1, None, "f32"), Reduce("s", "sum", "v", "f32"),
        Reduce("mx", "max", "v", "f32")]], [Store(o_sum, X, "s", None),
                                            Store(o_max, X, "mx", None)]))
    run = compile_one(k)
    s, mx = launch(run, kb, [a], [torch.empty(13), torch.empty(13)])
    torch.testing.assert_close(s, a.sum(0), rtol=1e-5, atol=1e-5)
    assert torch.equal(mx, a.amax(0))


@pytest.mark.parametrize("cols", [13, 64, 200])
def test_column_order_two_levels(cols):
    """Centred column sums of squares (a layer-norm weight gradient's shape): the dense
    version runs blocks of columns with r outside; the second loop reads the first one's
    results per column; NaN in one column stays in that column; the strided version
    (a transposed input) gives the same."""
    a = torch.randn(300, cols)
    a[7, 3] = float("nan")
    kb = KB()
    m, n = kb.sym("m", 300), kb.sym("n", cols)
    ina, (s0, s1) = kb.input(a)
    o_var, o_max = kb.output((cols,), "f32"), kb.output((cols,), "f32")
    k = kb.kernel("colvar", reduce(n, m, [
        [Load("v", ina, R * s0 + X * s1, None, "f32"), Reduce("s", "sum", "v", "f32"),
         Reduce("mx", "max", "v", "f32")],
        [Load("w", ina, R * s0 + X * s1, None, "f32"), Index("cnt", m),
         Op("cf", "cast", ("cnt",), "f32"), Op("mean", "truediv", ("s", "cf"), "f32"),
         Op("d", "sub", ("w", "mean"), "f32"), Op("q", "mul", ("d", "d"), "f32"),
         Reduce("ss", "sum", "q", "f32")]],
        [Store(o_var, X, "ss", None), Store(o_max, X, "mx", None)]))
    src = cpu.cpp_source(k)
    assert "// columns: blocks of 64 x" in src
    run = compile_one(k)
    want_var = ((a - a.mean(0)) ** 2).sum(0)
    for t in (a, a.t().contiguous().t()):
        var, mx = launch(run, kb, [t], [torch.empty(cols), torch.empty(cols)],
                         [300, cols, *t.stride()])
        torch.testing.assert_close(var, want_var, rtol=1e-4, atol=1e-3, equal_nan=True)
        torch.testing.assert_close(mx, a.amax(0), equal_nan=True)
        assert mx[3].isnan() and not mx[4].isnan()


def _centred_rows(name: str, rows: int, cols: int, with_min: bool = False):
    """A kernel over rows (lowered for [rows, cols]) of three loops: the row's sum and
    NaN-propagating max (and min), then the centred sum of squares (reading the first
    loop's sum), then each element minus the max. Outputs: y [rows, cols], ss, mx (and
    mn) [rows]."""
    kb = KB()
    m, n = kb.sym("m", rows), kb.sym("n", cols)
    ina, (s0, s1) = kb.input(torch.randn(rows, cols))
    o_y, o_ss, o_mx = kb.output((rows, cols), "f32"), kb.output((rows,), "f32"), \
        kb.output((rows,), "f32")
    first = [Load("v", ina, X * s0 + R * s1, None, "f32"), Reduce("s", "sum", "v", "f32"),
             Reduce("mx", "max", "v", "f32")]
    epilogue = [Store(o_ss, X, "ss", None), Store(o_mx, X, "mx", None)]
    if with_min:
        first.append(Reduce("mn", "min", "v", "f32"))
        epilogue.append(Store(kb.output((rows,), "f32"), X, "mn", None))
    k = kb.kernel(name, reduce(m, n, [
        first,
        [Load("w", ina, X * s0 + R * s1, None, "f32"), Index("cnt", n),
         Op("cf", "cast", ("cnt",), "f32"), Op("mean", "truediv", ("s", "cf"), "f32"),
         Op("d", "sub", ("w", "mean"), "f32"), Op("q", "mul", ("d", "d"), "f32"),
         Reduce("ss", "sum", "q", "f32")],
        [Load("u", ina, X * s0 + R * s1, None, "f32"), Op("y", "sub", ("u", "mx"), "f32"),
         Store(o_y, X * n + R, "y", None)]],
        epilogue))
    return kb, k


@pytest.mark.parametrize("rows,cols", [(37, 12), (40, 16), (5, 7), (3, 40), (16, 12),
                                       (0, 12)])
def test_short_rows_version_and_the_general_one(rows, cols):
    """A kernel lowered for contiguous rows of 12 (TINY_R < 12 <= SHORT_ROW): its
    `rnumel == 12` version runs blocks of rows with SIMD along r; launched with other
    lengths it takes the general version, with other strides the strided one. Sum, NaN-
    propagating max, a centred sum of squares (the second loop reads the first's
    results), a per-element store (the third); a NaN in one row stays in that row."""
    kb, k = _centred_rows("shortrows", 37, 12)
    src = cpu.cpp_source(k)
    assert "if (rnumel == 12) {" in src and "SIMD along r" in src
    run = compile_one(k)
    a = torch.randn(rows, cols)
    if rows > 3:
        a[2, cols // 2] = float("nan")
    for t in (a, a.t().contiguous().t()):
        y, ss, mx = launch(run, kb, [t], [torch.empty(rows, cols), torch.empty(rows),
                                          torch.empty(rows)], [rows, cols, *t.stride()])
        want_mx = a.amax(1) if rows else torch.empty(0)
        torch.testing.assert_close(mx, want_mx, equal_nan=True)
        torch.testing.assert_close(ss, ((a - a.mean(1, keepdim=True)) ** 2).sum(1),
                                   rtol=1e-4, atol=1e-4, equal_nan=True)
        torch.testing.assert_close(y, a - want_mx[:, None], equal_nan=True)
        if rows > 3:
            assert mx[2].isnan() and not mx[3].isnan()


@pytest.mark.parametrize("nan_at", [None, 0, 7, 8, 15])
def test_rows_of_16_accumulate_in_lanes_summed_as_a_tree(nan_at):
    """Rows of 16 (a multiple of ROW_LANES) in the `rnumel == 16` version: each reduction
    accumulates in 16 lanes combined as a tree after the row, not GCC's `simd reduction`
    end (16 dependent scalar adds with AVX-512). Sums, NaN-propagating max and min
    (a NaN in any lane), a sum of squares read back by a later loop, -inf rows."""
    kb, k = _centred_rows("lanes16", 64, 16, with_min=True)
    src = cpu.cpp_source(k)
    assert "if (rnumel == 16) {" in src and "_lanes[rl + 8]" in src
    run = compile_one(k)
    a = torch.randn(64, 16) * 100
    a[5, :] = float("-inf")
    if nan_at is not None:
        a[9, nan_at] = float("nan")
    y, ss, mx, mn = launch(run, kb, [a], [torch.empty(64, 16), torch.empty(64),
                                          torch.empty(64), torch.empty(64)], [64, 16, 16, 1])
    torch.testing.assert_close(mx, a.amax(1), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(mn, a.amin(1), equal_nan=True, rtol=0, atol=0)
    ok = torch.ones(64, dtype=torch.bool)
    ok[5] = False   # (-inf - -inf: NaN either way)
    want_ss = ((a.double() - a.double().mean(1, keepdim=True)) ** 2).sum(1).float()
    torch.testing.assert_close(ss[ok], want_ss[ok], rtol=1e-5, atol=1e-3, equal_nan=True)
    torch.testing.assert_close(y, a - a.amax(1, keepdim=True), equal_nan=True)
    assert mx[9].isnan() == (nan_at is not None) and not mx[10].isnan()


def test_one_row_reduction_runs_the_loops_over_r_in_parallel():
    """sum and max of everything, then each element minus the mean (xnumel == 1)."""
    a = torch.randn(100_000)
    kb = KB()
    n = kb.sym("n", a.numel())
    ina, (s0,) = kb.input(a)
    o_c, o_mx = kb.output((a.numel(),), "f32"), kb.output((), "f32")
    k = kb.kernel("center", reduce(E.ONE, n, [
        [Load("v", ina, R * s0, None, "f32"), Reduce("s", "sum", "v", "f32"),
         Reduce("mx", "max", "v", "f32")],
        [Load("w", ina, R * s0, None, "f32"), Index("cnt", n),
         Op("cf", "cast", ("cnt",), "f32"), Op("mean", "truediv", ("s", "cf"), "f32"),
         Op("y", "sub", ("w", "mean"), "f32"), Store(o_c, R, "y", None)]],
        [Store(o_mx, E.ZERO, "mx", None)]))
    src = cpu.cpp_source(k)
    assert "#pragma omp parallel for simd reduction(+:s_acc)" in src
    run = compile_one(k)
    c, mx = launch(run, kb, [a], [torch.empty(a.numel()), torch.empty(())])
    torch.testing.assert_close(c, a - a.double().mean().float(), rtol=1e-5, atol=1e-5)
    assert torch.equal(mx, a.max())


def test_nan_propagation_max_min_and_int_reductions():
    a = torch.randn(6, 50)
    a[1, 10] = float("nan")
    a[2, 0] = float("nan")
    a[3, 49] = float("nan")
    a[4, :] = float("-inf")
    run_max = compile_one(row_kernel(a, "max")[1])
    kb, k = row_kernel(a, "min")
    run_min = compile_one(k)
    mx = launch(run_max, kb, [a], [torch.empty(6)])[0]
    mn = launch(run_min, kb, [a], [torch.empty(6)])[0]
    torch.testing.assert_close(mx, a.amax(1), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(mn, a.amin(1), equal_nan=True, rtol=0, atol=0)
    ints = torch.randint(-2**62, 2**62, (4, 33))
    for kind, want in (("sum", ints.sum(1)), ("max", ints.amax(1)), ("min", ints.amin(1)),
                       ("prod", ints.prod(1))):
        kb, k = row_kernel(ints, kind)
        got = launch(compile_one(k), kb, [ints], [torch.empty(4, dtype=torch.int64)])[0]
        assert torch.equal(got, want), kind                 # sums and products wrap


@pytest.mark.parametrize("cols,lanes", [(32, 16), (48, 16), (64, 16), (24, 8), (20, 0)])
def test_row_order_rows_of_known_length_accumulate_in_lanes(cols, lanes):
    """The row order's version for rows as long as expected (at most SMALL_R): a length
    that 16 (else 8) divides accumulates in that many lanes, combined as a tree after
    the row; another length keeps the `simd reduction` clause. NaN in several lane
    positions, -inf rows, exact max/min and integer results."""
    a = torch.randn(40, cols) * 10
    for row, col in ((1, 0), (2, lanes - 1 if lanes else 3), (3, cols - 1), (4, cols // 2)):
        a[row, col] = float("nan")
    a[6, :] = float("-inf")
    for kind, want in (("sum", a.sum(1)), ("max", a.amax(1)), ("min", a.amin(1))):
        kb, k = row_kernel(a, kind)
        src = cpu.cpp_source(k)
        assert f"if (rnumel == {cols}) {{" in src
        assert (f"_lanes[rl + {lanes // 2}]" in src) == bool(lanes), kind
        got = launch(compile_one(k), kb, [a], [torch.empty(40)])[0]
        if kind == "sum":
            # two orders of one float32 sum of n terms differ by at most 2 gamma_(n-1)
            # sum|a_i|, gamma_k = k u / (1 - k u) (Higham, Accuracy and Stability of
            # Numerical Algorithms, 4.2): the rows' lanes add in another order than eager's
            fin = want.isfinite()
            ku = (cols - 1) * 2.0 ** -24
            bound = 2 * ku / (1 - ku) * a.abs().sum(1)
            assert ((got - want).abs()[fin] <= bound[fin]).all(), (got, want)
            got, want = got[~fin], want[~fin]
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    ints = torch.randint(-2**62, 2**62, (40, cols))
    for kind, want in (("sum", ints.sum(1)), ("max", ints.amax(1)), ("prod", ints.prod(1))):
        kb, k = row_kernel(ints, kind)
        got = launch(compile_one(k), kb, [ints], [torch.empty(40, dtype=torch.int64)])[0]
        assert torch.equal(got, want), kind
