"""The C++ target: hand-built kernels compiled with g++ and compared against torch."""
import shutil

import pytest
import torch

from fusionstitch.targets.cpp import printer as cpu
from fusionstitch.targets.cpp.library import compile_cpu
from fusionstitch.targets.cpp import names as cpu_names
from fusionstitch.codegen import expr as E
from fusionstitch.codegen.kernel import Constant, Index, Kernel, Load, Op, Reduce, Store
from fusionstitch.runtime import counters

from tests.codegen._cpu_kernels import (  # noqa: F401 (_cache: autouse fixture)
    X, R, TORCH, _cache, KB, at, flat, reduce, compile_one, elementwise_kernel, launch, row_kernel)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# ---------------------------------------------------------------------------
# elementwise


def exp_mul_kernel(a, b, bind=True):
    """out = exp(a) * b, b broadcast along the rows of a."""
    kb = KB(bind)
    m, n = kb.sym("m", a.shape[0]), kb.sym("n", a.shape[1])
    ina, sa = kb.input(a)
    inb, sb = kb.input(b)
    out = kb.output(tuple(a.shape), "f32")
    return kb, kb.kernel("exp_mul", flat(
        m * n,
        Load("va", ina, at(X, (m, n), sa), None, "f32"),
        Load("vb", inb, at(X, (m, n), (E.ZERO, sb[0])), None, "f32"),
        Op("ea", "exp", ("va",), "f32"),
        Op("y", "mul", ("ea", "vb"), "f32"),
        Store(out, X, "y", None)))


@pytest.mark.parametrize("expect", ["contiguous", "transposed"])
def test_flat_broadcast_strided_and_new_sizes(expect):
    a = torch.randn(20, 5).t() if expect == "transposed" else torch.randn(5, 20)
    b = torch.randn(20)
    kb, k = exp_mul_kernel(a, b, bind=expect == "contiguous")
    src = cpu.cpp_source(k)
    assert 'extern "C" void fs_exp_mul(' in src and "// component 0: flat" in src
    dense = "in0_stride0 == n && in0_stride1 == 1" if expect == "contiguous" else \
        "in0_stride0 == 1"
    assert f"if ({dense} && in1_stride0 == 1)" in src, src
    assert "xo * xinner + xi" in src and "in1[xi]" in src
    run = compile_one(k)
    out = torch.empty(5, 20)
    launch(run, kb, [a, b], [out])
    torch.testing.assert_close(out, torch.exp(a) * b, rtol=2e-6, atol=0)
    # the same binary for other layouts and sizes (sizes and strides are syms), including
    # rows longer than a block of the parallel loop
    for a2 in (torch.randn(9, 6), torch.randn(6, 9).t(), torch.randn(8, 6)[::2], torch.randn(3, 1),
               torch.randn(5, cpu.ROW_BLOCK * 2 + 5), torch.randn(0, 6), torch.randn(6, 0)):
        b2 = torch.randn(a2.shape[1] * 2)[::2]
        out2 = torch.empty(a2.shape)
        launch(run, kb, [a2, b2], [out2], [*a2.shape, *a2.stride(), *b2.stride()])
        torch.testing.assert_close(out2, torch.exp(a2) * b2, rtol=2e-6, atol=0)


def test_every_openmp_if_clause_names_parallel():
    """OpenMP 5 applies an `if` clause without a modifier to every construct of a combined
    one: `parallel for simd if(n >= grain)` also turned `simd` off below the grain, and
    such loops ran scalar (an optimizer's small parameters; adam's kernel took 6x longer
    when the grain was raised above its big parameters). Each `if` must name `parallel`."""
    import re
    _, flat_kernel = exp_mul_kernel(torch.randn(5, 20), torch.randn(20), bind=True)
    kb = KB()
    n = kb.sym("n", 1000)
    ina, (s0,) = kb.input(torch.randn(1000))
    o = kb.output((), "f32")
    row_kernel = kb.kernel("total", reduce(E.ONE, n, [
        [Load("v", ina, R * s0, None, "f32"), Reduce("s", "sum", "v", "f32")]],
        [Store(o, E.ZERO, "s", None)]))
    for k in (flat_kernel, row_kernel):
        src = cpu.cpp_source(k)
        clauses = re.findall(r"#pragma omp parallel[^\n]* if\(([a-z]*:?)", src)
        assert clauses and set(clauses) == {"parallel:"}, src


def test_names_are_made_legal():
    x = torch.randn(5)
    kb = KB()
    n = kb.sym("int", 5)                               # a sym named like a keyword
    buf, (s,) = kb.input(x)
    out = kb.output((5,), "f32")
    k = kb.kernel("my-kernel.v2", flat(
        n, Load("in0", buf, X * s, None, "f32"),      # a variable named like a buffer
        Load("x", buf, X * s, None, "f32"), Constant("float", 2.0, "f32"),
        Op("a.b", "mul", ("in0", "float"), "f32"), Op("1st", "add", ("a.b", "x"), "f32"),
        Index("xo", X), Op("xo2", "cast", ("xo",), "f32"),
        Op("int", "add", ("1st", "xo2"), "f32"), Store(out, X, "int", None)))
    src = cpu.cpp_source(k)
    assert 'extern "C" void fs_my_kernel_v2(' in src
    got = launch(compile_one(k), kb, [x], [torch.empty(5)])[0]
    torch.testing.assert_close(got, 3 * x + torch.arange(5.0))


FLOAT_UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "log2": torch.log2, "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf, "floor": torch.floor,
    "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "sign": torch.sign,
    "reciprocal": torch.reciprocal,
}
FLOAT_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.div,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "remainder": torch.remainder, "fmod": torch.fmod, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum,
}


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_float_ops(dtype):
    tdt = TORCH[dtype]
    g = torch.Generator().manual_seed(0)
    special = [0.0, -0.0, 0.5, 1.5, 2.5, -2.5, -0.5, 1.0, -1.0, 3.0, -7.25, 1e-30, -1e-30, 20.0,
               -20.0, 100.0, -100.0, float("inf"), float("-inf"), float("nan")]
    a = torch.cat([torch.tensor(special), torch.randn(300, generator=g) * 4]).to(tdt)
    b = torch.cat([torch.tensor([0.1, -0.1, 3.0, -3.0, 0.0, 2.0, -2.0, float("nan"), 0.5, 1.5,
                                 float("inf"), -1.0, 7.0, -0.0, 0.25, 0.3, -0.7, 2.0, 1.0, 4.0]),
                   torch.randn(300, generator=g) * 3]).to(tdt)
    assert a.shape == b.shape
    outs = []
    for j, op in enumerate(FLOAT_UNARY):
        outs.append((dtype, [Op(f"y{j}", op, ("a0",), dtype)]))
    base = len(outs)
    for j, op in enumerate(FLOAT_BINARY):
        outs.append((dtype, [Op(f"y{base + j}", op, ("a0", "a1"), dtype)]))
    base = len(outs)
    outs.append(("b8", [Op(f"y{base}", "isnan", ("a0",), "b8")]))
    outs.append(("b8", [Op(f"y{base + 1}", "isinf", ("a0",), "b8")]))
    for j, op in enumerate(["eq", "ne", "lt", "le", "gt", "ge"]):
        outs.append(("b8", [Op(f"y{base + 2 + j}", op, ("a0", "a1"), "b8")]))
    kb, k = elementwise_kernel(f"float_ops_{dtype}", [a, b], outs)
    run = compile_one(k)
    results = launch(run, kb, [a, b], [torch.empty(a.shape, dtype=TORCH[o[0]]) for o in outs])
    expected = ([f(a) for f in FLOAT_UNARY.values()] + [f(a, b) for f in FLOAT_BINARY.values()]
                + [a.isnan(), a.isinf(), a == b, a != b, a < b, a <= b, a > b, a >= b])
    names = list(FLOAT_UNARY) + list(FLOAT_BINARY) + "isnan isinf eq ne lt le gt ge".split()
    # Both sides within documented bounds of the exact result, so within their sum of
    # each other on any CPU: ours within 4 ulp (libmvec, glibc's wiki) or the preamble's
    # 3 (exp, tanh, erf: test_cpu_vecmath.py), a relative 4 * 2^-23 = 4.8e-7; eager's
    # float32 math is Sleef's 1.0-ulp functions (1.2e-7) or, for erf, Abramowitz & Stegun
    # 7.1.26 (absolute 1.5e-7);
    # in float64, 4 + 1 ulps are 1.1e-15
    tol = 1e-6 if dtype == "f32" else 1e-14
    for name, got, want in zip(names, results, expected):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True,
                                   msg=lambda m, name=name: f"{name}: {m}")
    # exact where torch's answer is exact
    for name in ("floor", "ceil", "round", "trunc", "sign", "neg", "abs", "floordiv", "maximum",
                 "minimum", "remainder", "fmod"):
        got, want = results[names.index(name)], expected[names.index(name)]
        same = (got == want) | (got.isnan() & want.isnan())
        assert bool(same.all()), (name, a[~same], b[~same], got[~same], want[~same])


INT_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "remainder": torch.remainder, "fmod": torch.fmod, "maximum": torch.maximum,
    "minimum": torch.minimum, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
}


@pytest.mark.parametrize("dtype", ["i64", "i32", "i8", "u8"])
def test_int_ops(dtype):
    tdt = TORCH[dtype]
    info = torch.iinfo(tdt)
    g = torch.Generator().manual_seed(1)
    edge = [info.max, info.min, info.max, -7, 7, -7, 7, 0, 5, -1, 1, 100]
    a = torch.cat([torch.tensor(edge), torch.randint(-100, 100, (200,), generator=g)]).to(tdt)
    b = torch.cat([torch.tensor([1, 1, -1, 2, -2, -2, 2, 3, -3, 3, 7, 9]),
                   torch.randint(1, 20, (200,), generator=g)
                   * (torch.randint(0, 2, (200,), generator=g) * 2 - 1)]).to(tdt)
    assert bool((b != 0).all())
    shifts = torch.randint(-3, 8 * a.element_size() + 4, a.shape, generator=g).to(tdt)
    exps = torch.randint(-2 if dtype != "u8" else 0, 12, a.shape, generator=g).to(tdt)
    outs = [(dtype, [Op(f"y{j}", op, ("a0", "a1"), dtype)]) for j, op in enumerate(INT_BINARY)]
    n = len(outs)
    outs += [(dtype, [Op(f"y{n}", "lshift", ("a0", "a2"), dtype)]),
             (dtype, [Op(f"y{n + 1}", "rshift", ("a0", "a2"), dtype)]),
             (dtype, [Op(f"y{n + 2}", "pow", ("a0", "a3"), dtype)]),
             (dtype, [Op(f"y{n + 3}", "neg", ("a0",), dtype)]),
             (dtype, [Op(f"y{n + 4}", "abs", ("a0",), dtype)]),
             (dtype, [Op(f"y{n + 5}", "sign", ("a0",), dtype)]),
             (dtype, [Op(f"y{n + 6}", "bitwise_not", ("a0",), dtype)]),
             ("b8", [Op(f"y{n + 7}", "lt", ("a0", "a1"), "b8")]),
             ("f32", [Op(f"y{n + 8}", "cast", ("a0",), "f32")]),
             ("b8", [Op(f"y{n + 9}", "cast", ("a0",), "b8")])]
    kb, k = elementwise_kernel(f"int_ops_{dtype}", [a, b, shifts, exps], outs)
    run = compile_one(k)
    results = launch(run, kb, [a, b, shifts, exps],
                     [torch.empty(a.shape, dtype=TORCH[o[0]]) for o in outs])
    if dtype == "u8":
        neg_abs_sign = [-a, a, torch.sign(a)]
    else:
        neg_abs_sign = [-a, torch.abs(a), torch.sign(a)]
    expected = ([f(a, b) for f in INT_BINARY.values()]
                + [a << shifts, a >> shifts, torch.pow(a, exps)] + neg_abs_sign
                + [~a, a < b, a.float(), a.bool()])
    names = list(INT_BINARY) + "lshift rshift pow neg abs sign bitwise_not lt cast_f32 cast_b8" \
        .split()
    for name, got, want in zip(names, results, expected):
        if name in ("lshift", "rshift") and dtype == "u8":
            ok = (shifts >= 0) & (shifts < 8)           # torch's u8 shifts by >= 8 vary
            got, want = got[ok], want[ok]
        assert torch.equal(got, want), (name, got, want)


def test_casts_and_bool_ops():
    f = torch.tensor([300.7, -3.5, 2.9, -2.9, 0.0, float("nan"), 1e10, 255.0, -129.0, 65.5])
    bits = torch.tensor([True, False, True, False, True, False, True, False, True, True])
    other = torch.tensor([True, True, False, False, True, True, False, False, False, True])
    outs = [("u8", [Op("y0", "cast", ("a0",), "u8")]),
            ("i8", [Op("y1", "cast", ("a0",), "i8")]),
            ("i32", [Op("y2", "cast", ("a0",), "i32")]),
            ("b8", [Op("y3", "cast", ("a0",), "b8")]),
            ("b8", [Op("y4", "and", ("a1", "a2"), "b8")]),
            ("b8", [Op("y5", "or", ("a1", "a2"), "b8")]),
            ("b8", [Op("y6", "xor", ("a1", "a2"), "b8")]),
            ("b8", [Op("y7", "not", ("a1",), "b8")]),
            ("f32", [Op("a0n", "neg", ("a0",), "f32"), Op("y8", "where", ("a1", "a0", "a0n"),
                                                           "f32")]),
            ("f64", [Op("y9", "cast", ("a1",), "f64")]),
            ("i64", [Op("y10", "cast", ("a0",), "i64")])]
    kb, k = elementwise_kernel("casts", [f, bits, other], outs)
    run = compile_one(k)
    res = launch(run, kb, [f, bits, other], [torch.empty(10, dtype=TORCH[o[0]]) for o in outs])
    finite = f.isfinite() & (f.abs() < 1e9)
    assert torch.equal(res[0][finite], f.to(torch.uint8)[finite])
    assert torch.equal(res[1][finite], f.to(torch.int8)[finite])
    assert torch.equal(res[2][finite], f.to(torch.int32)[finite])
    assert torch.equal(res[10][finite], f.to(torch.int64)[finite])
    assert torch.equal(res[3], f.bool())
    assert torch.equal(res[4], bits & other) and torch.equal(res[5], bits | other)
    assert torch.equal(res[6], bits ^ other) and torch.equal(res[7], ~bits)
    torch.testing.assert_close(res[8], torch.where(bits, f, -f), equal_nan=True)
    assert torch.equal(res[9], bits.double())


# ---------------------------------------------------------------------------
# half types


def _same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16)), \
        (got[~nan] != want[~nan]).sum()


def test_half_conversions_bit_exact():
    g = torch.Generator().manual_seed(2)
    specials = torch.tensor([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e5, -1e5, 6e-8, 3e-8,
                             2.9e-8, 5.96e-8, 1e-45, float("inf"), float("-inf"), float("nan"),
                             1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 2049.0, 2051.0, 3.4e38])
    bitsf = torch.randint(-2**31, 2**31, (100000,), generator=g, dtype=torch.int64) \
        .to(torch.int32).view(torch.float32)
    # every midpoint between neighbouring halfs (ties to even) and its neighbours
    h = torch.arange(0, 2**15 - 1024, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    mids = (h[:-1] + (h[1:] - h[:-1]) / 2)
    f = torch.cat([specials, bitsf, mids, -mids, torch.nextafter(mids, torch.zeros(1)),
                   torch.randn(1000, generator=g) * 1000])
    kb, k = elementwise_kernel("to_half", [f], [
        ("f16", [Op("y0", "cast", ("a0",), "f16")]),
        ("bf16", [Op("y1", "cast", ("a0",), "bf16")])])
    run = compile_one(k)
    half, bf = launch(run, kb, [f], [torch.empty(f.shape, dtype=torch.float16),
                                     torch.empty(f.shape, dtype=torch.bfloat16)])
    _same_bits(half, f.half())
    _same_bits(bf, f.bfloat16())

    every = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16)
    kb, k = elementwise_kernel("from_half", [every.view(torch.float16), every.view(torch.bfloat16)],
                               [("f32", [Op("y0", "cast", ("a0",), "f32")]),
                                ("f32", [Op("y1", "cast", ("a1",), "f32")])])
    run = compile_one(k)
    f16, fbf = launch(run, kb, [every.view(torch.float16), every.view(torch.bfloat16)],
                      [torch.empty(2**16), torch.empty(2**16)])
    for got, want in ((f16, every.view(torch.float16).float()),
                      (fbf, every.view(torch.bfloat16).float())):
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan)
        assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_arithmetic(dtype):
    tdt = TORCH[dtype]
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(1000, generator=g) * 10).to(tdt), torch.randn(1000, generator=g).to(tdt)
    outs = [(dtype, [Op("fa", "cast", ("a0",), "f32"), Op("fb", "cast", ("a1",), "f32"),
                     Op("p", "mul", ("fa", "fb"), "f32"), Op("y0", "cast", ("p",), dtype)]),
            ("f32", [Op("y1", "add", ("fa", "fb"), "f32")])]
    kb, k = elementwise_kernel(f"half_mul_{dtype}", [a, b], outs)
    run = compile_one(k)
    prod, total = launch(run, kb, [a, b], [torch.empty(1000, dtype=tdt), torch.empty(1000)])
    assert torch.equal(prod.view(torch.int16), (a * b).view(torch.int16))
    assert torch.equal(total, a.float() + b.float())


def test_half_row_sum():
    a = (torch.randn(8, 300) * 3).half()
    kb = KB()
    m, n = kb.sym("m", 8), kb.sym("n", 300)
    ina, (s0, s1) = kb.input(a)
    out = kb.output((8,), "f16")
    k = kb.kernel("half_sum", reduce(m, n, [[
        Load("v", ina, X * s0 + R * s1, None, "f16"), Op("f", "cast", ("v",), "f32"),
        Reduce("s", "sum", "f", "f32")]], [Op("h", "cast", ("s",), "f16"),
                                            Store(out, X, "h", None)]))
    got = launch(compile_one(k), kb, [a], [torch.empty(8, dtype=torch.float16)])[0]
    torch.testing.assert_close(got, a.sum(1), rtol=1e-3, atol=1e-2)   # summed in float




# ---------------------------------------------------------------------------
# masks, packing


def test_masked_gather_reads_nothing_when_masked():
    table = torch.randn(10)
    idx = torch.tensor([0, 3, 10**12, -5, 9, 2, 10, 10**15])
    kb = KB()
    n, size = kb.sym("n", idx.numel()), kb.sym("size", table.numel())
    itab, (st,) = kb.input(table)
    iidx, (si,) = kb.input(idx)
    out = kb.output((idx.numel() + 3,), "f32")       # 3 more lanes than there are indices
    out_idx = kb.output((idx.numel() + 3,), "i64")
    k = kb.kernel("gather", flat(
        n + 3,
        Index("xi", X), Index("nn", n), Op("inb", "lt", ("xi", "nn"), "b8"),
        Load("i", iidx, X * si, "inb", "i64"),
        Index("sz", size), Constant("zero", 0, "i64"),
        Op("lo", "ge", ("i", "zero"), "b8"), Op("hi", "lt", ("i", "sz"), "b8"),
        Op("inside", "and", ("lo", "hi"), "b8"), Op("ok", "and", ("inb", "inside"), "b8"),
        Load("v", itab, E.mul(E.Value("i"), st), "ok", "f32"),
        Constant("fill", -1.5, "f32"), Op("y", "where", ("ok", "v", "fill"), "f32"),
        Store(out, X, "y", "xmask"), Store(out_idx, X, "i", "inb")))
    run = compile_one(k)
    got, got_idx = launch(run, kb, [table, idx], [torch.empty(idx.numel() + 3),
                                                  torch.full((idx.numel() + 3,), 7)])
    ok = (idx >= 0) & (idx < 10)
    want = torch.where(ok, table[idx.clamp(0, 9)], torch.tensor(-1.5))
    assert torch.equal(got[:8], want) and torch.equal(got[8:], torch.full((3,), -1.5))
    assert torch.equal(got_idx, torch.cat([idx, torch.full((3,), 7)]))   # masked store


def test_two_components_packed():
    a, b = torch.randn(40), torch.randn(5, 8)
    kb = KB()
    n, m, c = kb.sym("n", 40), kb.sym("m", 5), kb.sym("c", 8)
    ia, (sa,) = kb.input(a)
    ib, (sb0, sb1) = kb.input(b)
    o0, o1 = kb.output((40,), "f32"), kb.output((5,), "f32")
    k = kb.kernel("packed", flat(n, Load("va", ia, X * sa, None, "f32"),
                                 Constant("one", 1.0, "f32"), Op("y", "add", ("va", "one"), "f32"),
                                 Store(o0, X, "y", None)),
                  reduce(m, c, [[Load("vb", ib, X * sb0 + R * sb1, None, "f32"),
                                 Reduce("s", "prod", "vb", "f32")]], [Store(o1, X, "s", None)]))
    src = cpu.cpp_source(k)
    assert "// component 0: flat" in src and "// component 1: reduce" in src
    run = compile_one(k)
    y, p = launch(run, kb, [a, b], [torch.empty(40), torch.empty(5)])
    assert torch.equal(y, a + 1)
    torch.testing.assert_close(p, b.prod(1))


def test_library_of_many_kernels_with_clashing_names():
    a = torch.randn(5, 6)
    kb1, k1 = row_kernel(a, "sum")
    kb2, k2 = row_kernel(a, "max")
    k2 = Kernel(k1.name, k2.buffers, k2.syms, k2.components, k2.index_dtype)   # same name
    r1, r2 = compile_cpu([k1, k2])
    assert torch.allclose(launch(r1, kb1, [a], [torch.empty(5)])[0], a.sum(1))
    assert torch.equal(launch(r2, kb2, [a], [torch.empty(5)])[0], a.amax(1))


def test_constants_are_exact():
    vals = [0.1, 1 / 3, 1e-40, 3.4028234663852886e38, 1e300, -2.5, float("inf"), float("-inf"),
            float("nan"), 5e-324]
    for dtype in ("f32", "f64", "f16", "bf16"):
        text = [cpu_names.literal(v, dtype) for v in vals]
        assert text[6:9] == ["fs::inf", "-fs::inf", "fs::nan"]
    assert cpu_names.literal(0.1, "f32") == "0.10000000149011612f"
    assert cpu_names.literal(1e300, "f32") == "fs::inf" and cpu_names.literal(1e300, "f64") == "1e+300"
    assert cpu_names.literal(-2**63, "i64") == "INT64_MIN" and cpu_names.literal(True, "b8") == "true"
    x = torch.zeros(3)
    kb, k = elementwise_kernel("consts", [x], [
        ("f32", [Constant("c", 0.1, "f32"), Op("y0", "add", ("a0", "c"), "f32")]),
        ("f64", [Constant("d", 1 / 3, "f64"), Op("y1", "cast", ("d",), "f64")]),
        ("i64", [Constant("y2", -2**63, "i64")]),
        ("f16", [Constant("y3", 0.1, "f16")])])
    got = launch(compile_one(k), kb, [x], [torch.empty(3), torch.empty(3, dtype=torch.float64),
                                           torch.empty(3, dtype=torch.int64),
                                           torch.empty(3, dtype=torch.float16)])
    assert got[0][0].item() == torch.tensor(0.1).item()
    assert got[1][0].item() == 1 / 3 and got[2][0].item() == -2**63
    assert got[3][0].item() == torch.tensor(0.1, dtype=torch.float16).item()


# ---------------------------------------------------------------------------
# caching, errors


def _tiny_kernel(name="tiny") -> tuple[KB, Kernel]:
    x = torch.zeros(4)
    return elementwise_kernel(name, [x], [("f32", [Op("y0", "neg", ("a0",), "f32")])])


def test_disk_cache_warm_start(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    kb, k = _tiny_kernel("cached")
    cpu.clear_memory_cache()
    before = counters.stats()
    compile_cpu([k])
    mid = counters.stats()
    assert mid["kernels_compiled"] == before["kernels_compiled"] + 1
    assert len(list((tmp_path / "cpu").glob("*.so"))) == 1
    assert not [p for p in (tmp_path / "cpu").iterdir() if p.suffix not in (".so", ".cpp")]
    compile_cpu([k])                                    # in-process table
    cpu.clear_memory_cache()
    [run] = compile_cpu([k])                            # disk
    after = counters.stats()
    assert after["kernels_compiled"] == mid["kernels_compiled"]
    assert after["cache_hits"] == mid["cache_hits"] + 2
    x = torch.arange(4.0)
    assert torch.equal(launch(run, kb, [x], [torch.empty(4)])[0], -x)


def test_broken_compiler_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSIONSTITCH_CXX", "/bin/false")
    with pytest.raises(cpu.CompilerUnavailable, match="false"):
        compile_cpu([_tiny_kernel("broken")[1]])
    monkeypatch.setenv("FUSIONSTITCH_CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(cpu.CompilerUnavailable, match="not available"):
        compile_cpu([_tiny_kernel("missing")[1]])


def test_bad_kernel_raises():
    """A kernel the printer cannot print says so (not "no compiler": the cause is named)."""
    _kb, k = elementwise_kernel("bad", [torch.zeros(2)], [("f32", [Op("y0", "frobnicate", ("a0",),
                                                                      "f32")])])
    with pytest.raises(cpu.CannotPrint, match="frobnicate") as info:
        compile_cpu([k])
    assert not isinstance(info.value, cpu.CompilerUnavailable)
    assert isinstance(info.value, cpu.KernelBuildError)
