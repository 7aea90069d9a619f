"""Measuring a fusion pattern for the performance library (fusionstitch/tune): its ops as one kernel against the same ops each alone.

The pattern becomes a graph of its own (`subgraph`: the values it reads from outside as
parameters, the values that leave it as outputs), planned two ways:
- `fused`: one group, as the stitch planner would run it;
- `split`: every op alone (`plan_none`), each kernel op its own launch;
both through code-generation legality (a `fused` plan legality would split is not
measured: it is not what the planner would run). Each runs as a `Program` on the
target, on inputs drawn from a fixed seed (floats normal, integers and booleans zero:
an index of zero is in range for every gather, so no kernel reads out of bounds),
the two interleaved call by call so that drift in the machine's speed hits both alike;
the median of each is kept with the number of calls it came from.

`fused - split` is the 2019 paper's execution-based score f(P) = ΣK(Op_j) + (N-1)φ - K(P)
with φ measured rather than assumed: our runtime's real per-launch cost is in `split`.
The counters the programs bump (compiles, launches) are restored afterwards: tuning's
own work is counted only in `stats()["tune_measurements"]`.
"""
from __future__ import annotations

import logging
import statistics
import time

import torch

from ..ir.graph import CONSTANT, PARAMETER, Graph, Node, Ref, TensorType
from ..targets import resolve
from ..tune.score import NotMeasurable, register_measurer
from . import counters

log = logging.getLogger("fusionstitch.tune")

# timing: warm-up calls, then alternate calls until both variants have MIN_CALLS and
# MIN_SECONDS have passed, or MAX_CALLS each (a slow pattern is measured fewer times)
WARMUP = 2
MIN_CALLS = 5
MAX_CALLS = 100
MIN_SECONDS = 0.05




def subgraph(graph: Graph, pattern) -> Graph:
    """The pattern as a graph: outside values it reads are parameters (constants stay
    constants), the values it hands out (read outside or returned) are outputs."""
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    members = sorted(pattern, key=position.__getitem__)
    inside = set(members)
    params, seen = [], set()
    for m in members:
        for i in graph[m].inputs:
            if i in inside or i in seen:
                continue
            seen.add(i)
            node = graph[i]
            if node.op == CONSTANT:
                params.append(node)
            elif isinstance(node.type, TensorType):
                params.append(Node(i, PARAMETER, type=node.type))
            else:
                raise NotMeasurable(f"it reads %{i} of type {node.type}, not a tensor")
    outputs = graph.output_names
    outs = tuple(Ref(m) for m in members
                 if m in outputs or any(u not in inside for u in graph.users[m]))
    if not outs:
        raise NotMeasurable("no value leaves it")
    return Graph(tuple(params) + tuple(graph[m] for m in members), outs, name="tune")


def inputs_for(graph: Graph, device: torch.device) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for p in graph.params:
        t = p.type
        dt = t.torch_dtype
        if dt.is_floating_point or dt.is_complex:
            x = torch.randn(t.shape, generator=gen, dtype=torch.float32).to(dt)
        else:
            x = torch.zeros(t.shape, dtype=dt)
        out.append(x.to(device))
    return out


def _programs(sub: Graph, target: str, device: torch.device):
    from ..fusion.codegen_legal import legalize
    from ..fusion.plan import plan_from_groups, plan_none
    from ..runtime.program import Program
    from ..schedule.compose import composition
    ops = frozenset(n.name for n in sub.ops)
    fused = plan_from_groups(sub, [ops], "tune", compose=composition)
    if legalize(fused, target) is not fused:
        raise NotMeasurable("code-generation legality would split it")
    split = legalize(plan_none(sub), target)
    if fused.num_kernels != 1 or split.num_kernels < 2:
        raise NotMeasurable(f"{fused.num_kernels} kernel(s) fused, {split.num_kernels} split: "
                            "no choice to measure")
    programs = Program(fused, device, target), Program(split, device, target)
    for plan, prog in zip((fused, split), programs):
        # a kernel that was not built runs through torch: its time is not the kernel's
        if len(prog.kernel_steps) != plan.num_kernels:
            raise NotMeasurable("its kernels were not built: "
                                + "; ".join(prog.fallback_reasons))
    return programs


def measure(graph: Graph, pattern, target: str) -> dict[str, tuple[float, int]]:
    """{"fused": (median s, calls), "split": (median s, calls)} of `pattern`; raises
    NotMeasurable (or what building or running its kernels raises)."""
    device = torch.device(resolve(target).device_type)
    sync = getattr(torch, device.type).synchronize   # torch.cuda's, or torch.cpu's no-op
    saved = counters.stats()
    try:
        sub = subgraph(graph, pattern)
        programs = dict(zip(("fused", "split"), _programs(sub, target, device)))
        inputs = inputs_for(sub, device)
        for prog in programs.values():
            for _ in range(WARMUP):
                prog(list(inputs))
        sync()
        times: dict[str, list[float]] = {k: [] for k in programs}
        start = time.perf_counter()
        while True:
            for k, prog in programs.items():
                t0 = time.perf_counter()
                prog(list(inputs))
                sync()
                times[k].append(time.perf_counter() - t0)
            calls = len(times["fused"])
            if calls >= MAX_CALLS or (calls >= MIN_CALLS
                                      and time.perf_counter() - start >= MIN_SECONDS):
                break
    finally:
        counters.restore(saved)
    return {k: (statistics.median(v), len(v)) for k, v in times.items()}


# the planner's scores (tune/score.py, below fusion) time patterns through this
register_measurer(measure)
