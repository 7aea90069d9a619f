"""Targets `cuda` and `interpret`: Triton kernels (targets/triton/printer.py, codegen/batch.py,
targets/triton/split.py), on the GPU or in Triton's interpreter on CPU tensors."""
from __future__ import annotations

from dataclasses import dataclass

from ...analysis.cost import DEVICES
from ..base import Language, Target


@dataclass(frozen=True, eq=False)
class TritonTarget(Target):
    interpret: bool = False

    def persistent_rule(self):
        from .printer import reduce_schedule
        return lambda c: reduce_schedule(c, self.interpret)

    def render(self, kernel) -> str:
        from .printer import triton_source
        return triton_source(kernel, interpret=self.interpret)[1]

    def build(self, kernels: list) -> list:
        from .printer import TritonKernel
        return [TritonKernel(k, interpret=self.interpret) for k in kernels]

    def toolchain(self) -> list[str]:
        try:
            import triton
            parts = [f"triton {triton.__version__}"]
        except ImportError:
            parts = ["triton none"]
        if self.device_type == "cuda":
            import torch
            if torch.cuda.is_available():
                parts.append(f"gpu {torch.cuda.get_device_name()}")
        return parts


_TRITON = Language("Triton", "py", "#")
# kernel ops with a GPU form (libdevice) but no formula from tl builtins, which is all the
# interpreter has (elementwise.py's MATH_INTERPRET): kernels holding one are refused there,
# and the ops run through torch, counted
_NO_INTERPRET = frozenset("asin acos atan sinh cosh asinh acosh atanh erfc log10 atan2 "
                          "hypot copysign".split())
# GEMMs fuse through the printer's dot stages (tl.dot); GPUs have arithmetic to spare,
# so no recompute limit (not measured yet). The interpreter runs the GPU plan (its cost
# model) on CPU tensors; its times say nothing of a GPU (not tunable).
CUDA = TritonTarget("cuda", cost_device=DEVICES["h100-sxm"], device_type="cuda", auto=True,
                    host_twin="interpret", supports_cuda_graphs=True, tunable=True,
                    generates_kernels=True, gemm_fusing=True, language=_TRITON)
# (the interpreter has no libdevice: the inverse trigonometric and hyperbolic functions,
# erfc, log10, atan2, hypot and copysign have no form there)
INTERPRET = TritonTarget("interpret", cost_device=DEVICES["h100-sxm"], device_type="cpu",
                         generates_kernels=True, gemm_fusing=True, language=_TRITON,
                         interpret=True, missing_ops=_NO_INTERPRET)
