"""Types of the cpu target: IR dtypes as C types, the limits reductions start from and
their accumulators' types."""
from __future__ import annotations

from .build import CannotPrint

CTYPE = {"f64": "double", "f32": "float", "f16": "float", "bf16": "float",
          "i64": "int64_t", "i32": "int32_t", "i16": "int16_t", "i8": "int8_t",
          "u8": "uint8_t", "b8": "bool"}
STORAGE = dict(CTYPE, f16="uint16_t", bf16="uint16_t")
FLOATS = frozenset({"f64", "f32", "f16", "bf16"})
HALVES = frozenset({"f16", "bf16"})
INTS = frozenset({"i64", "i32", "i16", "i8", "u8"})
WIDE_UNSIGNED = {"i64": "uint64_t", "i32": "uint32_t", "i16": "uint32_t", "i8": "uint32_t",
                  "u8": "uint32_t"}


def ctype(dtype: str) -> str:
    try:
        return CTYPE[dtype]
    except KeyError:
        raise CannotPrint(f"cpu backend: unsupported dtype {dtype!r}") from None


INT_LIMITS = {"i64": ("INT64_MIN", "INT64_MAX"), "i32": ("INT32_MIN", "INT32_MAX"),
               "i16": ("INT16_MIN", "INT16_MAX"), "i8": ("INT8_MIN", "INT8_MAX"),
               "u8": ("0", "UINT8_MAX")}
REDUCE_INIT_FLOAT = {"sum": "0", "prod": "1", "max": "-fs::inf", "min": "fs::inf"}

# the OpenMP reduction clause of each reduction kind
REDUCE_CLAUSE = {"sum": "+", "prod": "*", "max": "max", "min": "min"}


def acc_type(red, short: bool) -> tuple[str, str]:
    """(C type, initial value) of a reduction's accumulator; `short`: it adds at most
    as many float terms as a SIMD lane of the row order's SUM_BLOCK (float sums then stay
    in float)."""
    dt = red.dtype
    if red.kind not in REDUCE_CLAUSE:
        raise CannotPrint(f"cpu backend: unknown reduction {red.kind!r}")
    if dt == "b8":
        return "bool", {"sum": "false", "prod": "true", "max": "false", "min": "true"}[red.kind]
    if dt in FLOATS:
        # float sums accumulate in double: a row of 1e5 elements summed in float drifts
        # ~1e-3 from the exact value, far more than torch's pairwise sums
        return ("double" if red.kind == "sum" and not short else ctype(dt),
                REDUCE_INIT_FLOAT[red.kind])
    if red.kind in ("sum", "prod"):
        return WIDE_UNSIGNED[dt], "0" if red.kind == "sum" else "1"      # wraps
    return ctype(dt), INT_LIMITS[dt][0 if red.kind == "max" else 1]


# a bool reduction's operator (any for sum and max, all for prod and min)
BOOL_REDUCE_OP = {"sum": "|", "max": "|", "prod": "&", "min": "&"}


def reduce_step(kind: str, dtype: str, acc: str, v: str) -> str:
    """The C statement adding value `v` into accumulator `acc` of a `kind` reduction of
    `dtype` (an integer `v` already in the accumulator's wide unsigned type): a loop's
    step, and a step of the lanes' tree (row_lanes.py). NaN flags are the caller's."""
    if dtype == "b8":
        return f"{acc} = {acc} {BOOL_REDUCE_OP[kind]} {v};"
    if kind in ("sum", "prod"):
        return f"{acc} {'+=' if kind == 'sum' else '*='} {v};"
    return f"{acc} = {v} {'>' if kind == 'max' else '<'} {acc} ? {v} : {acc};"
