"""Target `cpu`: C++ kernels (codegen/cpu*.py) compiled with the host's compiler."""
from __future__ import annotations

from .base import Language, Target


class CppTarget(Target):
    def render(self, kernel) -> str:
        from ..codegen.cpu import cpp_source
        return cpp_source(kernel)

    def build(self, kernels: list) -> list:
        from ..codegen.cpu import compile_cpu
        return compile_cpu(kernels)


# The recompute limit was measured on this target (cartpole 0.10x -> 2.1x eager,
# softmax_chain 0.26x -> 0.76x). The C++ printer has no GEMM stages: GEMMs stay library
# calls, so the plan the planner picks is the plan that runs.
CPU = CppTarget("cpu", generates_kernels=True, row_buffers=True, max_recompute=3.0,
                language=Language("C++", "cpp", "//"))
