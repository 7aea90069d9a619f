"""What a compilation target is: one object that fusion, the runtime and the report ask.

A `Target` names what differs between the places a plan can run: whether its code
generator makes kernels at all, what it can fuse (GEMM stages, row buffers), its
limits (recomputation, bytes a staged kernel may move), its cost-model device, where it
runs (the torch device type of its tensors, whether `auto` picks it there, CUDA graphs),
and how a lowered kernel (`codegen/kernel.py`'s `Kernel`) becomes source text (`render`)
and a callable (`build`). The planners receive a Target (a name is resolved once, by
`targets.resolve`); no other package keeps sets of target names: the options, the CLI,
the cost model, the tuner and the runtime ask the registry (`targets.TARGETS`) or the
Target. Each target is one package (`cpp/`, `triton/`: the Target in its `__init__.py`,
its printer and build beside it) or module (`torch.py`), taking the target-neutral
kernel IR from `codegen/`; a new target (CUDA C through NVRTC) is a new folder and its
entry in the registry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..analysis.cost import DeviceSpec


@dataclass(frozen=True)
class Language:
    """How a target's kernel source is shown: its name, file extension, comment marker."""

    name: str
    ext: str
    comment: str


@dataclass(frozen=True, eq=False)
class Target:
    name: str
    # the cost-model device (one of analysis/cost.py's DEVICES) planning scores with;
    # None where none applies (torch plans nothing)
    cost_device: DeviceSpec | None = None
    # where it runs: the torch device type of the tensors its programs take (None: any);
    # `target="auto"` picks, for inputs on a device type, the target marked `auto` there;
    # a target that is not `selectable` is internal (torch: explain's executor), never a
    # value of `target=`; `host_twin` names the target that runs its kernels on CPU tensors
    # (the debug folder's repro runs there; None: itself)
    device_type: str | None = None
    auto: bool = False
    selectable: bool = True
    host_twin: str | None = None
    # a Program may be captured and replayed as a CUDA graph (runtime/cudagraph.py);
    # its kernels' measured times are worth keeping in the performance library (tune/:
    # not the interpreter's, which say nothing of a GPU)
    supports_cuda_graphs: bool = False
    tunable: bool = False
    # features: kernel groups become generated kernels (else plans run through torch);
    # GEMMs fuse into kernels (block composition, tl.dot); values are kept in row
    # buffers across a reduction's loops (targets/cpp/rowbuf.py), so re-reading them is not
    # recomputation
    generates_kernels: bool = False
    gemm_fusing: bool = False
    row_buffers: bool = False
    # scatter kernels (codegen/scatter.py: stores at data-dependent positions, in order)
    # print here; elsewhere those ops run through torch
    scatter_kernels: bool = False
    # kernel ops (codegen/kernel.py) this target's printer has no form for: a kernel
    # holding one is refused (`can_lower`), and its ops run through torch, counted
    missing_ops: frozenset = frozenset()
    # every kernel computes an IEEE operation (+ - * / sqrt, comparisons, casts) with the
    # same bits, in vector and scalar code alike (no FMA contraction), and a library
    # function (log1p, sin, ...) with the same bits wherever an element falls in a loop
    # (targets/cpp/vecmath.py): a training graph's backward may then recompute such
    # forward values (frontend/recompute.py), and a value recomputed in the same graph
    # compares equal to itself
    exact_arithmetic: bool = False
    # limits: a fused kernel may recompute up to this factor of its parts' own ops
    # (XLA's code-duplication rule; None: no limit)
    max_recompute: float | None = None
    # the memory layout 2-D convolutions (library calls) run in: None, as the graph has
    # them (NCHW); "channels_last": activations handed over NHWC in memory, results read
    # back so (passes/conv_layout.py; oneDNN on CPU is faster so)
    conv_layout: str | None = None
    language: Language | None = None

    def __str__(self) -> str:     # messages name the target as they always did
        return self.name

    # -- the cost model and limits ------------------------------------------------------
    @property
    def device_spec(self) -> DeviceSpec:
        if self.cost_device is None:
            raise ValueError(f"target {self.name!r} has no cost-model device")
        return self.cost_device

    @property
    def staged_bytes(self) -> int:
        """Bytes one program may move in a staged kernel: what it moves within one launch
        latency at one program's bandwidth, so that the one launch it saves pays for
        running on one core. 0 on targets without block composition (cpu)."""
        if not self.gemm_fusing:
            return 0
        d = self.device_spec
        return int(d.launch_latency.value * d.program_bandwidth.value)

    def toolchain(self) -> list[str]:
        """What its kernels' times depend on besides the kernel and the host (compiler,
        GPU), in words: part of the performance library's machine key (tune/key.py)."""
        return []

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
            kernel = (lower or self.lower)(graph, nodes)
        except Unsupported as e:
            return str(e)
        if not self.scatter_kernels and any(c.kind == "scatter" for c in kernel.components):
            return (f"the {self.name} code generator has no stores at data-dependent "
                    "positions (scatter kernels)")
        if self.missing_ops:
            from ..codegen.kernel import Op, bodies
            op = next((s.op for c in kernel.components for body in bodies(c) for s in body
                       if isinstance(s, Op) and s.op in self.missing_ops), None)
            if op is not None:
                return f"the {self.name} code generator has no form for {op}"
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

    def prepare(self) -> None:
        """Called when a graph starts compiling for this target to run: start any
        one-time set-up that can overlap planning (none by default)."""

    def build(self, kernels: list) -> list[Any]:
        """A callable per kernel (compiled and loaded), or, in the place of a kernel
        that alone cannot be built while the others are, its KernelBuildError (that
        group runs through torch, counted and named); raises KernelBuildError when none
        can be built."""
        raise NotImplementedError(f"target {self.name!r} builds no kernels")
