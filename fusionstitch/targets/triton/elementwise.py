"""The Triton text of one elementwise op of the kernel IR (targets/triton/printer.py
prints the rest): tl builtins, libdevice on the GPU, and on Triton's interpreter, which
has no libdevice, exact formulas from tl builtins (`MATH_INTERPRET`). Where torch's
result depends on the sign of zero or on rounding (negation, float floor division,
fmod), the text follows torch's algorithm, not the shortest spelling.

An op's text may name temporaries (`ElementwiseOps.temporary`), which the printer
assigns before the op's own line: a subexpression read several times (float floor
division reads its remainder four times) is computed once.
"""
from __future__ import annotations

from ...codegen.kernel import Op

TL_DTYPE = {"f64": "tl.float64", "f32": "tl.float32", "f16": "tl.float16",
            "bf16": "tl.bfloat16", "i64": "tl.int64", "i32": "tl.int32", "i16": "tl.int16",
            "i8": "tl.int8", "u8": "tl.uint8", "b8": "tl.int1"}

SIMPLE_UNARY = {"neg": "-{0}", "abs": "tl.abs({0})", "exp": "tl.exp({0})",
                "exp2": "tl.exp2({0})", "log": "tl.log({0})", "log2": "tl.log2({0})",
                "sin": "tl.sin({0})", "cos": "tl.cos({0})", "erf": "tl.erf({0})",
                "floor": "tl.floor({0})", "ceil": "tl.ceil({0})",
                "sigmoid": "1.0 / (1.0 + tl.exp(-{0}))", "reciprocal": "1.0 / {0}",
                "bitwise_not": "~{0}", "not": "{0} == 0", "isnan": "{0} != {0}",
                "isinf": "tl.abs({0}) == float('inf')"}
BINARY = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "truediv": "{0} / {1}",
          "eq": "{0} == {1}", "ne": "{0} != {1}", "lt": "{0} < {1}", "le": "{0} <= {1}",
          "gt": "{0} > {1}", "ge": "{0} >= {1}", "and": "{0} & {1}", "or": "{0} | {1}",
          "xor": "{0} ^ {1}", "bitwise_and": "{0} & {1}", "bitwise_or": "{0} | {1}",
          "bitwise_xor": "{0} ^ {1}", "lshift": "{0} << {1}", "rshift": "{0} >> {1}"}
# Exact formulas from tl builtins (the interpreter has no libdevice).
MATH_INTERPRET = {
    "sqrt": "tl.sqrt({0})",
    "rsqrt": "1.0 / tl.sqrt({0})",
    "log1p": "tl.where((({0} + 1.0) - 1.0 == 0.0) | ({0} == float('inf')), {0}, "
             "tl.log({0} + 1.0) * ({0} / (({0} + 1.0) - 1.0)))",
    # (small arguments: Kahan's (u - 1) x / log u, u = e^x, and a series for tanh: a
    # product by x, so that -0.0 gives -0.0 and a tiny x gives x; e^x - 1 alone loses
    # all the digits of a small x)
    "expm1": "tl.where(tl.abs({0}) < 0.5, tl.where(tl.exp({0}) == 1.0, {0}, (tl.exp({0}) - 1.0)"
             " * {0} / tl.log(tl.exp({0}))), tl.exp({0}) - 1.0)",
    "tanh": "tl.where(tl.abs({0}) < 0.25, {0} * (1.0 + {0} * {0} * (-1.0 / 3.0 + {0} * {0} * "
            "(2.0 / 15.0 + {0} * {0} * (-17.0 / 315.0 + {0} * {0} * (62.0 / 2835.0))))), "
            "2.0 / (1.0 + tl.exp(-2.0 * {0})) - 1.0)",
    "tan": "tl.sin({0}) / tl.cos({0})",
    "trunc": "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))",
    # (a zero result takes x's sign: round(-0.3) is -0.0)
    "round": "tl.where(tl.abs({0}) <= 0.5, {0} * 0.0, tl.where(tl.abs({0} - tl.floor({0}) - 0.5)"
             " == 0.0, 2.0 * tl.floor({0} * 0.5 + 0.5), tl.floor({0} + 0.5)))",
    "pow": "tl.where({1} == 0, 1.0, tl.where({0} < 0, tl.where({1} == tl.floor({1}), "
           "(1.0 - 2.0 * (tl.abs({1}) - 2.0 * tl.floor(tl.abs({1}) * 0.5))) * "
           "tl.exp2({1} * tl.log2(-{0})), float('nan')), tl.exp2({1} * tl.log2({0}))))",
    # (an infinite divisor leaves a finite x as it is; a zero result has x's sign)
    "fmod": "tl.where((tl.abs({1}) == float('inf')) & (tl.abs({0}) != float('inf')), {0}, "
            "tl.where({0} - tl.where({0} / {1} < 0, tl.ceil({0} / {1}), tl.floor({0} / {1})) * "
            "{1} == 0, {0} * 0.0, {0} - tl.where({0} / {1} < 0, tl.ceil({0} / {1}), "
            "tl.floor({0} / {1})) * {1}))",
}
MATH_GPU = {
    "sqrt": "tl.sqrt_rn({0})", "rsqrt": "libdevice.rsqrt({0})", "log1p": "libdevice.log1p({0})",
    "expm1": "libdevice.expm1({0})", "tanh": "libdevice.tanh({0})", "tan": "libdevice.tan({0})",
    "trunc": "libdevice.trunc({0})", "round": "libdevice.nearbyint({0})",
    "pow": "libdevice.pow({0}, {1})", "fmod": "libdevice.fmod({0}, {1})",
}
# libdevice's functions of the same name (none of them in the interpreter: the interpret
# target's missing_ops)
MATH_GPU.update({op: f"libdevice.{op}({{0}})" for op in
                  "asin acos atan sinh cosh asinh acosh atanh erfc log10".split()})
MATH_GPU.update({op: f"libdevice.{op}({{0}}, {{1}})" for op in ("atan2", "hypot", "copysign")})


class ElementwiseOps:
    """The op printing of `targets/triton/printer._Printer`, which provides `interpret`,
    `dtype` (variable -> IR dtype), `temporaries` (the list `temporary` adds to, which
    the printer empties after each op) and `temporary_count` (names given so far)."""

    def temporary(self, text: str) -> str:
        """A name for `text`, assigned before the current op's line (each name once in
        the kernel: a name assigned in a loop and before it would be loop-carried)."""
        self.temporary_count += 1
        name = f"_t{self.temporary_count}"
        self.temporaries.append((name, text))
        return name

    def op(self, s: Op) -> str:
        a = s.args
        dt = s.dtype
        is_float = dt.startswith("f") or dt == "bf16"
        if s.op == "cast":
            if dt == "b8":
                return f"{a[0]} != 0"
            if dt == "bf16" and self.interpret:
                # the interpreter's float -> bfloat16 drops the low bits and flushes
                # subnormals (numpy has no bfloat16): round to nearest even on the float's
                # bits, as c10 does (NaN becomes 0x7FC0), and take the top half as the bits
                # (f64 and integer sources round to f32 first: a double rounding, off only
                # within 2^-29 relative of a bf16 tie; integers are otherwise reinterpreted)
                f = f"{a[0]}.to(tl.float32)"
                b = f"{f}.to(tl.uint32, bitcast=True)"
                r = f"(({b} + 0x7FFF + (({b} >> 16) & 1)) >> 16)"
                return (f"tl.where({f} != {f}, 0x7FC0, {r}).to(tl.uint16)"
                        ".to(tl.bfloat16, bitcast=True)")
            if self.interpret and self.dtype.get(a[0]) == "bf16" and dt != "bf16":
                # and its bfloat16 -> float flushes subnormals: the bits, shifted up
                up = (f"({a[0]}.to(tl.uint16, bitcast=True).to(tl.uint32) << 16)"
                      ".to(tl.float32, bitcast=True)")
                return up if dt == "f32" else f"{up}.to({TL_DTYPE[dt]})"
            return f"{a[0]}.to({TL_DTYPE[dt]})"
        if s.op == "neg" and is_float:
            # Triton's unary minus is 0 - x, which gives +0.0 for +0.0 (IEEE negation and
            # torch's neg give -0.0: copysign, atan2 and 1/x read the sign); the product
            # by -1 is exact and flips every sign, a NaN's included
            return f"({a[0]} * -1.0)"
        if s.op == "sign":
            return (f"tl.where({a[0]} != {a[0]}, {a[0]}, ({a[0]} > 0).to({TL_DTYPE[dt]}) - "
                    f"({a[0]} < 0).to({TL_DTYPE[dt]}))")
        if s.op in ("maximum", "minimum"):
            fn = "tl.maximum" if s.op == "maximum" else "tl.minimum"
            nan = ", propagate_nan=tl.PropagateNan.ALL" if is_float else ""
            return f"{fn}({a[0]}, {a[1]}{nan})"
        if s.op == "where":
            return f"tl.where({a[0]}, {a[1]}, {a[2]})"
        if s.op == "check_index":
            # a GPU kernel cannot raise: an index out of range reads element 0 of its dim
            # instead of memory outside the tensor (kernel.py's check_index)
            return f"tl.where(({a[0]} >= 0) & ({a[0]} < {a[1]}), {a[0]}, 0)"
        if s.op in ("floordiv", "remainder", "fmod") and not is_float:
            return self.int_division(s.op, a[0], a[1], TL_DTYPE[dt])
        if s.op == "floordiv":
            return self.float_floordiv(a[0], a[1])
        if s.op == "remainder":
            base = self.temporary(self.math("fmod", a))
            return (f"tl.where(({base} != 0) & (({base} < 0) != ({a[1]} < 0)), "
                    f"{base} + {a[1]}, {base})")
        if s.op in SIMPLE_UNARY:
            return SIMPLE_UNARY[s.op].format(*a)
        if s.op in BINARY:
            return BINARY[s.op].format(*a)
        return self.math(s.op, a)

    @staticmethod
    def int_division(op: str, x: str, y: str, tl_dtype: str) -> str:
        """Integer floordiv / remainder / fmod as torch's, and 0 for a zero divisor (what
        eager CUDA's floor_divide gives; the cpu target raises as eager CPU does): the
        divisor 0 becomes 1 before dividing, since a division by zero is undefined in the
        GPU's code, then the result is multiplied by (divisor != 0)."""
        d = f"({y} + ({y} == 0).to({tl_dtype}))"
        if op == "floordiv":
            q = (f"{x} // {d} - (({x} % {d} != 0) & "
                 f"(({x} < 0) != ({d} < 0))).to({tl_dtype})")
        else:
            q = f"{x} % {d}"
            if op == "remainder":
                q = f"tl.where(({q} != 0) & (({q} < 0) != ({d} < 0)), {q} + {d}, {q})"
        return f"({q}) * ({y} != 0).to({tl_dtype})"

    def interpret_fmod_f32(self, x: str, y: str) -> str:
        """fmod of f32 values exactly (the interpreter has no libdevice): in f64, where
        x - trunc(x / y) * y of f32 operands is exact while the quotient is below 2^29,
        then brought into [0, |y|) (or (-|y|, 0] for a negative x) where the rounded
        quotient was one off (fmod(1.0, 0.1): the formula in f32 gave -1.5e-8, the
        remainder is 0.09999999). Infinite y leaves a finite x; a zero result has x's
        sign."""
        t = self.temporary
        x64, y64 = t(f"{x}.to(tl.float64)"), t(f"{y}.to(tl.float64)")
        q = t(f"{x64} / {y64}")
        r = t(f"{x64} - tl.where({q} < 0, tl.ceil({q}), tl.floor({q})) * {y64}")
        ay = t(f"tl.abs({y64})")
        r = t(f"tl.where({x64} >= 0, tl.where({r} < 0, {r} + {ay}, tl.where({r} >= {ay}, "
              f"{r} - {ay}, {r})), tl.where({r} > 0, {r} - {ay}, tl.where({r} <= -{ay}, "
              f"{r} + {ay}, {r})))")
        r = t(f"tl.where((tl.abs({y}) == float('inf')) & (tl.abs({x}) != float('inf')), "
              f"{x64}, {r})")
        return f"tl.where({r} == 0, {x} * 0.0, {r}.to(tl.float32))"

    def float_floordiv(self, x: str, y: str) -> str:
        """Floor division of floats as torch's (c10's div_floor_floating): from the
        remainder, not floor(x / y), whose rounded quotient can be the next integer
        (1.0 // 0.1 is 9 in torch, floor(1.0 / 0.1) is 10) and which gives -0.0 for
        -2 // inf (torch: -1); a zero quotient takes the sign of x / y, a zero divisor
        gives x / y."""
        t = self.temporary
        mod = t(self.math("fmod", (x, y)))
        div = t(f"({x} - {mod}) / {y}")
        div = t(f"tl.where(({mod} != 0) & (({y} < 0) != ({mod} < 0)), {div} - 1.0, {div})")
        fl = t(f"tl.floor({div})")
        fl = t(f"tl.where({div} - {fl} > 0.5, {fl} + 1.0, {fl})")
        return (f"tl.where({y} == 0, {x} / {y}, tl.where({div} == 0, ({x} / {y}) * 0.0, "
                f"{fl}))")

    def math(self, op: str, a) -> str:
        table = MATH_INTERPRET if self.interpret else MATH_GPU
        if op == "fmod" and self.interpret and all(self.dtype.get(v) == "f32" for v in a):
            return self.interpret_fmod_f32(*a)
        if op not in table:
            raise NotImplementedError(f"triton printer: no rule for {op}")
        return "(" + table[op].format(*a) + ")"
