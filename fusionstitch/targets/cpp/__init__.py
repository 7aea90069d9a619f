"""Target `cpu`: C++ kernels compiled with the host's compiler.

The printer is `printer.py` (flat loops in `flat.py`, reduce loops in `reduce.py`, row
buffers `rowbuf.py`, index specialisation `index.py`, C types `dtypes.py`, the helper
preamble `preamble.py`, vector libm `vecmath.py`); compiling, the disk cache and loading
are `build.py`."""
from __future__ import annotations

from ...analysis.cost import DEVICES
from ..base import Language, Target


class CppTarget(Target):
    def reused_values(self, component):
        from .rowbuf import reused_values
        return reused_values(component)

    def render(self, kernel) -> str:
        from .printer import cpp_source
        return cpp_source(kernel)

    def prepare(self) -> None:
        from .pyentry import warm
        warm()      # the launch entry points' first build, beside planning

    def build(self, kernels: list) -> list:
        from .library import compile_cpu
        return compile_cpu(kernels)

    def toolchain(self) -> list[str]:
        from .build import compiler, toolchain
        try:
            version, arch = toolchain(compiler())
            return [f"cxx {version} {arch}"]
        except Exception as e:   # no compiler: no kernels to measure, but a stable key
            return [f"cxx none ({type(e).__name__})"]


# The recompute limit was measured on this target (cartpole 0.10x -> 2.1x eager,
# softmax_chain 0.26x -> 0.76x). The C++ printer has no GEMM stages: GEMMs stay library
# calls, so the plan the planner picks is the plan that runs. Convolutions run
# channels-last (oneDNN's faster layout; resnet_infer's six: 773 -> 640 us, one thread).
# Kernels are compiled with -ffp-contract=off: IEEE arithmetic has the same bits in any
# of them (exact_arithmetic).
CPU = CppTarget("cpu", cost_device=DEVICES["ci-epyc-2core"], device_type="cpu", auto=True,
                tunable=True, generates_kernels=True, row_buffers=True, scatter_kernels=True,
                exact_arithmetic=True, max_recompute=3.0,
                conv_layout="channels_last",
                language=Language("C++", "cpp", "//"))
