"""Vector math for the cpu target: glibc's libmvec.

A loop that calls a scalar C library function (`sinf`, `logf`, ...) does not
vectorise: the call runs once per element, 10-20x slower than the loop around it
(cartpole's kernel spent 99 ms of 100 ms in scalar `sinf`/`cosf`). glibc ships
vector variants of these functions in libmvec (`_ZGVdN8v_sinf` computes 8 floats
in AVX2 registers), the ones `-ffast-math` code calls. GCC calls them from a
vectorised loop when the scalar function is declared `simd`. We declare our own
names (`fs_mv_sinf`, bound to our symbol `fs_lane_sinf`) and define its scalar and
vector entry points to call one libmvec variant, so that a value's bits do not depend
on where its element falls in a loop (see `declarations`).

Measured on this machine (4M floats, one thread): sinf 43 -> 3.0 ms, logf 13.6 ->
3.1 ms, erff 80 -> 3.1 ms; the variants are within 4 ulp of the exact result
(glibc's documented bound; erf reaches 3.998 on an AMD EPYC with AVX-512, where it
rounds to 1.0 from |x| = 3.65 on, eager's erf from 3.92: a `where(erf(v) < 1, ...)` can
pick the other side for such v), handle NaN, infinities and huge arguments
as libm does, and beat the preamble's own tanh/erf polynomials (erf 5.0 -> 1.4 ms
per 2M floats), which remain for machines without libmvec. Arguments outside a
function's fast range (huge sines, logs of subnormals) take a scalar path in
libmvec too, at about the cost of the scalar function.

A function is used only when libmvec exports the variant for every vector ISA GCC
might pick (SSE `b`, AVX `c`, AVX2 `d`, AVX-512 `e`), on x86-64, with GCC (Clang
ignores the attribute). `FUSIONSTITCH_CPU_VECMATH=0` turns it off.
"""
from __future__ import annotations

import ctypes
import os
import platform
import subprocess
from functools import lru_cache

from ...config import env_flag_default
from . import build

# the torch-level names the printer emits through the C library
# (not exp: libmvec's expf takes a scalar path for every vector holding an argument
# below about -88, the masked -inf entries of a softmax: 30 ms against the preamble's
# branch-free exp_f32 at 4.6 ms for 2M floats in [-200, 0])
UNARY = ("exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "tan", "tanh", "erf",
         "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erfc", "log10")
BINARY = ("pow", "atan2", "hypot")
# (ISA letter, lanes) of the x86-64 vector function ABI, per C type
_VARIANTS = {"f32": (("b", 4), ("c", 8), ("d", 8), ("e", 16)),
             "f64": (("b", 2), ("c", 4), ("d", 4), ("e", 8))}
_CTYPE = {"f32": "float", "f64": "double"}
_SUFFIX = {"f32": "f", "f64": ""}


def enabled() -> bool:
    """FUSIONSTITCH_CPU_VECMATH=0 turns libmvec off (on by default where it works)."""
    return env_flag_default("FUSIONSTITCH_CPU_VECMATH", True)


@lru_cache(maxsize=8)
def _exported(cxx: tuple[str, ...]) -> frozenset[str]:
    """C names (`sinf`, `sin`, `powf`, ...) whose vector variants libmvec has for every
    ISA; empty where there is no libmvec or the compiler `cxx` is not GCC."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return frozenset()
    try:
        version, _ = build.toolchain(list(cxx))
    except build.CompilerUnavailable:
        return frozenset()
    if "clang" in version.lower():
        return frozenset()
    # the linker must find libmvec.so too (the C library's development files)
    try:
        found = subprocess.run([*cxx, "-print-file-name=libmvec.so"], capture_output=True,
                               text=True, timeout=60, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    if not os.path.isabs(found):
        return frozenset()
    try:
        lib = ctypes.CDLL("libmvec.so.1")
    except OSError:
        return frozenset()
    out = set()
    for name in UNARY + BINARY:
        params = "vv" if name in BINARY else "v"
        for dt, variants in _VARIANTS.items():
            cname = name + _SUFFIX[dt]
            if all(hasattr(lib, f"_ZGV{isa}N{lanes}{params}_{cname}") for isa, lanes in variants):
                out.add(cname)
    return frozenset(out)


def available() -> frozenset[str]:
    """The C names the printer may call through libmvec now (the knob, then the probe)."""
    return _exported(tuple(build.compiler())) if enabled() else frozenset()


def function(name: str, dtype: str) -> str | None:
    """`fs_mv_sinf` for ("sin", "f32") when libmvec has it, else None."""
    if dtype not in _SUFFIX:
        return None
    cname = name + _SUFFIX[dtype]
    return f"fs_mv_{cname}" if cname in available() else None


# The variants every call may go through (see declarations), with the preprocessor
# condition that allows each, in order of preference: AVX-512's only where GCC vectorises
# with 512-bit vectors (`_one_order`), else the widest the build's -march allows.
_ONE = (("e", "defined(__AVX512F__)"), ("d", "defined(__AVX2__)"), ("c", "defined(__AVX__)"),
        ("b", "1"))


@lru_cache(maxsize=8)
def _prefers_512(cxx: tuple[str, ...]) -> bool:
    """Whether GCC's -march=native here vectorises with 512-bit vectors: AVX-512F on and no
    preferred width below 512 (GCC tunes some AVX-512 CPUs to prefer 256 bits)."""
    try:
        q = build.native_options(cxx) or ""
    except (OSError, subprocess.SubprocessError):
        return False
    opts = dict(line.split(None, 1) for line in q.splitlines()
                if line.strip().startswith("-m") and len(line.split(None, 1)) == 2)
    return opts.get("-mavx512f", "").strip() == "[enabled]" and \
        opts.get("-mprefer-vector-width=", "none").strip() in ("none", "512")


def _one_order() -> tuple[tuple[str, str], ...]:
    cxx = tuple(build.compiler())
    return _ONE if _prefers_512(cxx) else _ONE[1:]


# The variants GCC may call from a vectorised loop, with the condition that lets it.
_CALLERS = (("b", "1"), ("c", "defined(__AVX__)"), ("d", "defined(__AVX2__)"),
            ("e", "defined(__AVX512F__)"))
_LANES = {dt: dict(v) for dt, v in _VARIANTS.items()}


def _vtype(dt: str, lanes: int) -> str:
    return f"fs_{dt}x{lanes}"


def declarations(source: str | None = None) -> str:
    """The C++ declarations of the `fs_mv_*` names (empty without libmvec); with
    `source`, only of those it calls (each costs the compiler five small functions).

    One value, one result: every call of a function, in any loop, goes through the same
    libmvec variant. GCC calls a vector variant per vector width it uses (one loop may
    run AVX-512's `_ZGVeN16v_log1pf` on its body, AVX2's `_ZGVdN8v_log1pf` on a vectorised
    epilogue and the scalar `log1pf` on the last elements), and these give different bits
    for some inputs (within libmvec's 4 ulp). A value computed in two loops (the pass of a
    reduction and its epilogue, or two kernels) then differs with its position, and
    `x == amin(x)` over a dim of 1 came out false (the dynamic fuzzer, 2026-11-27). So
    `fs_mv_<f>` names our own symbol `fs_lane_<f>`, whose scalar and every vector variant
    GCC may call are defined here, each calling the one variant `_ONE` picks for this
    build (AVX-512's where GCC vectorises with it, else AVX2's, ...): a lane's result
    depends on its value alone, and the loops' main bodies call that variant directly."""
    names = available()
    if not names:
        return ""
    hidden = '__attribute__((visibility("hidden")))'
    lines = ["// glibc's libmvec, one variant for every call (targets/cpp/vecmath.py)"]
    for dt, ct in _CTYPE.items():
        for lanes in sorted({n for _, n in _VARIANTS[dt]}):
            lines.append(f"typedef {ct} {_vtype(dt, lanes)} "
                         f"__attribute__((vector_size({lanes * (4 if dt == 'f32' else 8)})));")
    for k, (one, cond) in enumerate(_one_order()):
        lines.append(("#if " if k == 0 else "#elif ") + cond)
        for name in UNARY + BINARY:
            for dt in ("f32", "f64"):
                cname = name + _SUFFIX[dt]
                if cname in names and (source is None or f"fs_mv_{cname}(" in source):
                    lines += _one_function(name, cname, dt, one, hidden)
    lines.append("#endif")
    return "\n".join(lines) + "\n"


def _one_function(name: str, cname: str, dt: str, one: str, hidden: str) -> list[str]:
    """The declarations and definitions of fs_mv_<cname>: scalar and vector entry points,
    all through libmvec's variant `one`."""
    ct, binary = _CTYPE[dt], name in BINARY
    n = _LANES[dt][one]
    vt = _vtype(dt, n)
    p = "vv" if binary else "v"
    lib = f"_ZGV{one}N{n}{p}_{cname}"
    args = ("x", "y") if binary else ("x",)

    def params(t):
        return ", ".join(f"{t} {a}" for a in args)
    out = [f'extern "C" __attribute__((simd("notinbranch"), const, nothrow, leaf)) '
           f'{ct} fs_mv_{cname}({", ".join([ct] * len(args))}) __asm__("fs_lane_{cname}");',
           f'extern "C" {vt} {lib}({", ".join([vt] * len(args))});',
           f'extern "C" {hidden} {ct} fs_lane_{cname}({params(ct)}) {{',
           f"  {vt} " + ", ".join(f"v{a}" for a in args) + ";",
           # x in lane 0, 1 in the others: a lane's result depends on its value alone, and
           # a made-up 1 takes no slow path (x in every lane would take it n times)
           f"  for (int i = 0; i < {n}; ++i) {{ "
           + " ".join(f"v{a}[i] = i == 0 ? {a} : {ct}(1);" for a in args) + " }",
           f"  return {lib}({', '.join('v' + a for a in args)})[0];", "}"]
    for caller, cond in _CALLERS:
        m = _LANES[dt][caller]
        if m > 2 * n:
            continue      # (AVX-512 without AVX2: no such CPU; GCC would call nothing here)
        wt = _vtype(dt, m)
        out.append(f"#if {cond}")
        out.append(f'extern "C" {hidden} {wt} _ZGV{caller}N{m}{p}_fs_lane_{cname}({params(wt)}) {{')
        if m == n:
            out.append(f"  return {lib}({', '.join(args)});")
        elif m == 2 * n:
            # a wider caller (AVX-512's, where `one` is AVX2's): two calls, joined
            lo, hi = (", ".join(str(c + i) for i in range(n)) for c in (0, n))
            out += [f"  {vt} lo = {lib}("
                    + ", ".join(f"__builtin_shufflevector({a}, {a}, {lo})" for a in args) + ");",
                    f"  {vt} hi = {lib}("
                    + ", ".join(f"__builtin_shufflevector({a}, {a}, {hi})" for a in args) + ");",
                    "  return __builtin_shufflevector(lo, hi, "
                    + ", ".join(str(k) for k in range(m)) + ");"]
        else:
            # a narrower caller: its lanes repeated to the variant's width (every lane a
            # real argument, so no special path for a made-up value), the first ones kept
            rep = ", ".join(str(i % m) for i in range(n))
            out.append(f"  {vt} r = {lib}("
                       + ", ".join(f"__builtin_shufflevector({a}, {a}, {rep})" for a in args)
                       + ");")
            out.append("  return __builtin_shufflevector(r, r, "
                       + ", ".join(str(i) for i in range(m)) + ");")
        out += ["}", "#endif"]
    return out


def link_flags() -> tuple[str, ...]:
    """What the link needs for `declarations()`."""
    return ("-lmvec",) if available() else ()
