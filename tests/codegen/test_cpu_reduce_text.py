"""Kernel text of the cpu target's reduce orders (targets/cpp/reduce.py): IR text in, C++
out. Each case parses a small graph, lowers it into one kernel and pins the part of the
printed C++ that the order decides (the dense version of its component)."""
import os
from unittest import mock

import expecttest

from fusionstitch.codegen.lower import lower_group
from fusionstitch.ir.graph import CONSTANT, PARAMETER
from fusionstitch.ir.text import parse
from fusionstitch.targets.cpp.printer import cpp_source

# var over contiguous rows of 12 (TINY_R < 12 <= SHORT_ROW): blocks of rows, SIMD along r
VAR_ROWS_OF_12 = """
graph v(%x: f32[64,12]) {
  %var: f32[64,1] = var.correction(%x, [1], correction=1, keepdim=True)
  %sub: f32[64,12] = sub.Tensor(%x, %var)
  return (%sub, %var)
}
"""

# a column sum (r strided, x contiguous): float blocks of rows added up in double
COLUMN_SUM = """
graph s(%x: f32[100,64]) {
  %sum_1: f32[64] = sum.dim_IntList(%x, [0])
  return (%sum_1,)
}
"""


def source(text: str) -> str:
    g = parse(text)
    ops = [n.name for n in g.nodes if n.op not in (PARAMETER, CONSTANT)]
    with mock.patch.dict(os.environ, {"FUSIONSTITCH_CPU_VECMATH": "0"}):
        return cpp_source(lower_group(g, ops, "k"), "fs_k")


def between(text: str, start: str, end: str) -> str:
    """The lines of `text` from the one holding `start` to the one before `end` (the
    first after it), dedented."""
    import textwrap
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if start in line)
    j = next(k for k in range(i + 1, len(lines)) if end in lines[k])
    return textwrap.dedent("\n".join(lines[i:j])) + "\n"


class TestReduceText(expecttest.TestCase):
    def test_rows_of_12_run_in_blocks_of_16_rows_simd_along_r(self):
        """The `rnumel == 12` version: blocks of ROWS_BLOCK rows; the pivot once per block
        as a lane array; each row's loop over r a SIMD loop reducing into a scalar, stored
        into the block's accumulator array."""
        src = source(VAR_ROWS_OF_12)
        self.assertExpectedInline(between(src, "if (rnumel == 12) {", "// loop 1:"), """\
if (rnumel == 12) {
    const int64_t rnumel = 12;  // shadows: known trips
    // columns: blocks of 16 x, each x's r inside, SIMD along r
    const int64_t xblocks = (xnumel + 15) / 16;
    for (int64_t xb = 0; xb < xblocks; ++xb) {
        const int64_t x0 = xb * 16;
        const int64_t xn = xnumel - x0 < 16 ? xnumel - x0 : 16;
        // loop 0: what does not vary with r, once per block
        float ld3[16];
        float v6[16];
        #pragma omp simd
        for (int64_t xl = 0; xl < xn; ++xl) {
            const int64_t x = x0 + xl;
            const bool xmask = true;
            const bool rmask = true;
            const float c5 = 0.0f;
            const bool v1 = xmask & rmask;
            const float ld3_1 = xmask ? in0[12 * x] : 0.0f;
            const bool v4 = __builtin_isinf(ld3_1);
            const float v6_1 = v4 ? c5 : ld3_1;
            ld3[xl] = ld3_1;
            v6[xl] = v6_1;
        }
        float red10_acc[16];
        for (int64_t xl = 0; xl < xn; ++xl) { red10_acc[xl] = 0; }
        // loop 0 over r
        for (int64_t xl = 0; xl < xn; ++xl) {
            const int64_t x = x0 + xl;
            const bool xmask = true;
            const bool rmask = true;
            const float ld3_1 = ld3[xl];
            const float v6_1 = v6[xl];
            float red10_row = 0;
            #pragma omp simd reduction(+:red10_row)
            for (int64_t r = 0; r < rnumel; ++r) {
                const float c5 = 0.0f;
                const bool v1 = xmask & rmask;
                const float ld2 = v1 ? in0[(12 * x) + r] : 0.0f;
                const bool v4 = __builtin_isinf(ld3_1);
                const float v7 = ld2 - v6_1;
                const float v9 = v1 ? v7 : c5;
                red10_row += v9;
            }
            red10_acc[xl] = red10_row;
        }
        float red10_1[16];
        for (int64_t xl = 0; xl < xn; ++xl) red10_1[xl] = (float)red10_acc[xl];
""")

    def test_column_sums_add_float_blocks_of_rows_in_double(self):
        """Column order: r in blocks of COLUMN_SUM_BLOCK rows, a float partial sum per
        column and block, added into the double accumulator after each block."""
        src = source(COLUMN_SUM)
        dense = src[src.index("// dense"):]
        self.assertExpectedInline(between(dense, "// loop 0 over r", "// per x"), """\
// loop 0 over r
for (int64_t rb = 0; rb < rnumel; rb += 32) {
    const int64_t rb_end = rnumel - rb < 32 ? rnumel : rb + 32;
    float red5_part[64];
    for (int64_t xl = 0; xl < xn; ++xl) red5_part[xl] = 0.0f;
    for (int64_t r = rb; r < rb_end; ++r) {
        #pragma omp simd
        for (int64_t xl = 0; xl < xn; ++xl) {
            const int64_t x = x0 + xl;
            const bool xmask = true;
            const bool rmask = true;
            const float c3 = 0.0f;
            const bool v1 = xmask & rmask;
            const float ld2 = v1 ? in0[(64 * r) + x] : 0.0f;
            const float v4 = v1 ? ld2 : c3;
            red5_part[xl] += v4;
        }
    }
    for (int64_t xl = 0; xl < xn; ++xl) red5_acc[xl] += red5_part[xl];
}
float red5_1[64];
for (int64_t xl = 0; xl < xn; ++xl) red5_1[xl] = (float)red5_acc[xl];
""")


if __name__ == "__main__":
    from torch.testing._internal.common_utils import run_tests
    run_tests()
