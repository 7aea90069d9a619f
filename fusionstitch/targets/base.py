"""What a compilation target is: one object that fusion, the runtime and the report ask.

A `Target` names what differs between the places a plan can run: whether its code
generator makes kernels at all, what it can fuse (GEMM stages, row buffers), its
limits (recomputation, bytes a staged kernel may move), its cost-model device, and how
a lowered kernel (`codegen/kernel.py`'s `Kernel`) becomes source text (`render`) and a
callable (`build`). The planners receive a Target (a name is resolved once, by
`targets.resolve`); no other package keeps sets of target names. Each target is one
package (`cpp/`, `triton/`: the Target in its `__init__.py`, its printer and build beside
it) or module (`torch.py`), taking the target-neutral kernel IR from `codegen/`; a new
target (CUDA C through NVRTC) is a new folder.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Language:
    """How a target's kernel source is shown: its name, file extension, comment marker."""

    name: str
    ext: str
    comment: str


@dataclass(frozen=True, eq=False)
class Target:
    name: str
    # the cost-model entry (analysis/cost.py's DEVICES), None where none applies
    device: str | None = None
    # features: kernel groups become generated kernels (else plans run through torch);
    # GEMMs fuse into kernels (block composition, tl.dot); values are kept in row
    # buffers across a reduction's loops (targets/cpp/rowbuf.py), so re-reading them is not
    # recomputation
    generates_kernels: bool = False
    gemm_fusing: bool = False
    row_buffers: bool = False
    # limits: a fused kernel may recompute up to this factor of its parts' own ops
    # (XLA's code-duplication rule; None: no limit)
    max_recompute: float | None = None
    language: Language | None = None

    def __str__(self) -> str:     # messages name the target as they always did
        return self.name

    # -- the cost model and limits ------------------------------------------------------
    @property
    def device_spec(self):
        from ..analysis.cost import device_spec
        return device_spec(self.device or self.name)

    @property
    def staged_bytes(self) -> int:
        """Bytes one program may move in a staged kernel: what it moves within one launch
        latency at one program's bandwidth, so that the one launch it saves pays for
        running on one core. 0 on targets without block composition (cpu)."""
        if not self.gemm_fusing:
            return 0
        d = self.device_spec
        return int(d.launch_latency.value * d.program_bandwidth.value)

    # -- lowering ------------------------------------------------------------------------
    def can_lower(self, graph, nodes, lower: Callable | None = None) -> str:
        """'' when this target's code generator makes one kernel of `nodes` (in graph
        order), else why not. `lower(graph, nodes)`: the lowering to try (planning
        passes its memoised one); by default `lower`."""
        from ..codegen.lower import Unsupported
        from ..ir.ops import FUSIBLE_DOTS
        if not self.generates_kernels:
            return f"target {self.name!r} generates no kernels"
        if not self.gemm_fusing:
            dot = next((n for n in nodes if graph[n].op in FUSIBLE_DOTS), None)
            if dot is not None:
                return (f"%{dot} ({graph[dot].op}): the {self.name} code generator has no "
                        "GEMM stages (block composition); GEMMs are library calls there")
        try:
            (lower or self.lower)(graph, nodes)
        except Unsupported as e:
            return str(e)
        return ""

    def lower(self, graph, nodes, schedule=None):
        """The kernel IR of one group (raises codegen's Unsupported): target-neutral.
        `schedule`: the group's schedule as its plan carries it (`Group.schedule`); None
        for a group without a plan (codegen's `lower_group` decides it)."""
        from ..codegen import lower
        return lower.lower_group(graph, tuple(nodes), "kernel", schedule)

    def reused_values(self, component) -> list[frozenset[str]] | None:
        """Per loop of a reduce component, the variables this target's printer does not
        compute there (read back from a row buffer: `row_buffers`), for the recompute
        limit's count (`codegen.kernel.arithmetic_work`); None: all are computed."""
        return None

    def persistent_rule(self) -> Callable | None:
        """Which reduce components keep their row on chip (for `codegen.kernel.template`);
        None where none does."""
        return None

    def render(self, kernel) -> str:
        """The source this target prints for `kernel`, compiling nothing."""
        raise NotImplementedError(f"target {self.name!r} prints no kernel source")

    def build(self, kernels: list) -> list[Any]:
        """A callable per kernel (compiled and loaded); raises KernelBuildError."""
        raise NotImplementedError(f"target {self.name!r} builds no kernels")
