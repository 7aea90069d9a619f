"""The torch.compile backend: Dynamo graph -> AOTAutograd (forward + backward) -> our pipeline.

    import fusionstitch
    f = torch.compile(fn, backend="fusionstitch")
    f = torch.compile(fn, backend=fusionstitch.backend(strategy="xla", target="cpu"))

AOTAutograd with core-aten decompositions gives functional forward and
backward aten graphs (split by the min-cut rematerialisation partitioner,
decompositions.py's `partitioner`); each becomes a `CompiledGraph`, which specialises per
concrete input signature (shapes, dtypes, SymInt values): FX -> IR ->
canonicalisation passes -> fusion plan -> Program (run through a CUDA graph with
`cuda_graphs=True` on the cuda target: runtime/cudagraph.py). Inference graphs are
cached without AOTAutograd (frontend/graph_cache.py) and take part in torch's caching
precompile (frontend/precompile.py).
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any, Callable

import torch

from .. import config
from ..compile import Request, compile_graph
from ..config import graph_cache_enabled
from ..fusion.lowered import LoweredPlan
from ..fusion.plan import FusionPlan
from ..ir.graph import Graph
from ..ir.ops import lookup, op_name
from ..runtime import counters as _stats
from ..runtime.program import Program
from ..targets import device_types, resolve
from . import (devices, dynamic, graph_cache, kept_mutations, lean_training, output_layout,
               precompile)
from .decompositions import decompositions, partitioner
from .fx_to_ir import Unsupported, fx_to_ir, input_specs

log = logging.getLogger("fusionstitch.frontend")
_graph_ids = itertools.count()

def strict() -> bool:
    """FUSIONSTITCH_STRICT=1: errors raise instead of falling back to torch (config.strict)."""
    return config.strict()


class FallbackRefused(RuntimeError):
    """FUSIONSTITCH_STRICT=all: a graph, or part of one, would run through torch."""


def _refuse(name: str, why: str) -> None:
    raise FallbackRefused(f"fusionstitch: {name} would run through torch "
                          f"(FUSIONSTITCH_STRICT=all): {why}")


def check_devices(options: config.Options, inputs: list,
                  gm: torch.fx.GraphModule | None = None) -> None:
    """Refuse (ValueError naming what was expected) a target that cannot run on the
    inputs' device (its `device_type`): a device torch does not see (`cuda` without a
    GPU), or inputs on another device than its own and the CPU (`cpu` / `interpret` take
    CPU tensors only). Inputs all on the CPU are refused by a GPU target unless graph
    `gm` computes on its device all the same (`devices.graph_device`: a causal mask made
    by `arange(..., device="cuda")` from a CPU scalar). `auto` picks per device and is
    never refused."""
    if options.target == config.AUTO:
        return
    target = resolve(options.target)
    kind = target.device_type
    if kind is None:
        return
    kinds = sorted({t.device.type for t in inputs if isinstance(t, torch.Tensor)})

    def use(fits: Callable[[str | None], bool]) -> str:   # the other choices to offer
        names = [repr(n) for n in config.target_names()
                 if n != config.AUTO and n != target.name and fits(resolve(n).device_type)]
        return f"target={', '.join(names)} or 'auto'" if names else "target='auto'"

    if not getattr(torch, kind).is_available():   # torch.cuda, torch.cpu, ...
        raise ValueError(f"fusionstitch: target={target.name!r} needs a {kind.upper()} "
                         f"device, and torch sees none (torch.{kind}.is_available() is "
                         f"False); use {use(lambda k: k != kind)}")
    made_there = gm is not None and kind not in kinds and getattr(
        devices.graph_device(gm, inputs), "type", None) == kind
    if kinds and (kind not in kinds and not made_there
                    or set(kinds) - {kind, "cpu"}):
        raise ValueError(f"fusionstitch: target={target.name!r} runs on {kind.upper()} "
                         f"tensors, and this graph's inputs are on {', '.join(kinds)}; "
                         f"move them, or use {use(lambda k: k in kinds and k != kind)}")


@dataclass
class Specialisation:
    """One compiled signature of a graph: what explain() reports."""

    graph: Graph              # after canonicalisation (what fusion planned)
    plan: FusionPlan
    program: Program
    planning_seconds: float
    run: Callable             # what a call runs: the program, or its CUDA-graph wrapper
    target: str = ""          # the target it was planned for (`auto` resolved)
    # a program for every size under its guards (frontend/dynamic.py): `run` takes the
    # call's whole argument list, and `guarded` says which calls it serves
    guarded: Any = None
    lowered: LoweredPlan | None = None   # the kernels of the plan's kernel groups

    @property
    def symbolic(self) -> bool:
        return self.guarded is not None


def _eager_layouts(gm: torch.fx.GraphModule, kind: str, mutated: list,
                   free_outputs: frozenset[int], user_layouts: list | None) -> dict:
    """Graph output position -> eager's dim order, for the outputs the caller sees:
    from Dynamo's graph (`user_layouts`, eager's strides) placed after the mutated
    inputs' new values where AOTAutograd's metadata (or the graph cache's entry, whose
    mutated inputs are all such pairs) says where its user outputs are, else from this
    graph's own traced values."""
    if kind not in ("inference", "forward"):
        return {}
    if user_layouts is not None:
        meta = getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)
        try:
            first = len(meta.mutated_inp_runtime_indices) if meta is not None else \
                len(mutated)
            users = len(meta.output_info) if meta is not None else len(user_layouts)
        except (AttributeError, TypeError):   # another torch's metadata layout
            first = users = -1
        if users == len(user_layouts) and first >= 0:
            if meta is not None and kind == "forward":
                # a training graph's output that aliases a value AOTAutograd rebuilds
                # from its base (as_strided with the output's own strides, where view
                # replay is off): a copy of it would make that rebuild read wrong elements
                user_layouts = [order if _kind(info) == "non_alias" else None
                                for order, info in zip(user_layouts, meta.output_info)]
            expected = output_layout.placed(user_layouts, first)
            seen = [first + k for k, info in enumerate(meta.output_info)
                    if _kind(info) == "non_alias"] if meta is not None else \
                range(first, first + users)
            return output_layout.library_results(gm, seen, expected, _runs_in_torch)
    skip = {i for i, _ in mutated} | set(free_outputs)
    n = len(output_layout.output_nodes(gm))
    return output_layout.library_results(gm, [i for i in range(n) if i not in skip],
                                         output_layout.expected_orders(gm, skip),
                                         _runs_in_torch)


def _runs_in_torch(target) -> bool:
    """Whether an aten op of AOTAutograd's graph is a library call (or a fallback)."""
    try:
        return lookup(op_name(target)).is_library
    except (AttributeError, KeyError):   # not an OpOverload: a Python function
        return False


def _kind(info) -> str:
    """An AOTAutograd output's `output_type` name ("non_alias", "alias_of_input", ...)."""
    return getattr(getattr(info, "output_type", None), "name", "")


def saved_outputs(kind: str, gm: torch.fx.GraphModule) -> frozenset[int]:
    """Positions of the outputs of the forward graph AOTAutograd is compiling now that are
    saved for its backward (after the mutated inputs, the user outputs and the
    intermediate bases): only the backward reads them, through their strides, so their
    memory layout is free (passes/conv_layout.py). Empty for other graphs, or when the
    metadata is not of the layout this torch has. Call it while the compiler callback
    runs (the tracing context is gone by the first call)."""
    if kind != "forward":
        return frozenset()
    meta = getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)
    try:
        seen = len(meta.mutated_inp_runtime_indices) + len(meta.output_info) + \
            meta.num_intermediate_bases
        outputs = gm.graph.output_node().args[0]
        return frozenset(range(seen, len(outputs)))
    except (AttributeError, TypeError):   # no metadata, or another torch's layout
        return frozenset()


_FALLBACK = object()
_SHAPE, _DTYPE, _IS_CUDA = attrgetter("shape"), attrgetter("dtype"), attrgetter("is_cuda")


class CompiledGraph:
    """A boxed callable for AOTAutograd: specialises and runs one aten graph."""

    _boxed_call = True

    def __init__(self, gm: torch.fx.GraphModule, options: config.Options, kind: str,
                 sink: list | None = None, execute: bool = True,
                 mutated: list[tuple[int, int]] | None = None,
                 user_layouts: list | None = None, kept: list[tuple[int, int]] = ()):
        self.gm = gm
        # explain() plans for the target but runs the plan through torch: it needs the
        # plan and the values, not compiled kernels
        self.execute = execute
        self.options = options
        self.kind = kind
        self.name = f"{kind}_{next(_graph_ids)}"
        self.specialisations: dict[tuple, Any] = {}
        self.fallback_reason: str | None = None
        # AOTAutograd's mutated inputs (graph output, placeholder), read now: its tracing
        # context is gone by the first call. A graph from the graph cache brings its own.
        if mutated is None:
            from ..runtime.inplace import mutated_input_pairs
            mutated = mutated_input_pairs(kind)
        # and the mutations AOTAutograd kept in the graph, made outputs of their own
        # (frontend/kept_mutations.py): (output, placeholder) pairs of the same kind
        mutated = list(mutated) + list(kept)
        self.mutated = mutated
        self.free_outputs = saved_outputs(kind, gm) - {i for i, _ in kept}
        # outputs the caller sees, in eager's layout where that is not row-major
        # (frontend/output_layout.py); a backward's gradients keep ours
        self.eager_layouts = _eager_layouts(gm, kind, mutated, self.free_outputs,
                                            user_layouts)
        self._tensor_only: bool | None = None
        # a graph whose inputs all have static sizes is called with those sizes, dtypes
        # and devices only (Dynamo guards them, and the graph has them baked in): after
        # the first call its one specialisation serves every call, with no key to build
        # (an optimizer step's 160 inputs: 0.1 ms a call)
        self._static = static_inputs(gm)
        self._only: Any = None
        # a graph of symbolic sizes: its symbolic programs (frontend/dynamic.py), or None
        # when it is compiled per shape (`dynamic_reason` says why, if it is symbolic)
        self.dynamic_reason: str | None = None
        self._binding: dynamic.Binding | None = None
        self._programs: list[Specialisation] = []
        if not self._static and dynamic.is_symbolic(gm):
            self._init_dynamic()
        if sink is not None:
            sink.append(self)
        _stats.bump("compiles")

    def __call__(self, *call_args) -> list:
        # AOTAutograd calls forward graphs boxed (one list) but may call backward graphs
        # unboxed after Dynamo wraps them; inputs are never lists, so both are unambiguous.
        args = call_args[0] if len(call_args) == 1 and isinstance(call_args[0], list) \
            else list(call_args)
        entry = self._only
        if entry is not None and len(args) == self._static:
            return self._unfused(args) if entry is _FALLBACK else entry.run(args)
        if self._tensor_only is None:   # placeholders keep their kind from call to call
            self._tensor_only = all(isinstance(a, torch.Tensor) for a in args)
        key = None
        if self._tensor_only:
            # three C-level passes: a quarter of the cost of a generator over the inputs,
            # which an optimizer step's 160 paid on every call (0.12 ms)
            try:
                key = ("tensors", tuple(map(_SHAPE, args)), tuple(map(_DTYPE, args)),
                       tuple(map(_IS_CUDA, args)))
            except AttributeError:   # not all tensors after all: the general key
                pass
        if key is None:
            # (torch.Size, dtype, is_cuda): a third of the cost of tuple(shape), device.type
            key = tuple((a.shape, a.dtype, a.is_cuda) if isinstance(a, torch.Tensor)
                        else a for a in args)
        entry = self.specialisations.get(key)
        if entry is None:
            if len(self.specialisations) >= _MAX_KEYS:   # a stream of shapes: stay bounded
                self.specialisations.clear()
            entry = self.specialisations[key] = self._entry_for(args)
            if self._static and key[0] == "tensors" and len(args) == self._static:
                self._only = entry
        if entry is _FALLBACK:
            return self._unfused(args)
        if key[0] == "tensors" or entry.guarded is not None:
            return entry.run(args)
        return entry.run([a for a in args if isinstance(a, torch.Tensor)])

    # -- shape-generic compilation (frontend/dynamic.py) -------------------------------
    def _init_dynamic(self) -> None:
        if not dynamic.enabled():
            self.dynamic_reason = "FUSIONSTITCH_DYNAMIC=0"
            return
        if self.options.cuda_graphs:
            self._no_dynamic("CUDA graphs are captured per shape")
            return
        try:
            self._binding = dynamic.Binding(self.gm)
        except Exception as e:   # Unsupported, or metadata of a form we do not know
            self._no_dynamic(str(e))

    def _no_dynamic(self, why: str) -> None:
        self.dynamic_reason = why
        self._binding = None
        _stats.bump("dynamic_refusals")
        log.info("%s has symbolic sizes but is compiled per shape: %s", self.name, why)

    def _entry_for(self, args: list) -> Any:
        """The compiled program for a call whose input signature is new: a symbolic program
        whose guards hold, a new one, or a concrete specialisation."""
        # sizes 0 and 1 get programs of their own (as Dynamo gives them graphs of their own)
        if self._binding is not None and self._binding.in_range(args):
            for entry in self._programs:
                if entry.guarded.holds(args) is not None:
                    return entry
            if len(self._programs) < dynamic.max_programs():
                entry = self._specialise_symbolic(args)
                if entry is not None:
                    self._programs.append(entry)
                    return entry
            else:
                log.info("%s: sizes %s violate the guards of its %d symbolic programs; "
                         "compiled for these sizes", self.name,
                         [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)],
                         len(self._programs))
        return self._specialise(args)

    def _specialise_symbolic(self, args: list) -> Specialisation | None:
        """One program for every size of the graph under guards, hinted by this call's
        sizes; None (and the graph compiles per shape from now on) when that fails."""
        binding = self._binding
        try:
            spec = self._build(args, binding)
            if spec.guarded.holds(args) is None:   # the hints must satisfy their guards
                raise Unsupported(f"its guards do not hold at the sizes it was compiled "
                                  f"for: {spec.guarded.text()}")
        except FallbackRefused:
            raise
        except Exception as e:   # Unsupported, or an internal error: never a wrong number
            if strict() and not isinstance(e, Unsupported):
                raise
            self._no_dynamic(f"{type(e).__name__}: {e}" if not isinstance(e, Unsupported)
                             else str(e))
            return None
        _stats.bump("symbolic_programs")
        if spec.guarded.guards:
            log.debug("%s: symbolic program %d under guards %s", self.name,
                      len(self._programs), spec.guarded.text())
        return spec

    def _unfused(self, args: list) -> list:
        """The graph run through torch (a specialisation that fell back): a fallback."""
        _stats.bump("fallbacks")
        out = self.gm(*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def _build(self, args: list, binding: dynamic.Binding | None = None) -> Specialisation:
        """FX -> IR -> plan -> Program for this call's sizes (`binding`: for every size
        of the graph, under the guards it records); raises Unsupported."""
        device = devices.graph_device(self.gm, args)
        target = self.options.resolved_target(device)
        if device is not None and device.type not in device_types() and self.execute:
            raise Unsupported(f"inputs on device {device.type}: no fusionstitch target "
                              "runs there")
        kind = resolve(target).device_type
        if device is not None and self.execute and kind is not None and kind != device.type:
            # (explicit targets refuse such inputs in check_devices; this is a graph
            # without them whose tensors all live on another device)
            raise Unsupported(f"the graph computes on {device.type}, and target {target} "
                              f"runs kernels on {kind}")

        def translate() -> Graph:   # the driver's frontend stage
            hints = None
            if binding is not None:
                hints = binding.hints(args)
                specs = binding.specs(args, hints)
            else:
                specs = input_specs(args)
            strides = [tuple(a.stride()) if isinstance(a, torch.Tensor) and
                       a.layout == torch.strided else None for a in args]
            return fx_to_ir(devices.place(self.gm, device), specs, self.name, hints=hints,
                            strides=strides)

        # placeholder number -> parameter number (numbers do not become parameters)
        param_of = {j: k for k, j in enumerate(
            j for j, a in enumerate(args) if isinstance(a, torch.Tensor))}
        # (a symbolic program writes no input in place: AOTAutograd copies them back)
        mutated = [(i, param_of[j]) for i, j in self.mutated
                   if j in param_of] if binding is None else []
        req = Request(
            self.name, self.options.strategy, resolve(target), translate,
            execute=self.execute, device=device, mutated=mutated, static=bool(self._static),
            free_outputs=self.free_outputs if binding is None else frozenset(),
            output_orders=self.eager_layouts,
            symbols=binding.symbols if binding is not None else None,
            verify=config.verify_enabled() and binding is None, accept=self._accept,
            runner=(lambda p: _symbolic_runner(p, binding)) if binding is not None else None,
            cuda_graph_inputs=[a for a in args if isinstance(a, torch.Tensor)]
            if binding is None and self.options.cuda_graphs else None)
        done = compile_graph(req)
        program = done.program
        guarded = dynamic.Guarded(binding, req.guards | program.guards) \
            if binding is not None else None
        run = output_layout.wrap(done.run, self.eager_layouts)
        return Specialisation(done.graph, done.plan, program,
                              done.seconds["canonicalise"] + done.seconds["plan"], run,
                              target, guarded, done.lowered)

    def _accept(self, program: Program) -> None:
        """A built program: counted, and its fallbacks refused (FUSIONSTITCH_STRICT=all)
        or logged."""
        _stats.bump("specialisations")
        if program.fallback_reasons:
            parts = "; ".join(program.fallback_reasons)
            if config.strict_all():
                _refuse(self.name, parts)
            log.warning("%s: %d part(s) run through torch (counted in fallbacks): %s",
                        self.name, len(program.fallback_reasons), parts)

    def _specialise(self, args: list) -> Any:
        try:
            return self._build(args)
        except FallbackRefused:
            raise
        except Unsupported as e:
            if config.strict_all():
                _refuse(self.name, str(e))
            self.fallback_reason = str(e)
            log.warning("%s runs through torch unfused (counted in fallbacks): %s",
                        self.name, e)
        except Exception as e:  # an internal error must never give a wrong number
            if strict():
                raise
            self.fallback_reason = f"internal error: {type(e).__name__}: {e}"
            log.exception("%s: internal error, running through torch unfused (counted in "
                          "fallbacks)", self.name)
        return _FALLBACK


def _symbolic_runner(program: Program, binding: dynamic.Binding) -> Callable:
    """A call of a symbolic program: the symbols' values from the call's arguments."""
    values = binding.values
    if all(kind == "tensor" for kind, _ in binding.inputs):
        return lambda args: program(args, values(args))
    return lambda args: program([a for a in args if isinstance(a, torch.Tensor)], values(args))


# input signatures a CompiledGraph remembers before it forgets them all (each maps to its
# program; a stream of new shapes of a symbolic graph finds its program again by guards)
_MAX_KEYS = 4096


def static_inputs(gm: torch.fx.GraphModule) -> int:
    """The number of inputs of `gm` when every one is a strided tensor of static sizes and
    strides and no value in the graph has a symbolic size (a data-dependent one: nonzero
    with captured output shapes) or is a symbolic number (FX's recorded values), else 0."""
    n = 0
    for node in gm.graph.nodes:
        val = node.meta.get("val", node.meta.get("example_value"))
        if node.op == "placeholder":
            if not isinstance(val, torch.Tensor) or val.layout != torch.strided \
                    or not graph_cache._static(val):
                return 0
            n += 1
            continue
        vals = val if isinstance(val, (tuple, list)) else (val,)
        for v in vals:
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
                    isinstance(v, torch.Tensor) and v.layout == torch.strided
                    and not graph_cache._static(v)):
                return 0
    return n


def _kernel_target(options: config.Options, gm: torch.fx.GraphModule, inputs: list):
    """The Target whose kernels a graph given these example inputs runs (`auto`: the one
    for the graph's device)."""
    return resolve(options.resolved_target(devices.graph_device(gm, inputs)))


def backend(strategy: str = "stitch", target: str = "auto", cuda_graphs: bool = False,
            _sink: list | None = None, _execute: bool = True) -> Callable:
    """A torch.compile backend with these options (see README's knobs table). torch.compile's
    `mode=` and `options=` (a dict of these options) reach it too and apply on top."""
    base = config.Options(strategy=strategy, target=target, cuda_graphs=cuda_graphs)

    def fusionstitch_backend(gm: torch.fx.GraphModule, example_inputs: list,
                             mode: str | None = None, options: dict | None = None):
        if config.disabled():
            log.info("FUSIONSTITCH_DISABLE is set: running the graph through torch")
            return gm.forward
        options = base if mode is None and options is None else \
            base.with_compile_args(mode, options)
        if _execute:
            check_devices(options, example_inputs, gm)
        from torch._dynamo.backends.common import aot_autograd
        # eager's layouts of Dynamo's outputs (its fake values ran torch's own ops)
        make = partial(CompiledGraph, options=options, sink=_sink, execute=_execute,
                       user_layouts=output_layout.user_orders(gm))

        def compile_backward(g, _):
            fn = no_dynamo(make(g, kind="backward"), "fusionstitch runs a backward graph")
            fn._boxed_call = True
            return fn
        # AOTAutograd compiles a backward lazily, in its first call: inside the user's
        # .backward() or torch.autograd.grad, which may run in a frame Dynamo watches (the
        # code after a graph break). Both the compile and the compiled graph run with
        # Dynamo off, as Dynamo's own wrapper of backward compilers does; ours (the flag
        # tells Dynamo it need not wrap) keeps the boxed calling convention.
        bw_compiler = no_dynamo(compile_backward, "fusionstitch compiles a backward graph")
        bw_compiler._is_wrapped_bw_compiler = True

        # a warm start of an inference graph skips AOTAutograd (frontend/graph_cache.py)
        cache_key = graph_cache.key(gm, example_inputs, options, execute=_execute)
        if cache_key is not None:
            hit = graph_cache.load(
                cache_key, lambda g, pairs: make(g, kind="inference", mutated=pairs),
                len(example_inputs))
            if hit is not None:
                precompile.record(gm, cache_key, options, len(example_inputs))
                return hit

        made = []
        # a graph the cache refuses only for inputs that require grad (an update under
        # no_grad after a graph break) may still get the lean wrapper when AOTAutograd
        # finds it an inference graph (no output requires grad, no mutation it tracks)
        lean_pairs: list = []
        lean_ok = cache_key is None and _execute and graph_cache_enabled() and \
            _why_not_lean(gm, example_inputs) is None

        def inference_compiler(g, _):
            if cache_key is not None:
                graph_cache.store(cache_key, g, len(example_inputs))
            elif lean_ok:
                lean_pairs[:] = [graph_cache.lean_layout(g, len(example_inputs))]
            made.append(make(g, kind="inference"))
            return made[-1]

        # a training graph keeps the mutations autograd does not see in the graph
        # (batch norms' running statistics), and they are applied by us, not by
        # AOTAutograd's epilogue (frontend/kept_mutations.py)
        keep = kept_mutations.wanted(gm, example_inputs)
        fw_compiler = kept_mutations.compiler(
            keep, "forward", make, lambda g, _: make(g, kind="forward"))
        # a training graph of the plain case runs without AOTAutograd's runtime wrappers
        # (frontend/lean_training.py): its compilers record what the runner needs
        capture = _lean_training_capture(gm, example_inputs) if _execute else None
        if capture is not None:
            fw_compiler = capture.forward_compiler(fw_compiler)
            bw_compiler = capture.backward_compiler(bw_compiler)
        aot = aot_autograd(fw_compiler=fw_compiler,
                           bw_compiler=bw_compiler,
                           inference_compiler=kept_mutations.compiler(
                               keep, "inference", make, inference_compiler),
                           decompositions=decompositions(),
                           keep_inference_input_mutations=keep,
                           **partitioner(_kernel_target(options, gm, example_inputs)))
        if capture is None:
            compiled = aot(gm, example_inputs)
        else:
            with lean_training.eager_backward():
                compiled = aot(gm, example_inputs)
            lean_training.undonate(capture)
            lean_step = lean_training.runner(capture, example_inputs)
            if lean_step is not None:
                precompile.record(gm, cache_key, options, len(example_inputs))
                return lean_step
        # torch's caching precompile, when it is on (frontend/precompile.py)
        precompile.record(gm, cache_key, options, len(example_inputs))
        if made and cache_key is not None:
            # a graph the cache took has the simple layout: the wrapper a cache hit returns
            # stands in for AOTAutograd's from the first compile on (it skips the copy-back
            # of inputs our kernels already wrote: an optimizer step's 120 `copy_` calls)
            lean = graph_cache.runner_for(cache_key, made[-1])
            if lean is not None:
                return lean
        if made and lean_pairs and lean_pairs[0] is not None:
            return graph_cache.lean(made[-1], lean_pairs[0])
        return compiled

    # Dynamo calls a backend with its frame evaluation off, but other callers may not (a
    # backend called by hand, a wrapper compiling sub-graphs): our compile never runs
    # under Dynamo's eye
    compile_graph = no_dynamo(fusionstitch_backend, "fusionstitch compiles a graph")
    compile_graph.options = base  # type: ignore[attr-defined]
    return compile_graph


def _lean_training_capture(gm: torch.fx.GraphModule, example_inputs: list):
    """A lean_training.Capture for a graph AOTAutograd may compile for training in the
    plain case, or None (AOTAutograd's runtime; why, at DEBUG)."""
    if not lean_training.enabled() or not torch.is_grad_enabled() or not any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        return None
    try:
        why = lean_training.why_not_inputs(gm, example_inputs)
    except Exception as e:   # never fail the compile for the runner's sake
        why = f"{type(e).__name__}: {e}"
    if why is not None:
        log.debug("lean training runtime: not used: %s", why)
        return None
    return lean_training.Capture()


def _why_not_lean(gm: torch.fx.GraphModule, example_inputs: list) -> str | None:
    try:
        return graph_cache.why_not(gm, example_inputs, lean=True)
    except Exception as e:   # never fail the compile for the wrapper's sake
        return f"{type(e).__name__}: {e}"


def no_dynamo(fn: Callable, reason: str) -> Callable:
    """`fn` run with Dynamo's frame evaluation off, for every frame it calls (what Dynamo
    does with the callables a backend returns): nothing fusionstitch runs on its own behalf
    may be traced into a user's graph, count against the recompile limit or break a graph."""
    return torch._dynamo.disable(fn, reason=reason)


# The default backend, registered as "fusionstitch" (and via the torch_dynamo_backends
# entry point, which points here).
dynamo_backend = backend()


def register() -> None:
    from torch._dynamo.backends import registry
    if "fusionstitch" in registry._COMPILER_FNS:
        return
    # when the entry point was discovered, dynamo registers us itself on first lookup
    if registry._BACKENDS.get("fusionstitch") is not None:
        return
    registry.register_backend(compiler_fn=dynamo_backend, name="fusionstitch")
