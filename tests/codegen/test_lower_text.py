"""Lowering and printing per module, not end to end: IR text in, kernel text out.

Each case parses a small graph (`ir/text.py`), lowers all of its ops into one kernel
(`codegen/lower.lower_group`) and compares the kernel IR (`codegen/kernel.kernel_text`)
and, for one case, the C++ the cpu printer makes of it (`targets/cpp/printer.cpp_source`) with
the text written here. A change to lowering or printing shows as a readable diff;
`EXPECTTEST_ACCEPT=1 pytest tests/codegen/test_lower_text.py` rewrites the expected
text in this file after an intended change. The zoo-sized goldens are
`test_golden_sources.py`'s.
"""
import expecttest

from fusionstitch.codegen.kernel import kernel_text
from fusionstitch.codegen.lower import lower_group
from fusionstitch.ir.graph import CONSTANT, PARAMETER
from fusionstitch.ir.text import parse

POINTWISE = """
graph pointwise(%x: f32[4,8], %y: f32[8]) {
  %mul: f32[4,8] = mul.Tensor(%x, 2.0)
  %add: f32[4,8] = add.Tensor(%mul, %y)
  %relu: f32[4,8] = relu.default(%add)
  return (%relu,)
}
"""

SOFTMAX = """
graph softmax(%x: f32[4,8]) {
  %amax: f32[4,1] = amax.default(%x, [-1], True)
  %sub: f32[4,8] = sub.Tensor(%x, %amax)
  %exp: f32[4,8] = exp.default(%sub)
  %sum_1: f32[4,1] = sum.dim_IntList(%exp, [-1], True)
  %div: f32[4,8] = div.Tensor(%exp, %sum_1)
  return (%div,)
}
"""


def lowered(text: str):
    g = parse(text)
    ops = [n.name for n in g.nodes if n.op not in (PARAMETER, CONSTANT)]
    return lower_group(g, ops, "k")


class TestLowerText(expecttest.TestCase):
    def test_pointwise_kernel_ir(self):
        self.assertExpectedInline(kernel_text(lowered(POINTWISE)), """\
kernel k(in0, in1, out0; ks0, ks1, ks5, in0_s0, in0_s1, in1_s0) index i32
  in in0 = %x: f32[4, 8]
  in in1 = %y: f32[8]
  out out0 = %relu: f32[4, 8]
  component 0: flat x < ks5
    ld1: f32 = load in0[((x // ks1) * in0_s0) + ((x % ks1) * in0_s1)], mask=xmask
    c2: f32 = 2.0
    v3: f32 = mul(ld1, c2)
    ld4: f32 = load in1[(x % ks1) * in1_s0], mask=xmask
    v5: f32 = add(v3, ld4)
    c6: f32 = 0.0
    v7: f32 = maximum(v5, c6)
    store out0[((x // ks1) * ks1) + (x % ks1)] = v7, mask=xmask""")

    def test_softmax_kernel_ir(self):
        self.assertExpectedInline(kernel_text(lowered(SOFTMAX)), """\
kernel k(in0, out0; ks0, ks1, in0_s0, in0_s1) index i32
  in in0 = %x: f32[4, 8]
  out out0 = %div: f32[4, 8]
  component 0: reduce x < ks0, r < ks1
    loop 0 over r:
      v1: b8 = and(xmask, rmask)
      ld2: f32 = load in0[(x * in0_s0) + (r * in0_s1)], mask=v1
      c3: f32 = -inf
      v4: f32 = where(v1, ld2, c3)
      red5: f32 = reduce_max(v4) over r
    loop 1 over r:
      v6: b8 = and(xmask, rmask)
      ld7: f32 = load in0[(x * in0_s0) + (r * in0_s1)], mask=v6
      v8: f32 = sub(ld7, red5)
      v9: f32 = exp(v8)
      c10: f32 = 0.0
      v11: f32 = where(v6, v9, c10)
      red12: f32 = reduce_sum(v11) over r
    loop 2 over r:
      v17: b8 = and(xmask, rmask)
      ld18: f32 = load in0[(x * in0_s0) + (r * in0_s1)], mask=v17
      v19: f32 = sub(ld18, red5)
      v20: f32 = exp(v19)
      v21: f32 = truediv(v20, red12)
      store out0[(x * ks1) + r] = v21, mask=v17
    per x:""")

    def test_pointwise_cpp(self):
        import os
        from unittest import mock

        from fusionstitch.targets.cpp.printer import cpp_source
        with mock.patch.dict(os.environ, {"FUSIONSTITCH_CPU_VECMATH": "0"}):
            self.assertExpectedInline(cpp_source(lowered(POINTWISE), "fs_k"), """\
// kernel k: 3 buffers, 6 syms, 1 component(s)
extern "C" void fs_k(
    const float* __restrict__ in0,
    const float* __restrict__ in1,
    float* __restrict__ out0,
    int64_t /* ks0 = 4 */,
    int64_t /* ks1 = 8 */,
    int64_t /* ks5 = 32 */,
    int64_t in0_s0,
    int64_t in0_s1,
    int64_t in1_s0) {
    constexpr int64_t ks0 = 4;
    constexpr int64_t ks1 = 8;
    constexpr int64_t ks5 = 32;
    // component 0: flat, x < ks5
    {
        const int64_t xnumel = ks5;
        if (in0_s0 == ks1 && in0_s1 == 1 && in1_s0 == 1) {  // dense: the expected strides
            #pragma omp simd
            for (int64_t x = 0; x < xnumel; ++x) {
                const bool xmask = true;
                const float ld1 = xmask ? in0[x] : 0.0f;
                const float c2 = 2.0f;
                const float v3 = ld1 * c2;
                const float ld4 = xmask ? in1[x % ks1] : 0.0f;
                const float v5 = v3 + ld4;
                const float c6 = 0.0f;
                const float v7 = v5 < c6 ? c6 : v5;
                if (xmask) out0[x] = v7;
            }
        } else {
            const int64_t xinner = ks1 > 0 ? ks1 : 1;  // x = xo * xinner + xi
            const int64_t xouter = (xnumel + xinner - 1) / xinner;
            const int64_t xblocks = (xinner + 4095) / 4096;
            for (int64_t xblock = 0; xblock < xouter * xblocks; ++xblock) {
                const int64_t xo = xblocks == 1 ? xblock : xblock / xblocks;
                const int64_t xi_begin = xblocks == 1 ? 0 : (xblock % xblocks) * 4096;
                int64_t xi_end = xi_begin + 4096 < xinner ? xi_begin + 4096 : xinner;
                if (xi_end > xnumel - xo * xinner) xi_end = xnumel - xo * xinner;
                const int64_t xoff = xo * in0_s0;
                const int64_t xoff_1 = xo * ks1;
                #pragma omp simd
                for (int64_t xi = xi_begin; xi < xi_end; ++xi) {
                    const int64_t x = xo * xinner + xi;
                    const bool xmask = true;
                    const float ld1 = xmask ? in0[xoff + xi * in0_s1] : 0.0f;
                    const float c2 = 2.0f;
                    const float v3 = ld1 * c2;
                    const float ld4 = xmask ? in1[xi * in1_s0] : 0.0f;
                    const float v5 = v3 + ld4;
                    const float c6 = 0.0f;
                    const float v7 = v5 < c6 ? c6 : v5;
                    if (xmask) out0[xoff_1 + xi] = v7;
                }
            }
        }
    }
}
""")
