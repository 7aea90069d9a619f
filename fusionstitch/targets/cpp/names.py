"""C identifiers and literals of the C++ printer (targets/cpp/printer.py).

- `Names`: IR names -> unique C identifiers, none a C++ keyword or a name the generated
  code uses itself (`CXX_KEYWORDS`);
- `literal`, `float_literal`: a constant of an IR dtype as C source (a float rounded to
  its dtype first; NaN and inf through the preamble's `fs::nan`, `fs::inf`).
"""
from __future__ import annotations

import math
import re
import struct

from .dtypes import FLOATS


# ---------------------------------------------------------------------------
# names

CXX_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
char16_t char32_t class compl concept const consteval constexpr constinit const_cast
continue co_await co_return co_yield decltype default delete do double dynamic_cast else
enum explicit export extern false float for friend goto if inline int long mutable
namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast requires return short signed sizeof static static_assert
static_cast struct switch template this thread_local throw true try typedef typeid
typename union unsigned using virtual void volatile wchar_t while xor xor_eq
fs std NAN INFINITY INT8_MIN INT8_MAX INT16_MIN INT16_MAX INT32_MIN INT32_MAX INT64_MIN
INT64_MAX UINT8_MAX int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
x r xnumel rnumel xmask rmask main xo xi xinner xouter xblocks xblock xi_begin xi_end
fs_error fs_bad
""".split())


class Names:
    """IR names -> unique C identifiers (kept as they are where that is legal).
    Buffers, syms and variables are separate name spaces in the IR, not in C."""

    def __init__(self):
        self.used = set(CXX_KEYWORDS)
        self.map: dict[tuple[str, str], str] = {}

    def fresh(self, want: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", want) or "v"
        if base[0].isdigit():
            base = "v_" + base
        if base.startswith("__") or re.match(r"_[A-Z]", base):
            base = "v" + base
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name

    def get(self, space: str, ir_name: str) -> str:
        key = (space, ir_name)
        if key not in self.map:
            self.map[key] = self.fresh(ir_name)
        return self.map[key]


# ---------------------------------------------------------------------------
# constants


def float_literal(value: float, dtype: str) -> str:
    v = float(value)
    if dtype in ("f32", "f16", "bf16"):
        try:
            v = struct.unpack("<f", struct.pack("<f", v))[0]
        except OverflowError:
            v = math.copysign(math.inf, v)
        if dtype == "f16":
            try:
                v = struct.unpack("<e", struct.pack("<e", v))[0]
            except OverflowError:
                v = math.copysign(math.inf, v)
        elif dtype == "bf16" and math.isfinite(v):
            u = struct.unpack("<I", struct.pack("<f", v))[0]
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
            v = struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]
    if math.isnan(v):
        return "fs::nan"
    if math.isinf(v):
        return "fs::inf" if v > 0 else "-fs::inf"
    text = repr(v)
    return text if dtype == "f64" else text + "f"


def literal(value, dtype: str) -> str:
    if dtype == "b8":
        return "true" if value else "false"
    if dtype in FLOATS:
        return float_literal(value, dtype)
    v = int(value)
    return "INT64_MIN" if dtype == "i64" and v == -2**63 else str(v)


# ---------------------------------------------------------------------------
# the printer
