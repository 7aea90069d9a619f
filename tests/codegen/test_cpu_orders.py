"""Which loop order and which dense indexing the cpu printer picks for real groups
(targets/cpp/reduce.column_major, index.specialize), and views kept out of kernels."""
import pytest
import torch

import fusionstitch
from fusionstitch.targets.cpp import printer as cpu
from fusionstitch.targets.cpp import columns as cpu_columns
from fusionstitch.targets.cpp import reduce as cpu_reduce
from fusionstitch.codegen.lower import lower_group
from fusionstitch.fusion.plan import FREE, KERNEL


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()


def kernel_sources(fn, *args):
    with torch.no_grad():
        rep = fusionstitch.explain(fn, *args, target="cpu")
    out = []
    for g in rep.graphs:
        for grp in g.plan.groups:
            if grp.kind == KERNEL:
                out.append(cpu.cpp_source(lower_group(g.plan.graph, grp.nodes, "k")))
    return rep, out


def test_channel_statistics_run_in_rows_not_columns():
    # per-channel sums of NCHW: x is the channel (stride H*W), r runs along W contiguously;
    # the per-channel weight is read once per x and must not make it look column-major
    w = torch.randn(16)

    def f(x):
        return (x * w.view(1, -1, 1, 1)).sum((0, 2, 3))
    _, (src,) = kernel_sources(f, torch.randn(4, 16, 8, 8))
    assert "columns:" not in src and "reduce" in src


def test_batch_norm_statistics_run_along_h_times_w():
    """var_mean over N, H, W of NCHW (batch norm's statistics, both loops): the dense
    version's inner loop runs over H * W contiguous elements, not rows of W with a
    division per row (8-12 ms against eager's 0.2 ms on [32, 64, 28, 28], one thread)."""
    import re
    x = torch.randn(4, 16, 6, 10)
    _, (src,) = kernel_sources(lambda t: torch.var_mean(t, (0, 2, 3), correction=0), x)
    dense = src[src.index("// dense"):].split("} else {")[0]
    assert len(re.findall(r"rinner = ks\d+ \* ks\d+ > 0", dense)) == 2, dense
    c = torch.compile(lambda t: torch.var_mean(t, (0, 2, 3), correction=0),
                      backend=fusionstitch.backend(target="cpu"))
    for t in (x, x.transpose(2, 3).contiguous().transpose(2, 3), x[:, :, :, ::2]):
        for got, want in zip(c(t), torch.var_mean(t, (0, 2, 3), correction=0)):
            torch.testing.assert_close(got, want)


def test_column_sums_with_per_row_vectors_run_in_columns():
    # a layer-norm weight gradient: sum over rows of g * (x - mean[row]) * rstd[row]
    def f(g, x, mean, rstd):
        return (g * (x - mean) * rstd).sum((0, 1))
    args = (torch.randn(4, 32, 64), torch.randn(4, 32, 64), torch.randn(4, 32, 1),
            torch.randn(4, 32, 1))
    _, srcs = kernel_sources(f, *args)
    assert any("columns:" in s for s in srcs)


def test_rows_of_an_unravelled_x_read_with_one_stride():
    # a [4, 32, 64] input read as 128 rows of 64: the dense version reads in0[64 * x + r]
    # (a static kernel's row stride a constant: GCC sees the access pattern)
    def f(x):
        return torch.softmax(x, -1)
    _, (src,) = kernel_sources(f, torch.randn(4, 32, 64))
    dense = src[src.index("// dense"):].split("} else {")[0]
    assert "= 64 * x;" in dense and "x / " not in dense and "in0_s1 == 64" in src



@pytest.mark.parametrize("shape, view", [
    ((16384, 4, 4), None), ((64, 32, 4), None),            # rows of 4 (columns order)
    ((4, 32, 64), None), ((8, 16, 16), None),              # rows order, lanes
    ((64, 32, 6), (..., slice(0, 4))),                     # rows padded to 6: stride 6
    ((4, 48, 64), (slice(None), slice(0, 32))),            # rows of another stride above
    ((32, 4, 16), "t"),                                    # x's digits swapped
])
def test_rows_at_a_constant_stride_and_at_others_give_eager_numbers(shape, view):
    """A static kernel's dense version reads its rows at the expected stride as a
    constant (`in0[4 * x + r]`); an input whose strides are others (a slice, a
    transposition) takes the strided version, with the same numbers."""
    def f(x):
        v, m = torch.var_mean(x, -1, keepdim=True, correction=0)
        return (x - m) * torch.rsqrt(v + 1e-5), torch.softmax(x * 2, -1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    if view == "t":
        x = x.transpose(0, 1)
    elif view is not None:
        x = x[view]
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=False)
    for got, want in zip(c(x), f(x)):
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)
    contiguous = x.contiguous()
    for got, want in zip(c(contiguous), f(contiguous)):
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)

def test_a_value_and_its_alias_are_stored_once():
    def f(x):
        y = torch.relu(x * 2)
        return y, y.view(-1)
    x = torch.randn(8, 16)
    rep, srcs = kernel_sources(f, x)
    (src,) = srcs
    assert src.count("out1[") == 0, "the view is taken after the kernel, not stored again"
    plan = rep.graphs[0].plan
    assert any(grp.kind == FREE and plan.graph[grp.nodes[0]].op == "view.default"
               for grp in plan.groups)
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"))
    a, b = c(x)
    torch.testing.assert_close(a, f(x)[0])
    assert b.data_ptr() == a.data_ptr(), "the view shares the stored output's memory"


def test_outputs_that_read_no_reduction_are_stored_by_the_reducing_loop():
    # the gradient and its bias-gradient column sum: one pass over the data, not two
    from fusionstitch.codegen.kernel import kernel_text
    from fusionstitch.codegen.lower import lower_group

    def f(x):
        y = torch.relu(x) * 2
        return y, y.sum(0)
    x = torch.randn(8, 16)
    rep = fusionstitch.explain(f, x, strategy="none", target="cpu")
    g = rep.graphs[0].plan.graph
    k = lower_group(g, [n.name for n in g.nodes if n.op != "parameter"], "k")
    (c,) = k.components
    assert len(c.loops) == 1, kernel_text(k)
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"))
    for got, want in zip(c(x), f(x)):
        torch.testing.assert_close(got, want)


def test_flat_rows_compute_a_broadcast_row_offset_once():
    # a mask broadcast over the heads: its row offset divides xo; the inner loop over a
    # row must not (it would not vectorise)
    def f(x, m):
        return x + m
    _, (src,) = kernel_sources(f, torch.randn(4, 8, 32), torch.randn(4, 1, 32))
    dense = src[src.index("// dense"):].split("} else {")[0]
    inner = dense[dense.index("for (int64_t xi"):]
    assert "const int64_t xoff = " in dense and "xo / " not in inner


@pytest.mark.parametrize("cols", [70, 16])
def test_middle_dim_sums_run_in_column_blocks_of_one_row(cols):
    # capsule routing's weighted sums: z[b, k, c] = sum_l w[b, k, l] * u[b, k, l, c]; the big
    # stream u is contiguous along c (the last digit of x), the small weights along r. The
    # blocks hold consecutive c of one (b, k): the lanes read consecutive memory and the
    # (b, k) offsets, with their divisions, are computed once per block
    def f(w, u):
        return (w.unsqueeze(-1) * u).sum(2)
    w, u = torch.randn(3, 4, 50), torch.randn(3, 4, 50, cols)
    _, (src,) = kernel_sources(f, w, u)
    dense = src[src.index("// dense"):].split("} else {")[0]
    assert "columns:" in dense and "xinner" in dense
    body = dense[dense.index("// loop 0 over r"):].split("// per x")[0]
    assert "const int64_t xi = xi0 + xl;" in body and " / " not in body, \
        "lanes index by xi and divide nothing"
    torch._dynamo.reset()
    got = torch.compile(f, backend=fusionstitch.backend(target="cpu"))(w, u)
    torch.testing.assert_close(got, f(w, u), rtol=1e-5, atol=1e-5)


def test_columns_compute_what_does_not_vary_with_r_once_per_block():
    """var over the leading dim of exp(-x*x) * w: the column order computes each column's
    pivot (an exp), its mean and its 1/(n-1) once per block of columns, not once per
    element (a division and two exps per element otherwise: 8x slower than Inductor at
    [16, 32, 512]), and keeps exp(-x*x) * w in a row buffer of the block for the later
    loops instead of computing it three times."""
    import re
    w = torch.randn(64)

    def f(x):
        y = torch.exp(-x * x) * w
        v = y.var(0, keepdim=True)
        return (y - v) * 2.0, v
    x = torch.randn(12, 8, 64)
    _, (src,) = kernel_sources(f, x)
    dense = src[src.index("// dense"):].split("} else {")[0]
    assert "columns:" in dense
    assert "once per block" in dense
    # every division sits in a per-block lane loop, none in a loop over r, and only
    # loop 0 over r computes an exp (the others read it from a row buffer)
    parts = re.split(r"// (loop \d+(?: over r|: what does not vary with r)|per x)", dense)
    over_r = [body for head, body in zip(parts[1::2], parts[2::2]) if head.endswith("over r")]
    assert len(over_r) == 3
    assert all(" / " not in body for body in over_r)
    assert [body.count("exp_f32(") for body in over_r] == [1, 0, 0]
    assert re.search(r"rb\d+\[r \* rbw \+ xl\]", dense)
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"))
    with torch.no_grad():
        for t in (x, torch.randn(3, 8, 64), torch.full((12, 8, 64), 0.5)):
            for got, want in zip(c(t), f(t)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("row", [2, 3, 4])
def test_short_broadcast_rows_loop_without_division(row):
    """tanh(x + w) with w along a short last dim: the flat loop runs in rows of `row`, w
    read as in1[xi], so the inner loop divides nothing and vectorises (unsplit, each
    element computed x % row, an int64 modulo no SIMD unit has, and the whole loop with
    its tanh ran scalar: 10x slower at [8, 8192, 4]); correct for other sizes, partial
    and strided inputs through the same kernel."""
    import re
    w = torch.randn(row)

    def f(x):
        return torch.tanh(x + w)
    x = torch.randn(4, 16, row)
    _, (src,) = kernel_sources(f, x)
    dense = src[src.index("// dense"):].split("} else {")[0]
    assert "xo * xinner + xi" in dense and "in1[xi]" in dense
    inner = dense[dense.index("for (int64_t xi = "):]
    assert not re.search(r"[%/] ", inner), inner
    torch._dynamo.reset()
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    for t in (x, torch.randn(3, 5, row), torch.randn(1, 1, row), torch.randn(7, 2 * row)[:, ::2],
              torch.randn(row, 6).t(), torch.randn(0, 3, row)):
        torch.testing.assert_close(c(t), f(t), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", ["sumsq", "var_mean", "softmax", "amax"])
def test_short_rows_run_in_columns(fn):
    """Reductions over rows of at most SHORT_ROW elements run in the column order (lanes
    over x) even though their rows are contiguous: the row order's per-row cost (a loop
    of 4 that fills no vector, accumulators, blocks) was 4-9x Inductor's (var_mean over
    [16384, 4, 4] dim 2). Correct for other sizes, longer rows at run time (the row
    buffers grow with rnumel, at most xnumel wide), NaN and strided inputs."""
    f = {"sumsq": lambda x: (x * x).sum(-1),
         "var_mean": lambda x: torch.var_mean(x, -1, correction=0),
         "softmax": lambda x: torch.softmax(x, -1),
         "amax": lambda x: (x - x.amax(-1, keepdim=True)).exp()}[fn]
    x = torch.randn(64, 4, 4)
    _, srcs = kernel_sources(f, x)
    dense = [s[s.index("// dense"):].split("} else {")[0] for s in srcs if "// dense" in s]
    assert dense and all("columns:" in d for d in dense), srcs
    assert cpu_reduce.SHORT_ROW >= 4
    torch._dynamo.reset()
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    nan = torch.randn(5, 3, 4)
    nan[1, 2, 3] = float("nan")
    with torch.no_grad():
        for t in (x, torch.randn(3, 5, 7), torch.randn(2, 3, 300), torch.randn(1, 1, 4), nan,
                  torch.randn(9, 4, 8)[:, :, ::2], torch.randn(4, 6, 5).transpose(1, 2)):
            got, want = c(t), f(t)
            for g, w in zip(got if isinstance(got, tuple) else (got,),
                            want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("kind", ["sum", "amax", "var"])
@pytest.mark.parametrize("dim", [0, 1])
def test_column_blocks_span_rows_when_the_streams_read_x(kind, dim):
    """Column reductions of exp(-x*x) * w with w along a short last dim (the corpus's
    reduce-<kind>-d0/d1): over dim 0 the streams read x itself, so a block holds
    COLUMN_BLOCK consecutive x across rows, and w (read at x % n) is a lane array computed
    once per block; no bool lane arrays (a load masked by a bool read from memory does
    not vectorise); row buffers sized by the block's true width. Compared to eager on odd
    sizes (tails of blocks and rows), NaN and strided inputs."""
    w = torch.randn(16)

    def f(x, w):
        y = torch.exp(-x * x) * w
        r = {"sum": lambda: y.sum(dim, keepdim=True), "amax": lambda: y.amax(dim, keepdim=True),
             "var": lambda: y.var(dim, keepdim=True)}[kind]()
        return (y - r) * 2.0, r
    x = torch.randn(256, 8, 16) if dim == 0 else torch.randn(64, 8, 16)
    _, srcs = kernel_sources(f, x, w)
    dense = [s[s.index("// dense"):].split("} else {")[0] for s in srcs if "// dense" in s]
    assert any("columns:" in d for d in dense), srcs
    for d in dense:
        assert not re_search(r"bool \w+\[64\]", d), d
        if dim == 0 and "columns:" in d:
            assert "xinner" not in d, "blocks span rows: x is not split"
    if dim == 1:    # rows of 8 (<= TINY_R): a version for whole rows of 16 lanes
        assert any("if (rnumel == 8) {" in d and "xnumel % 16 == 0" in d for d in dense), dense
    torch._dynamo.reset()
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    nan = torch.randn(7, 5, 3)
    nan[2, 1, 0] = float("nan")
    with torch.no_grad():
        for t in (x, torch.randn(37, 5, 3), torch.randn(3, 9, 67), nan,
                  torch.randn(1, 1, 16), torch.randn(9, 6, 10)[:, :, ::2],
                  torch.randn(5, 6, 7).transpose(0, 1)):
            ww = torch.randn(t.shape[-1])
            for g, e in zip(c(t, ww), f(t, ww)):
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5, equal_nan=True)


def re_search(pattern, text):
    import re
    return re.search(pattern, text)


@pytest.mark.parametrize("fn", ["var_mean", "sumsq", "softmax", "amax_sub"])
def test_tiny_rows_get_a_version_with_r_unrolled_inside_the_lanes(fn):
    """Column reductions over rows expected at most TINY_R long get an `if (rnumel == n)`
    version whose loop over r runs inside each lane loop and unrolls; other lengths at
    run time take the general version. Both compared to eager (odd sizes, rows longer
    and shorter than expected, NaN, strided)."""
    f = {"var_mean": lambda x: torch.var_mean(x, 1, correction=1),
         "sumsq": lambda x: (x * x).sum(-1),
         "softmax": lambda x: torch.softmax(x, -1),
         "amax_sub": lambda x: x - x.amax(1, keepdim=True)}[fn]
    x = torch.randn(64, 4, 4)
    _, srcs = kernel_sources(f, x)
    assert any("if (rnumel == 4) {" in s and "#pragma GCC unroll" in s for s in srcs), srcs
    torch._dynamo.reset()
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    nan = torch.randn(5, 4, 4)
    nan[1, 2, 3] = float("nan")
    with torch.no_grad():
        for t in (x, torch.randn(3, 5, 7), torch.randn(2, 3, 300), torch.randn(7, 4, 3),
                  torch.randn(4, 2, 4), nan, torch.randn(9, 4, 8)[:, :, ::2],
                  torch.randn(4, 6, 4).transpose(1, 2)):
            got, want = c(t), f(t)
            for g, w in zip(got if isinstance(got, tuple) else (got,),
                            want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("case", ["outer", "mid_operand", "rank4", "rank4_not_last"])
def test_broadcast_exp_is_computed_once_per_row_group(case):
    """exp of an operand broadcast along a middle dim (the corpus's bcast-outer:
    exp(-(x[:, :1, :1] * w) ** 2) + x) is computed once per group of rows sharing it (a
    per-thread row cache keyed by xo without its last digit), not once per row; where
    the operand varies with the last digit of xo there is no cache. Compared to eager on
    odd sizes, strided and empty inputs (dynamic shapes: one kernel for all)."""
    fns = {"outer": lambda x, a: torch.exp(-(x[:, :1, :1] * a) ** 2) + x,
           "mid_operand": lambda x, a: torch.sin(x[:, :1, :] * 0.5) * a + x,
           "rank4": lambda x, a: torch.tanh(x[:, :, :1, :] + a) * x,
           "rank4_not_last": lambda x, a: torch.tanh(x[:, :1, :, :] + a) * x}
    f = fns[case]
    rank4 = case.startswith("rank4")
    x = torch.randn(2, 3, 4, 16) if rank4 else torch.randn(4, 8, 64)
    _, srcs = kernel_sources(f, x, torch.randn(x.shape[-1]))
    cached = any("rc_now" in s for s in srcs)
    assert cached == (case != "rank4_not_last"), srcs
    torch._dynamo.reset()
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    shapes = [(2, 3, 4, 16), (3, 5, 7, 9), (1, 1, 1, 3), (2, 0, 3, 4)] if rank4 else \
        [(4, 8, 64), (3, 5, 7), (1, 1, 5), (5, 7, 4097), (2, 0, 3)]
    with torch.no_grad():
        for shape in shapes:
            for t in (torch.randn(*shape), torch.randn(*shape[:-1], 2 * shape[-1])[..., ::2]):
                a = torch.randn(shape[-1])
                torch.testing.assert_close(c(t, a), f(t, a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_stacked_columns_run_across_rows(n):
    """torch.stack of n per-row vectors along the last dim (the simulation's final state):
    rows of n < ACROSS_ROW whose operands are read per row run xi outside and xo inside
    (each operand read contiguously, its select uniform); compared to eager for other
    lengths, strided and empty inputs through the same (dynamic) kernel."""
    def f(*vs):
        return torch.stack([torch.sin(v) if i % 2 else v * 2.0 for i, v in enumerate(vs)], 1)
    vs = [torch.randn(64) for _ in range(n)]
    _, srcs = kernel_sources(f, *vs)
    assert any("xi outside" in s for s in srcs), srcs
    torch._dynamo.reset()
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    with torch.no_grad():
        for m in (64, 5, 1, 4099, 0):
            args = [torch.randn(m) for _ in range(n)]
            torch.testing.assert_close(c(*args), f(*args))
            args = [torch.randn(2 * m)[::2] for _ in range(n)]
            torch.testing.assert_close(c(*args), f(*args))


TRANSPOSES = {
    "nchw-nhwc": (lambda t: t.permute(0, 2, 3, 1).contiguous(), (2, 3, 9, 17)),
    "nchw-nhwc-c2": (lambda t: t.permute(0, 2, 3, 1).contiguous() * 2, (2, 2, 5, 33)),
    "nchw-nhwc-c7": (lambda t: t.permute(0, 2, 3, 1).contiguous(), (3, 7, 4, 20)),
    "padded": (lambda t: torch.nn.functional.pad(t, (0, 1, 1, 0)).permute(0, 2, 3, 1)
               .contiguous(), (2, 3, 16, 16)),
    "matrix": (lambda t: t.t().contiguous() + 1, (3, 50)),
    "rank5": (lambda t: t.permute(0, 2, 3, 4, 1).contiguous(), (2, 4, 3, 5, 18)),
}


@pytest.mark.parametrize("case", sorted(TRANSPOSES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_small_last_dims_of_a_transposition_run_outside_the_contiguous_read(case, dtype):
    """NCHW read into NHWC with few channels (a conv net's first layer run channels-last):
    the loop over the last row dim runs innermost, the channel just outside it, so the
    input is read contiguously (rows of 3 ran a loop of 3 per row: 2.2x Inductor's copy).
    Bitwise eager's, for strided inputs (the other version) and symbolic sizes too."""
    fn, shape = TRANSPOSES[case]
    t = (torch.randn(shape) * 8).to(dtype)
    _, srcs = kernel_sources(fn, t)
    assert any("a transposition" in s for s in srcs), srcs
    torch._dynamo.reset()
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    with torch.no_grad():
        assert torch.equal(c(t), fn(t))
        wide = (torch.randn(shape[:-1] + (2 * shape[-1],)) * 8).to(dtype)[..., ::2]
        assert torch.equal(c(wide), fn(wide))
    torch._dynamo.reset()
    d = torch.compile(fn, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    with torch.no_grad():
        for grow in (1, 2):
            u = (torch.randn(shape[:-1] + (shape[-1] * grow + 1,)) * 8).to(dtype)
            assert torch.equal(d(u), fn(u))


@pytest.mark.parametrize("fn", ["mean_sub", "var_mean", "softmax", "amax"])
def test_short_rows_get_a_version_of_their_expected_length(fn):
    """Row-order reductions over rows expected at most SMALL_R long get an
    `if (rnumel == n)` version (known trip counts); rows of other lengths at run time take
    the general one. Compared to eager: lengths below, at and above the expected one
    (tails of SIMD blocks and of SUM_BLOCK), NaN, strided."""
    f = {"mean_sub": lambda x: x - x.mean(-1, keepdim=True),
         "var_mean": lambda x: torch.var_mean(x, -1, correction=1),
         "softmax": lambda x: torch.softmax(x, -1),
         "amax": lambda x: x.amax(-1)}[fn]
    x = torch.randn(64, 32)
    _, srcs = kernel_sources(f, x)
    assert any("if (rnumel == 32) {" in s for s in srcs), srcs
    torch._dynamo.reset()
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    nan = torch.randn(5, 32)
    nan[2, 7] = float("nan")
    with torch.no_grad():
        for t in (x, torch.randn(3, 31), torch.randn(7, 33), torch.randn(2, 300),
                  torch.randn(4, 1), nan, torch.randn(6, 64)[:, ::2], torch.randn(32, 5).t()):
            got, want = c(t), f(t)
            for g, w in zip(got if isinstance(got, tuple) else (got,),
                            want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)


def _cases(got, want):
    return zip(got if isinstance(got, tuple) else (got,),
               want if isinstance(want, tuple) else (want,))


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn", ["var_mean", "var_sub", "sumsq", "softmax", "amax_sub",
                                "int_sum"])
def test_contiguous_rows_of_9_to_16_run_in_blocks_simd_along_r(fn, dtype):
    """Contiguous rows expected longer than TINY_R and at most SHORT_ROW (12 here) get an
    `if (rnumel == 12)` version in blocks of ROWS_BLOCK rows: each row's loop over r runs
    as SIMD lanes along the row (lanes over rows read it with a strided load per element,
    1.5x Inductor's time for var over [4096, 64, 16] dim 2), the per-row values (pivot,
    mean) are lane arrays of the block. Compared to eager, one static kernel per shape:
    tails of blocks (xnumel not a multiple of 16) and of SIMD vectors (12 = 8 + 4),
    other lengths, NaN / inf rows, strided and empty inputs; float32 and bfloat16
    (accumulated in float32)."""
    if fn == "int_sum" and dtype != torch.float32:
        pytest.skip("one integer case")
    f = {"var_mean": lambda x: torch.var_mean(x, -1, correction=1),
         "var_sub": lambda x: x - x.var(-1, keepdim=True),
         "sumsq": lambda x: (x * x).sum(-1),
         "softmax": lambda x: torch.softmax(x, -1),
         "amax_sub": lambda x: torch.exp(x - x.amax(-1, keepdim=True)),
         "int_sum": lambda x: (x * 3).sum(-1)}[fn]
    # var_mean's mean is torch.mean's (inf, not eager var_mean's NaN, for a row with one
    # inf: reductions._variance_passes)
    ref = (lambda x: (torch.var(x, -1), x.mean(-1))) if fn == "var_mean" else f

    def make(*shape):
        if fn == "int_sum":
            return torch.randint(-1000, 1000, shape, dtype=torch.int32)
        return torch.randn(*shape).to(dtype)
    x = make(64, 4, 12)
    _, srcs = kernel_sources(f, x)
    dense = [s[s.index("// dense"):].split("} else {")[0] for s in srcs if "// dense" in s]
    assert any("if (rnumel == 12) {" in d and "SIMD along r" in d and "x0 = xb * 16;" in d
               for d in dense), srcs
    torch._dynamo.reset()
    # static shapes: each shape's kernel has the version of its own row length (a dynamic
    # one has none); the general version at other lengths: test_cpu.py's hand-built case
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=False)
    special = make(5, 3, 12)
    if fn != "int_sum":
        special[1, 2, 3] = float("nan")
        special[2, 0, 0] = float("inf")        # the pivot of a row
        special[3, 1, 5] = -float("inf")
        special[4, 2] = 12345.678              # a constant row
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    with torch.no_grad():
        for t in (x, make(37, 5, 12), make(1, 1, 12), make(3, 5, 7), make(2, 3, 16),
                  make(2, 3, 300), special, make(9, 4, 24)[:, :, ::2],
                  make(4, 12, 5).transpose(1, 2), make(0, 3, 12)):
            for g, w in _cases(c(t), ref(t)):
                torch.testing.assert_close(g, w, equal_nan=True, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn", ["sum_sub", "var", "mean"])
def test_column_float_sums_add_blocks_of_rows_in_double(fn, dtype):
    """Float sums of the column order (r strided, x contiguous: the corpus's
    reduce-sum-d0) add COLUMN_SUM_BLOCK rows in float per column, then the blocks in
    double (a double accumulator per element was 1.3-1.6x Inductor's time over
    [2048, 64, 32] dim 0). Compared to eager: rnumel not a multiple of the block, fewer
    rows than a block, NaN / inf, strided, empty rows; float32 and bfloat16."""
    f = {"sum_sub": lambda x: (x - x.sum(0, keepdim=True)) * 2.0,
         "var": lambda x: torch.var(torch.exp(-x * x), 0, keepdim=True),
         "mean": lambda x: x.mean(0)}[fn]
    x = torch.randn(100, 8, 16).to(dtype)
    _, srcs = kernel_sources(f, x)
    dense = [s[s.index("// dense"):].split("} else {")[0] for s in srcs if "// dense" in s]
    assert any("columns:" in d and f"rb += {cpu_columns.COLUMN_SUM_BLOCK})" in d
               for d in dense), srcs
    torch._dynamo.reset()
    c = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    special = torch.randn(70, 3, 5).to(dtype)
    special[3, 1, 2] = float("nan")
    special[40, 2, 1] = float("inf")
    special[65, 0, 0] = -float("inf")
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=5e-2)
    with torch.no_grad():
        for t in (x, torch.randn(33, 5, 3), torch.randn(7, 9, 67), torch.randn(1, 4, 4),
                  special, torch.randn(64, 6, 10)[:, :, ::2], torch.randn(5, 40, 7)
                  .transpose(0, 1), torch.randn(0, 3, 5)):
            t = t.to(dtype)
            for g, w in _cases(c(t), f(t)):
                torch.testing.assert_close(g, w, equal_nan=True, **tol)
