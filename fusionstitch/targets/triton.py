"""Targets `cuda` and `interpret`: Triton kernels (codegen/triton.py, codegen/batch.py,
codegen/split.py), on the GPU or in Triton's interpreter on CPU tensors."""
from __future__ import annotations

from dataclasses import dataclass

from .base import Language, Target


@dataclass(frozen=True, eq=False)
class TritonTarget(Target):
    interpret: bool = False

    def persistent_rule(self):
        from ..codegen.triton import reduce_schedule
        return lambda c: reduce_schedule(c, self.interpret)

    def render(self, kernel) -> str:
        from ..codegen.triton import triton_source
        return triton_source(kernel, interpret=self.interpret)[1]

    def build(self, kernels: list) -> list:
        from ..codegen.triton import TritonKernel
        return [TritonKernel(k, interpret=self.interpret) for k in kernels]


_TRITON = Language("Triton", "py", "#")
# GEMMs fuse through the printer's dot stages (tl.dot); GPUs have arithmetic to spare,
# so no recompute limit (not measured yet). The interpreter runs the GPU plan.
CUDA = TritonTarget("cuda", generates_kernels=True, gemm_fusing=True, language=_TRITON)
INTERPRET = TritonTarget("interpret", device="cuda", generates_kernels=True,
                         gemm_fusing=True, language=_TRITON, interpret=True)
