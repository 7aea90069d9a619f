"""The compiler, top to bottom: one graph's compilation as a list of stages.

Each stage takes the previous stage's output and returns its own; `STAGES` is the whole
pipeline, in order, and `compile_graph` runs it (timing each stage, writing the debug
folder, recording size guards where they are guards, reading the knobs that steer the
stages once: the debug folder, the fuel). The torch.compile backend
(frontend/torch.py) builds a `Request` for one input signature and calls
`compile_graph`; nothing else sequences these steps.

    frontend      the caller's graph as IR (FX -> IR for torch.compile)
    canonicalise  passes/pipeline.py: views folded, CSE, DCE, ... (one dump per pass)
    plan          fusion: the strategy's plan (none | xla | stitch) made legal for the
                  target's code generator, or loaded from the plan cache; at most
                  FUSIONSTITCH_FUEL fusions when that is set (then never from the cache)
    lower         fusion/lowered.py: the kernel IR of every kernel group (a LoweredPlan)
    build         runtime/program.py: the kernels printed, compiled and loaded, and the
                  plan's steps laid out (a Program)
    program       what a call runs: the Program, its CUDA-graph wrapper, or a symbolic
                  program's runner

The layer of this module (docs/LAYERS.md) is above the runtime and below the frontend:
it calls down into every stage; the frontend stage comes from the caller (`translate`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import config
from .debug import dump_kernels, dumper
from .fusion import make_plan
from .fusion.lowered import LoweredPlan, lower_plan
from .fusion.plan import FusionPlan
from .ir import symbolic
from .ir.graph import Graph
from .passes.pipeline import canonicalize
from .runtime.program import Program
from .targets import TORCH, Target


@dataclass
class Request:
    """One graph, at one input signature, to compile."""

    name: str                           # the graph's name (debug folder, logs)
    strategy: str
    target: Target                      # what the plan and kernels are made for
    translate: Callable[[], Graph]      # the frontend stage: the caller's graph as IR
    execute: bool = True                # False: the program runs the plan through torch
    device: Any = None                  # the inputs' torch.device
    # (graph output, parameter) pairs: the output is the parameter's new value
    mutated: list = field(default_factory=list)
    static: bool = False                # every call has the first call's sizes and strides
    symbols: list | None = None         # a graph of symbolic sizes: its size symbols
    verify: bool = False                # check the IR after every canonicalisation pass
    # positions of graph outputs whose memory layout the caller never sees (a training
    # forward's values saved for its backward): passes may pick their layout
    free_outputs: frozenset = frozenset()
    # graph output position -> the order of its dims in eager's memory (outermost first)
    # where that is not row-major: outputs our kernels compute are stored so
    output_orders: dict = field(default_factory=dict)
    guards: symbolic.Guards = field(default_factory=symbolic.Guards)
    # the caller's policy for a built program (the frontend counts it, refuses its
    # fallbacks under FUSIONSTITCH_STRICT=all, logs them)
    accept: Callable[[Program], None] | None = None
    # the program stage: a symbolic program's runner (frontend/dynamic.py); or the
    # tensors a CUDA graph is captured for (None: no CUDA graph)
    runner: Callable[[Program], Callable] | None = None
    cuda_graph_inputs: list | None = None
    # set by compile_graph from the knobs, once: the debug folder's writer, if any, and
    # the fusions planning may apply (FUSIONSTITCH_FUEL; None: no limit)
    dump: Callable[[str, Any], None] | None = None
    fuel: int | None = None


def frontend(req: Request, _: None) -> Graph:
    return req.translate()


def canonicalise(req: Request, graph: Graph) -> Graph:
    return canonicalize(graph, verify=req.verify, dump=req.dump, target=req.target,
                        free_outputs=req.free_outputs, output_orders=req.output_orders)


def plan(req: Request, graph: Graph) -> FusionPlan:
    return make_plan(graph, req.strategy, req.target, fuel=req.fuel)


def lower(req: Request, fusion_plan: FusionPlan) -> LoweredPlan:
    return lower_plan(fusion_plan, req.target)


def build(req: Request, lowered: LoweredPlan) -> Program:
    program = Program(lowered, req.device, req.target if req.execute else TORCH,
                      req.mutated, static=req.static, symbols=req.symbols,
                      free_outputs=req.free_outputs)
    if req.accept is not None:
        req.accept(program)
    return program


def program(req: Request, built: Program) -> Callable:
    if req.runner is not None:
        return req.runner(built)
    if req.cuda_graph_inputs is not None:
        from .runtime.cudagraph import wrap
        return wrap(built, req.name, req.mutated, req.target, req.cuda_graph_inputs)
    return built


# (name, stage, reason): the pipeline, in order
STAGES: tuple[tuple[str, Callable, str], ...] = (
    ("frontend", frontend, "the caller's graph as IR, specialised to this call's sizes "
     "(or symbolic under guards)"),
    ("canonicalise", canonicalise, "one canonical form for the planners: fewer ops, no "
     "view chains, no duplicates"),
    ("plan", plan, "which ops run together as one kernel, which are library calls; legal "
     "for the target's code generator"),
    ("lower", lower, "the kernel IR of each kernel group, once: the runtime builds it and "
     "the report shows it"),
    ("build", build, "kernels compiled and loaded; the plan's steps, in-place writes and "
     "memory reuse laid out"),
    ("program", program, "what a call runs"),
)
# sizes compared in these stages are the compiled program's guards (ir/symbolic.py); the
# later ones take the hints (planning and printing are profitability, not semantics)
GUARDED = frozenset({"frontend", "canonicalise"})
# the debug folder's file per stage output (canonicalise writes one per pass itself)
DUMPS: dict[str, Callable[[Any], str]] = {
    "frontend": lambda graph: "frontend",
    "plan": lambda fusion_plan: f"{fusion_plan.strategy}_plan",
}


@dataclass
class Compiled:
    """Each stage's output by stage name, and the seconds each took."""

    outputs: dict[str, Any]
    seconds: dict[str, float]

    @property
    def graph(self) -> Graph:        # what the planner planned
        return self.outputs["canonicalise"]

    @property
    def plan(self) -> FusionPlan:
        return self.outputs["plan"]

    @property
    def lowered(self) -> LoweredPlan:
        return self.outputs["lower"]

    @property
    def program(self) -> Program:
        return self.outputs["build"]

    @property
    def run(self) -> Callable:
        return self.outputs["program"]


def compile_graph(req: Request) -> Compiled:
    """Run STAGES on `req`; a stage's exception propagates (the frontend decides whether
    the graph falls back to torch)."""
    req.dump = dumper(req.name, req.strategy, req.target)   # None: no debug folder
    req.fuel = config.fuel()
    if req.execute:
        req.target.prepare()
    outputs: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    out = None
    for name, stage, _reason in STAGES:
        scope = symbolic.recording(req.guards) if name in GUARDED else symbolic.suspended()
        with scope:
            start = time.perf_counter()
            out = stage(req, out)
            seconds[name] = time.perf_counter() - start
        outputs[name] = out
        if req.dump and name in DUMPS:
            req.dump(DUMPS[name](out), out)
    if req.dump:
        built = outputs["build"]
        dump_kernels(req.dump.folder, outputs["plan"], built.kernel_steps, req.target.name)
    return Compiled(outputs, seconds)
