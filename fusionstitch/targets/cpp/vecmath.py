"""Vector math for the cpu target: glibc's libmvec.

A loop that calls a scalar C library function (`sinf`, `logf`, ...) does not
vectorise: the call runs once per element, 10-20x slower than the loop around it
(cartpole's kernel spent 99 ms of 100 ms in scalar `sinf`/`cosf`). glibc ships
vector variants of these functions in libmvec (`_ZGVdN8v_sinf` computes 8 floats
in AVX2 registers), the ones `-ffast-math` code calls. GCC calls them from a
vectorised loop when the scalar function is declared `simd`; we declare our own
names for them (`fs_mv_sinf`, bound to the symbol `sinf` with an asm label), so a
scalar call still goes to libm and only vectorised loops use the vector variants.

Measured on this machine (4M floats, one thread): sinf 43 -> 3.0 ms, logf 13.6 ->
3.1 ms, erff 80 -> 3.1 ms; the variants are within 4 ulp of the exact result
(sin, cos, log, tanh, erf within 2), handle NaN, infinities and huge arguments
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
UNARY = ("exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "tan", "tanh", "erf")
BINARY = ("pow",)
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


def declarations() -> str:
    """The C++ declarations of the `fs_mv_*` names (empty without libmvec)."""
    names = available()
    if not names:
        return ""
    lines = ["// glibc's libmvec: vectorised loops call its variants (_ZGVdN8v_sinf, ...),",
             "// scalar code the C library function itself (see targets/cpp/vecmath.py)"]
    for name in UNARY + BINARY:
        for dt in ("f32", "f64"):
            cname = name + _SUFFIX[dt]
            if cname in names:
                ct = _CTYPE[dt]
                params = f"{ct}, {ct}" if name in BINARY else ct
                lines.append(f'extern "C" __attribute__((simd("notinbranch"), const, nothrow, leaf)) '
                             f'{ct} fs_mv_{cname}({params}) __asm__("{cname}");')
    return "\n".join(lines) + "\n"


def link_flags() -> tuple[str, ...]:
    """What the link needs for `declarations()`."""
    return ("-lmvec",) if available() else ()
