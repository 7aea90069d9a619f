"""Cost model (shared by planners and reports): kernel time ≈ φ + max(bytes/BW, flops/peak).

Memory traffic: a kernel or library call reads each distinct value it takes
from outside its group once and writes each value that leaves its group once
(read by another group or returned). Free groups (views, tuple access) move
nothing. Device numbers live in DEVICES, each with its source, keyed by the hardware
they describe; each compilation target names its own entry (`Target.cost_device`,
targets/), so this table knows no target.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Graph, TensorType, TupleType
from ..ir.ops import FREE


def _bytes(t: TensorType | TupleType) -> int:
    return t.nbytes


def group_bytes(graph: Graph, nodes: tuple[str, ...]) -> int:
    inside = set(nodes)
    outputs = graph.output_names
    read = {i for n in nodes for i in graph[n].inputs if i not in inside}
    written = {n for n in nodes
               if n in outputs or any(u not in inside for u in graph.users[n])}
    return sum(_bytes(graph[i].type) for i in read) + sum(_bytes(graph[n].type) for n in written)


def plan_bytes(plan) -> int:
    """Modelled bytes moved by every kernel and library call of a fusion.plan.FusionPlan
    (typed by duck: the cost model sits below the planners)."""
    return sum(group_bytes(plan.graph, g.nodes) for g in plan.groups if g.kind != FREE)


@dataclass(frozen=True)
class Measured:
    value: float
    source: str


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    bandwidth: Measured        # bytes / s of device memory (copy: read + write counted)
    launch_latency: Measured   # φ, seconds per kernel launch (or parallel region / op dispatch)
    peak_flops: Measured       # fp32 flop / s
    onchip_bytes: Measured     # on-chip capacity one program (block) may use: shared memory / L2
    registers: Measured        # 32-bit registers one program (block) may use
    # bytes / s one program (block) moves alone: bounds what a single-program kernel
    # (a staged tail, fusion/legality.staged_limit) may touch
    program_bandwidth: Measured

    def kernel_time(self, nbytes: float, flops: float = 0.0) -> float:
        """φ + max(bytes/bandwidth, flops/peak), in seconds."""
        return self.launch_latency.value + max(nbytes / self.bandwidth.value,
                                               flops / self.peak_flops.value)

    def memory_time(self, nbytes: float) -> float:
        return nbytes / self.bandwidth.value


DEVICES: dict[str, DeviceSpec] = {
    "h100-sxm": DeviceSpec(
        "cuda (NVIDIA H100 SXM class)",
        Measured(3.0e12, "H100 SXM HBM3 spec 3.35 TB/s; ~90% reached by large copies "
                         "(NVIDIA H100 datasheet); to re-measure on the lent device"),
        Measured(5e-6, "FusionStitching 2019 §4.3: 6-10 us per launch on P100/V100; "
                       "~3-5 us for a Python-launched Triton kernel on Hopper"),
        Measured(6.7e13, "H100 SXM fp32 non-tensor peak 67 TFLOP/s (datasheet)"),
        Measured(227 * 1024, "H100: up to 227 KB shared memory per block (CUDA guide, "
                             "compute capability 9.0)"),
        Measured(65536, "64K 32-bit registers per SM / block limit (CUDA guide, cc 9.0)"),
        Measured(3.0e12 / 132, "the device bandwidth shared by its 132 SMs (H100 SXM): a "
                               "lower bound for one block; to re-measure on the lent device"),
    ),
    "ci-epyc-2core": DeviceSpec(
        "cpu (2-core AMD EPYC CI machine)",
        Measured(16.8e9, "torch copy_ of 64 MB, 2 threads, median of 10 "
                         "(measured here 2026-11-22): 16.8 GB/s read+write"),
        Measured(1.5e-6, "torch eager dispatch of a 16-element add, best of 5x10k "
                         "(measured here 2026-11-22): 1.5 us per op"),
        Measured(1.0e11, "2 cores x AVX2 FMA (2x8 fp32 x 2 pipes) x ~3 GHz, rounded down"),
        Measured(1024 * 1024, "L2 per core: 1 MiB (lscpu, 2026-11-22)"),
        Measured(16 * 16, "16 AVX2 ymm registers x 8 fp32 lanes x 2 (rough)"),
        Measured(16.8e9 / 2, "one of the 2 threads of the copy measurement above"),
    ),
}
