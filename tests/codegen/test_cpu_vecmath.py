"""The cpu target's math: libmvec's vector functions (targets/cpp/vecmath.py), the
preamble's exp/tanh/erf, exact int64 -> float casts, and loops of bool logic that
vectorise (each checked against torch, and by the vector symbols the library imports)."""
import math
import shutil

import pytest
import torch

from fusionstitch.targets.cpp import printer as cpu
from fusionstitch.targets.cpp import build as cpu_build
from fusionstitch.targets.cpp import vecmath as cpu_vecmath
from fusionstitch.codegen.kernel import Constant, Op
from fusionstitch.runtime.cache import cache_dir
from test_cpu import compile_one, elementwise_kernel, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

needs_libmvec = pytest.mark.skipif(not cpu_vecmath._exported(tuple(cpu_build.compiler())),
                                   reason="no libmvec (or not GCC on x86-64)")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """A fresh cache folder per test: the newest library there is the test's."""
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FUSIONSTITCH_CXX", raising=False)
    monkeypatch.delenv("FUSIONSTITCH_CPU_VECMATH", raising=False)
    cpu.clear_memory_cache()


def _library_bytes() -> bytes:
    """The kernel library the test built (not pyentry's, which the first build in a
    process puts in the same folder)."""
    [so] = [p for p in cache_dir("cpu").glob("*.so") if p.with_suffix(".cpp").exists()
            and "fusionstitch.codegen.cpu" in p.with_suffix(".cpp").read_text()[:200]]
    return so.read_bytes()


def _ulps(got: torch.Tensor, want: torch.Tensor, dtype=torch.float32) -> float:
    """Largest error in units of the last place of `dtype` (finite normal results)."""
    info = torch.finfo(dtype)
    ok = want.isfinite() & (want.abs() >= info.tiny) & (want.abs() <= info.max)
    w = want[ok]
    if not w.numel():
        return 0.0
    ulp = info.eps * torch.exp2(torch.floor(torch.log2(w.abs())))
    return float(((got[ok].double() - w).abs() / ulp).max())


def _unary(op: str, x: torch.Tensor):
    dt = {torch.float32: "f32", torch.float64: "f64"}[x.dtype]
    kb, k = elementwise_kernel(op, [x], [(dt, [Op("y0", op, ("a0",), dt)])])
    return kb, k


SPECIAL = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e-30, -1e-30, 1e30, -1e30]
RANGES = {"sin": (-1e4, 1e4), "cos": (-1e4, 1e4), "tan": (-1.5, 1.5), "log": (1e-30, 1e30),
          "log2": (1e-3, 1e3), "log1p": (-0.999, 10.0), "expm1": (-20.0, 20.0),
          "exp2": (-100.0, 100.0), "tanh": (-10.0, 10.0), "erf": (-5.0, 5.0)}


@needs_libmvec
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", sorted(RANGES))
def test_libmvec_functions_match_torch_and_vectorise(op, dtype):
    g = torch.Generator().manual_seed(0)
    lo, hi = RANGES[op]
    if op == "log":      # log-uniform over many binades
        x = torch.exp(torch.empty(100_000, dtype=torch.float64).uniform_(
            math.log(lo), math.log(hi), generator=g))
    else:
        x = torch.empty(100_000, dtype=torch.float64).uniform_(lo, hi, generator=g)
    x = torch.cat([x.to(dtype), torch.tensor(SPECIAL, dtype=dtype)])
    kb, k = _unary(op, x)
    src = cpu.cpp_source(k)
    suffix = "f" if dtype == torch.float32 else ""
    assert f"fs_mv_{op}{suffix}(a0)" in src
    (got,) = launch(compile_one(k), kb, [x], [torch.empty_like(x)])
    want = getattr(torch, op)(x.double())
    assert _ulps(got, want, dtype) <= LIBMVEC_ULPS, op
    # special values against the float64 result, not torch's own float32 one (whose error
    # depends on the vector ISA ATen picked on this CPU): NaN, infinities, signed zeros
    mine, exact = got[-len(SPECIAL):], want[-len(SPECIAL):]
    assert torch.equal(mine.isnan(), exact.isnan())
    finite = ~exact.isnan()
    assert torch.equal(mine[finite].isinf(), exact[finite].isinf())
    assert torch.equal(torch.signbit(mine[finite]), torch.signbit(exact[finite].to(dtype)))
    assert _ulps(mine, exact, dtype) <= LIBMVEC_ULPS, op
    # the loop calls the vector variant (`_ZGVdN8v_sinf` and the like), not only `sinf`
    assert f"v_{op}{suffix}".encode() in _library_bytes()


@needs_libmvec
def test_pow_through_libmvec():
    g = torch.Generator().manual_seed(1)
    a = torch.empty(50_000).uniform_(0.0, 10.0, generator=g)
    b = torch.empty(50_000).uniform_(-8.0, 8.0, generator=g)
    kb, k = elementwise_kernel("pow", [a, b], [("f32", [Op("y0", "pow", ("a0", "a1"), "f32")])])
    assert "fs_mv_powf(a0, a1)" in cpu.cpp_source(k)
    (got,) = launch(compile_one(k), kb, [a, b], [torch.empty_like(a)])
    assert _ulps(got, torch.pow(a.double(), b.double())) <= LIBMVEC_ULPS
    assert b"vv_powf" in _library_bytes()


# Error bounds, in ulps of the exact result, each from a documented guarantee; a test that
# depends on the CPU's features must pass on every x86-64 Linux machine, so no bound comes
# from what one machine gave.
# - glibc's libmvec: "tested ... to pass 4-ulp maximum relative error criterion on their
#   domains in round-to-nearest computation mode" (sourceware.org/glibc/wiki/libmvec); its
#   variants differ per vector ISA (SSE, AVX2, AVX-512), so one CPU may sit at 1 ulp and
#   another at 3.998 (erf on an AMD EPYC with AVX-512), and both are within the bound.
LIBMVEC_ULPS = 4.0
# - the preamble's own functions (cpu_preamble.py) are IEEE arithmetic without contraction
#   (-ffp-contract=off, no -ffast-math) but for `fma_f32`, which fuses where the CPU has FMA
#   and multiplies then adds where it has not: two variants, and on any machine the test
#   builds both (`fma`: -mno-fma after -march=native gives the second). Each variant gives
#   the same bits on every machine, so its bound is a property of the code, stated next
#   to each function in the preamble (exp follows Sleef's expf_u10, documented 1.0 ulp;
#   our float-only port reaches 1.2).
PREAMBLE_ULPS = {"exp": 1.5, "tanh": 2.5, "erf": 3.0}
# sigmoid = 1 / (1 + exp(-x)): exp's relative error (at most its ulps times eps) shrinks
# in the sum, then two correctly rounded operations add 0.5 eps each (IEEE 754); a
# relative error of k eps is at most 2k ulps (an ulp is eps times the binade's bottom)
SIGMOID_ULPS = 2 * (PREAMBLE_ULPS["exp"] + 1.0)


def _check_ulps(got: torch.Tensor, want: torch.Tensor, bound: float, what: str,
                tiny_atol: float | None = None) -> None:
    """`got` within `bound` ulps of the float64 `want` (normal results), within `tiny_atol`
    below the normal range (default `bound` subnormal steps of 2^-149), and the same
    non-finite values."""
    assert _ulps(got, want) <= bound, (what, _ulps(got, want), bound)
    tiny = want.isfinite() & (want.abs() < torch.finfo(torch.float32).tiny)
    atol = bound * 2.0 ** -149 if tiny_atol is None else tiny_atol
    assert bool(((got[tiny].double() - want[tiny]).abs() <= atol).all()), what
    odd = ~want.isfinite()
    assert torch.equal(got[odd].isnan(), want[odd].isnan()), what
    inf = want.isinf()
    assert torch.equal(got[inf].double(), want[inf]), what


@pytest.mark.parametrize("fma", ["native", "no-fma"])
@pytest.mark.parametrize("vecmath", ["1", "0"])
def test_exp_tanh_erf_accuracy(vecmath, fma, monkeypatch, tmp_path):
    """exp is always the preamble's (libmvec's takes a scalar path below -88); tanh and
    erf are libmvec's where it is there, else the preamble's. Bounds: see LIBMVEC_ULPS;
    both variants of the preamble's polynomials (with and without FMA) are checked."""
    monkeypatch.setenv("FUSIONSTITCH_CPU_VECMATH", vecmath)
    if fma == "no-fma":
        cxx = tmp_path / "cxx-no-fma"
        cxx.write_text('#!/bin/sh\nexec g++ "$@" -mno-fma\n')
        cxx.chmod(0o755)
        monkeypatch.setenv("FUSIONSTITCH_CXX", str(cxx))
    if vecmath == "1" and not cpu_vecmath.available():
        pytest.skip("no libmvec")
    x = torch.cat([torch.linspace(-110, 95, 200001), torch.linspace(-5, 5, 100001),
                   torch.tensor([88.72283, 88.72284, -87.33654, -103.27893, -103.9, -104.0,
                                 -104.1, 104.1, 0.0, -0.0, 1e-8, -1e-8, 1e-30, 0.625, 1.0, 4.0,
                                 math.inf, -math.inf, math.nan])])
    kb, k = elementwise_kernel("vmath", [x], [("f32", [Op("y0", "exp", ("a0",), "f32")]),
                                              ("f32", [Op("y1", "sigmoid", ("a0",), "f32")]),
                                              ("f32", [Op("y2", "tanh", ("a0",), "f32")]),
                                              ("f32", [Op("y3", "erf", ("a0",), "f32")])])
    src = cpu.cpp_source(k)
    assert "fs::exp_f32(a0)" in src
    if vecmath == "1":
        assert "fs_mv_tanhf(a0)" in src and "fs_mv_erff(a0)" in src
        tanh_ulps = erf_ulps = LIBMVEC_ULPS
    else:
        assert "fs::tanh_f32(a0)" in src and "fs::erf_f32(a0)" in src and "fs_mv_" not in src
        tanh_ulps, erf_ulps = PREAMBLE_ULPS["tanh"], PREAMBLE_ULPS["erf"]
    got, sig, tanh, erf = launch(compile_one(k), kb, [x], [torch.empty_like(x) for _ in range(4)])
    xd = x.double()
    _check_ulps(got, torch.exp(xd), PREAMBLE_ULPS["exp"], "exp")
    # sigmoid's exp(-x) overflows below x = -88.7, so results under the normal range are
    # 0 (as eager's vectorised 1 / (1 + exp(-x))): absolutely within the smallest normal
    _check_ulps(sig, torch.sigmoid(xd), SIGMOID_ULPS, "sigmoid",
                tiny_atol=torch.finfo(torch.float32).tiny)
    _check_ulps(tanh, torch.tanh(xd), tanh_ulps, "tanh")
    _check_ulps(erf, torch.erf(xd), erf_ulps, "erf")
    # exact where the result is exact: saturation, signed zeros, NaN
    special = x[-11:]
    assert torch.equal(tanh[-11:].isnan(), special.isnan())
    assert tanh[-3].item() == 1.0 and tanh[-2].item() == -1.0 and erf[-3].item() == 1.0
    assert str(tanh[-10].item()) == "-0.0" and str(erf[-10].item()) == "-0.0"  # of -0.0
    assert got[-3].item() == math.inf and got[-2].item() == 0.0 and sig[-2].item() == 0.0


def test_knob_turns_libmvec_off(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CPU_VECMATH", "0")
    x = torch.linspace(-3, 3, 1000)
    kb, k = _unary("sin", x)
    assert "__builtin_sinf(a0)" in cpu.cpp_source(k)
    assert cpu_vecmath.declarations() == "" and cpu_vecmath.link_flags() == ()
    (got,) = launch(compile_one(k), kb, [x], [torch.empty_like(x)])
    torch.testing.assert_close(got, torch.sin(x))
    assert b"_ZGV" not in _library_bytes()


def _int64_edges() -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    parts = [torch.randint(-2**63, 2**63 - 1, (20_000,), generator=g, dtype=torch.int64)]
    for bits in range(1, 63, 3):
        parts.append(torch.randint(-2**bits, 2**bits, (500,), generator=g, dtype=torch.int64))
    # halfway between two floats, and one either side (rounding ties and double rounding)
    base = torch.randint(-2**22, 2**22, (2000,), generator=g) * 2**40
    parts += [base + 2**39 + d for d in (-1, 0, 1)]
    parts.append(torch.tensor([0, 1, -1, 2**63 - 1, -2**63, 2**53, 2**53 + 1, -(2**53) - 1,
                               2**24 + 1, 2**31, -2**31, 2**32, -2**32 - 1]))
    return torch.cat(parts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_int64_to_float_casts_round_as_torch(dtype):
    x = _int64_edges()
    dt = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16",
          torch.float16: "f16"}[dtype]
    kb, k = elementwise_kernel("i64cast", [x], [(dt, [Op("y0", "cast", ("a0",), dt)])])
    assert "fs::i64_to_f" in cpu.cpp_source(k)
    (got,) = launch(compile_one(k), kb, [x], [torch.empty(x.shape, dtype=dtype)])
    want = x.to(dtype) if dtype in (torch.float32, torch.float64) else x.to(torch.float32).to(dtype)
    assert torch.equal(got, want)


def test_bool_logic_loop_vectorises():
    """alive & (|x'| <= c) after where(alive, ...), as cartpole's steps: the kernel is
    compiled without the passes that turn it into selects between masks, and its loop
    calls sin's vector variant."""
    g = torch.Generator().manual_seed(3)
    x = torch.empty(4096).uniform_(-3, 3, generator=g)
    v = torch.empty(4096).uniform_(-1, 1, generator=g)
    u = torch.rand(4096, generator=g)
    # (alive from a comparison, as in cartpole: a select on a bool loaded from memory
    # mixes 8-bit masks with 32-bit data, which GCC 12 does not vectorise either)
    stmts = [Constant("lim", 2.4, "f32"), Constant("tau", 0.02, "f32"),
             Constant("keep", 0.8, "f32"), Op("alive0", "lt", ("a2", "keep"), "b8")]
    a, pos = "alive0", "a0"
    for t in range(3):
        stmts += [Op(f"s{t}", "sin", (pos,), "f32"), Op(f"d{t}", "mul", (f"s{t}", "tau"), "f32"),
                  Op(f"n{t}", "add", (pos, f"d{t}"), "f32"),
                  Op(f"p{t}", "where", (a, f"n{t}", pos), "f32"),
                  Op(f"m{t}", "abs", (f"p{t}",), "f32"), Op(f"c{t}", "le", (f"m{t}", "lim"), "b8"),
                  Op(f"al{t}", "and", (a, f"c{t}"), "b8")]
        a, pos = f"al{t}", f"p{t}"
    stmts += [Op("y0", "cast", (a,), "f32")]
    kb, k = elementwise_kernel("alive", [x, v, u], [("f32", stmts), ("f32", [
        Op("y1", "add", (pos, "a1"), "f32")])])
    src = cpu.cpp_source(k)
    assert cpu.BOOL_LOGIC_ATTRIBUTE in src
    got_alive, got_pos = launch(compile_one(k), kb, [x, v, u],
                                [torch.empty_like(x), torch.empty_like(x)])
    al, p = u < 0.8, x.clone()
    for _ in range(3):
        p = torch.where(al, p + torch.sin(p) * 0.02, p)
        al = al & (p.abs() <= 2.4)
    torch.testing.assert_close(got_alive, al.float())
    torch.testing.assert_close(got_pos, p + v)
    if cpu_vecmath.available():
        assert b"v_sinf" in _library_bytes()


def test_no_libmvec_for_the_linker_means_scalar_calls(tmp_path, monkeypatch):
    """A compiler whose linker does not find libmvec.so gets the C library's scalar
    functions (and still the right numbers)."""
    cxx = tmp_path / "cxx"
    cxx.write_text('#!/bin/sh\ncase "$1" in -print-file-name=*) echo libmvec.so; exit 0;; esac\n'
                   'exec g++ "$@"\n')
    cxx.chmod(0o755)
    monkeypatch.setenv("FUSIONSTITCH_CXX", str(cxx))
    assert cpu_vecmath.available() == frozenset()
    x = torch.linspace(-3, 3, 1000)
    kb, k = _unary("sin", x)
    assert "__builtin_sinf(a0)" in cpu.cpp_source(k)
    (got,) = launch(compile_one(k), kb, [x], [torch.empty_like(x)])
    torch.testing.assert_close(got, torch.sin(x))


# every function the printer may send through libmvec, with a domain it is defined on
POSITION_DOMAINS = dict(RANGES, pow=(0.0, 10.0))


@pytest.mark.parametrize("width", ["native", "prefer-256"])
@pytest.mark.parametrize("vecmath", ["1", "0"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_result_does_not_depend_on_where_its_element_falls(dtype, vecmath, width,
                                                             monkeypatch, tmp_path):
    """Bitwise: f(x) is the same whether x falls in a loop's vectorised body (of any
    width), its vectorised epilogue or its scalar tail, at any alignment. GCC calls a
    different libmvec variant for each (AVX-512, AVX2, the scalar libm), which differ
    within libmvec's 4 ulp; a value computed in two loops then compared with itself
    (`x == amin(x)` over a dim of 1, the dynamic fuzzer) came out false. Holds by
    construction (targets/cpp/vecmath.py: every call through one variant), so on every
    machine; without libmvec, loops calling libm do not vectorise. `prefer-256`: GCC
    tuned to 256-bit vectors, as for some AVX-512 CPUs (the variant is then AVX2's)."""
    monkeypatch.setenv("FUSIONSTITCH_CPU_VECMATH", vecmath)
    if width == "prefer-256":
        if vecmath == "0":
            pytest.skip("the width matters to libmvec's variants only")
        cxx = tmp_path / "cxx-256"
        cxx.write_text('#!/bin/sh\nexec g++ "$@" -mprefer-vector-width=256\n')
        cxx.chmod(0o755)
        monkeypatch.setenv("FUSIONSTITCH_CXX", str(cxx))
    g = torch.Generator().manual_seed(3)
    n_all = 4099
    ops = sorted(POSITION_DOMAINS)
    inputs, outs = [], []
    for op in ops:
        lo, hi = POSITION_DOMAINS[op]
        inputs.append(torch.empty(n_all, dtype=torch.float64).uniform_(lo, hi, generator=g)
                      .to(dtype))
    inputs.append(torch.empty(n_all, dtype=torch.float64).uniform_(-8, 8, generator=g)
                  .to(dtype))                       # pow's exponent
    for t in inputs:    # special values (libmvec's scalar path) every 37 elements
        t[::37][:len(SPECIAL)] = torch.tensor(SPECIAL, dtype=dtype)
    dt = {torch.float32: "f32", torch.float64: "f64"}[dtype]
    for j, op in enumerate(ops):
        args = (f"a{j}", f"a{len(ops)}") if op == "pow" else (f"a{j}",)
        outs.append((dt, [Op(f"y{j}", op, args, dt)]))
    kb, k = elementwise_kernel("anywhere", inputs, outs)
    if vecmath == "1" and cpu_vecmath.available():
        assert "fs_mv_" in cpu.cpp_source(k)
    run = compile_one(k)
    full = launch(run, kb, inputs, [torch.empty_like(inputs[0]) for _ in ops])
    for n in list(range(1, 41)) + [63, 64, 65, 127, 129]:
        for start in range(0, 200, 7):
            part = [t[start:start + n] for t in inputs]
            got = launch(run, kb, part, [torch.empty_like(part[0]) for _ in ops],
                         values=[n] + [1] * len(inputs))
            for op, a, b in zip(ops, got, full):
                want = b[start:start + n]
                assert torch.equal(a.view(torch.int64 if dtype == torch.float64 else
                                          torch.int32),
                                   want.view(torch.int64 if dtype == torch.float64 else
                                             torch.int32)), (op, n, start)
