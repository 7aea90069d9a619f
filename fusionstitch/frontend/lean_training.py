"""A training graph's runtime without AOTAutograd's wrappers around it.

AOTAutograd runs a compiled training graph through layers of Python made for every case
it supports (aliased and mutated inputs, views as outputs, subclasses, effect tokens,
functionalised RNG, symbolic sizes, compiled autograd, lazily compiled backwards): a
runtime wrapper (view replay, grad mode), the `CompiledFunction` autograd function
(saved tensors split by version-counter checks, an epilogue marking outputs, a backward
prologue and epilogue, a tangent processor per gradient). On a small training step it
is a large part of the time no backend's kernels account for: ~50 us a forward and
backward pair (logreg's step: 0.25 ms without any graph work), more with many inputs.

For a graph whose case is the plain one, `Lean` stands in for all of that with one
autograd function: its forward runs our forward graph under no_grad, saves the tensors
the backward reads (a view detached, as AOTAutograd saves it), marks the outputs that
do not require grad as non-differentiable; its backward restrides each incoming
gradient to the layout the backward graph was traced with (a copy only where it
differs, as AOTAutograd's tangent coercion) and runs our backward graph. The plain case
(`layout` says why not otherwise, logged at DEBUG, and AOTAutograd's runtime is kept):

* every input a plain strided tensor (or Parameter) of static sizes, none sharing
  storage with another, no parameter of Dynamo's graph module (AOTAutograd's inputs are
  then exactly Dynamo's, in order), no GmWrapper (boxed inputs);
* no input mutation AOTAutograd applies after the graph (the ones kept in the graph,
  frontend/kept_mutations.py, are ours; their versions bumped as AOTAutograd would),
  every user output a new tensor (no alias of an input or an intermediate), no effect
  tokens, no functionalised RNG, no intermediate bases, no change of grad mode, no
  subclass;
* every tensor the backward reads a tensor (no saved symbolic size), the backward's
  inputs exactly the saved tensors then one gradient per output that requires grad,
  one output per input;
* no autocast, no saved-tensor hooks AOTAutograd inlines, no compiled autograd at
  compile time (each changes what AOTAutograd's runtime does).

What AOTAutograd's runtime also does, `Lean` does: a non-leaf input that requires grad
but gets no gradient is detached before the call (so that autograd does not walk its history:
AOTAutograd's "inputs to detach"); the forward runs with grad mode on even inside an
`enable_grad` nested in `no_grad`; a backward under `create_graph=True` returns
gradients whose own backward raises (AOTAutograd's "double backward" error); a backward
inside vmap/grad transforms, or with deterministic algorithms turned on after a forward
compiled without them, raises AOTAutograd's error. Unused differentiable outputs get
zero gradients (autograd materialises them), non-differentiable ones none.

The backward graph is compiled with the forward (`torch._functorch.config.
force_non_lazy_backward_lowering`, where this torch has it; our CompiledGraph builds its
program at its first call, so nothing is spent before a backward runs). Knob:
FUSIONSTITCH_LEAN_TRAINING=0 keeps AOTAutograd's runtime for every training graph.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.fx
from torch.autograd.graph import increment_version

from ..config import env_flag_default
from . import graph_cache

log = logging.getLogger("fusionstitch.frontend")

_DOUBLE_BACKWARD = "torch.compile with aot_autograd does not currently support double backward"


def enabled() -> bool:
    """FUSIONSTITCH_LEAN_TRAINING (default on)."""
    return env_flag_default("FUSIONSTITCH_LEAN_TRAINING", True)


class NotLean(Exception):
    """Why a training graph keeps AOTAutograd's runtime (logged at DEBUG)."""


class Capture:
    """What AOTAutograd's compile of one training graph hands our compiler callbacks:
    filled by `forward_compiler` and `backward_compiler`, read by `layout`."""

    def __init__(self) -> None:
        self.forwards: list[tuple[Callable, int, Any, frozenset]] = []
        self.backwards: list[tuple[Callable, torch.fx.GraphModule]] = []

    def forward_compiler(self, compile_forward: Callable) -> Callable:
        """`compile_forward` (AOTAutograd's fw_compiler callback), recording the compiled
        graph, its number of outputs (before kept_mutations strips its copies), the
        compile's metadata and the kept mutations AOTAutograd bumps itself."""
        def compile_graph(g: torch.fx.GraphModule, example_inputs: list) -> Callable:
            outputs = g.graph.output_node().args[0]
            count = len(outputs) if isinstance(outputs, (tuple, list)) else -1
            meta = getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)
            from .kept_mutations import seen_by_autograd
            seen = seen_by_autograd()
            compiled = compile_forward(g, example_inputs)
            self.forwards.append((compiled, count, meta, seen))
            return compiled
        return compile_graph

    def backward_compiler(self, compile_backward: Callable) -> Callable:
        """`compile_backward` (the bw_compiler callback), recording the graph and what it
        compiled to."""
        def compile_graph(g: torch.fx.GraphModule, example_inputs: list) -> Callable:
            compiled = compile_backward(g, example_inputs)
            self.backwards.append((compiled, g))
            return compiled
        compile_graph._is_wrapped_bw_compiler = getattr(   # type: ignore[attr-defined]
            compile_backward, "_is_wrapped_bw_compiler", False)
        return compile_graph


def eager_backward() -> contextlib.AbstractContextManager:
    """AOTAutograd compiles the backward graph with the forward (the module docstring),
    where this torch's functorch config has the switch; else nothing (and `layout` finds
    no backward: AOTAutograd's runtime stays)."""
    cfg = torch._functorch.config
    if hasattr(cfg, "force_non_lazy_backward_lowering"):
        return cfg.patch(force_non_lazy_backward_lowering=True)
    return contextlib.nullcontext()


def undonate(capture: Capture) -> None:
    """Call after AOTAutograd's compile under `eager_backward`: where its own runtime
    stays, a backward with retain_graph or create_graph must not meet its check of donated
    buffers (our backward graphs donate none; a lazily compiled backward clears the list
    itself when its first call keeps the graph, an eagerly compiled one cannot)."""
    for _, _, meta, _ in capture.forwards:
        if getattr(meta, "bw_donated_idxs", []) != []:
            meta.bw_donated_idxs = []


def why_not_inputs(gm: torch.fx.GraphModule, example_inputs: list) -> str | None:
    """Why Dynamo's graph `gm` with these inputs is not the plain case (the module
    docstring), before AOTAutograd runs; None: it may be."""
    if isinstance(gm, torch._dynamo.utils.GmWrapper):
        return "boxed inputs (GmWrapper)"
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()):
        return "the graph module holds parameters or buffers"
    why = graph_cache.why_not_plain_inputs(example_inputs, parameters=True)
    if why is not None:
        return why
    if torch._C._is_any_autocast_enabled():
        return "autocast is on"
    if getattr(torch._dynamo.compiled_autograd, "in_compiled_autograd_region", False) or \
            getattr(torch._dynamo.compiled_autograd, "compiled_autograd_enabled", False):
        return "compiled autograd"
    try:
        from torch._functorch._aot_autograd.utils import top_saved_tensors_hooks
        if top_saved_tensors_hooks() is not None:
            return "saved-tensor hooks are set"
    except ImportError:
        pass
    return None


class Layout(NamedTuple):
    """What `Lean` needs of one training graph (`layout`)."""
    num_outputs: int                  # user outputs; the forward's others are saved
    non_differentiable: tuple         # user outputs that do not require grad
    differentiable: tuple             # user outputs whose gradients the backward reads
    tangents: tuple                   # (shape, stride) the backward expects of each
    detach: tuple                     # non-leaves that require grad, get no gradient
    bump: tuple                       # inputs whose kept mutation AOTAutograd bumps
    deterministic: bool | None        # deterministic algorithms at compile time
    unsafe_views: tuple               # user outputs AOTAutograd returns as _unsafe_view


def _val(node: Any) -> Any:
    return node.meta.get("val", node.meta.get("example_value")) \
        if isinstance(node, torch.fx.Node) else node


def layout(capture: Capture, example_inputs: list) -> Layout:
    """The plain-case layout of the training graph AOTAutograd just compiled (its
    callbacks filled `capture`), or NotLean."""
    if len(capture.forwards) != 1 or len(capture.backwards) != 1:
        raise NotLean(f"{len(capture.forwards)} forward and {len(capture.backwards)} "
                      "backward compiles")
    _, fw_count, meta, seen = capture.forwards[0]
    _, bw = capture.backwards[0]
    if meta is None:
        raise NotLean("no AOTAutograd metadata")
    from torch._functorch._aot_autograd.schemas import OutputType
    n_in = len(example_inputs)
    if len(meta.input_info) != n_in:
        raise NotLean("AOTAutograd's inputs are not Dynamo's")
    for why, present in (
            ("inputs mutated after the graph", meta.num_mutated_inp_runtime_indices),
            ("intermediate bases", meta.num_intermediate_bases),
            ("effect tokens", meta.tokens),
            ("functionalised RNG", meta.is_rng_op_functionalized),
            ("a change of grad mode", getattr(meta, "grad_enabled_mutation", None)
             is not None),
            ("a subclass", any(type(m).__name__ == "SubclassCreationMeta" for m in (
                *getattr(meta, "subclass_inp_meta", ()),
                *getattr(meta, "subclass_fw_graph_out_meta", ()))))):
        if present:
            raise NotLean(why)
    outs = meta.output_info
    plain = (OutputType.non_alias, OutputType.unsafe_view_alias)
    if any(o.output_type not in plain or not issubclass(o.raw_type, torch.Tensor)
           for o in outs):
        raise NotLean("an output that is not a new tensor: " + ", ".join(
            f"{o.output_type.name} {o.raw_type.__name__}" for o in outs))
    n_out = len(outs)
    if fw_count < n_out:
        raise NotLean("the forward returns fewer values than the user outputs")
    n_saved = fw_count - n_out
    placeholders = [n for n in bw.graph.nodes if n.op == "placeholder"]
    differentiable = tuple(i for i, o in enumerate(outs) if o.requires_grad)
    if len(placeholders) != n_saved + len(differentiable):
        raise NotLean(f"the backward reads {len(placeholders)} values, not {n_saved} saved "
                      f"+ {len(differentiable)} gradients")
    vals = [_val(p) for p in placeholders]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        raise NotLean("the backward reads a value that is not a tensor")
    tangents = []
    for v in vals[n_saved:]:
        if any(type(d) is not int for d in (*v.shape, *v.stride())):
            raise NotLean("a gradient of symbolic size")
        tangents.append((tuple(v.shape), tuple(v.stride())))
    results = bw.graph.output_node().args[0]
    if not isinstance(results, (tuple, list)) or len(results) != n_in:
        raise NotLean("the backward does not return one gradient per input")
    # AOTAutograd's rule: a non-leaf that requires grad but gets no gradient (a leaf stays
    # attached: its output then requires grad as in eager, its gradient left to autograd)
    detach = tuple(i for i, (r, info) in enumerate(zip(results, meta.input_info))
                   if r is None and info.requires_grad and not info.is_leaf)
    bump = tuple(sorted(seen))
    deterministic = getattr(meta, "deterministic", None)
    return Layout(n_out, tuple(i for i, o in enumerate(outs) if not o.requires_grad),
                  differentiable, tuple(tangents), detach, bump, deterministic,
                  tuple(i for i, o in enumerate(outs)
                        if o.output_type == OutputType.unsafe_view_alias))


def _no_dynamo(fn: Callable) -> Callable:
    return torch._dynamo.disable(fn, reason="fusionstitch runs a backward graph")


class _NoDoubleBackward(torch.autograd.Function):
    """A backward's gradients under create_graph=True: their own backward raises (as
    AOTAutograd's)."""

    @staticmethod
    def forward(ctx, run, args, *_):
        return tuple(run(args))

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(_DOUBLE_BACKWARD)


def lean(forward: Callable, backward: Callable, plan: Layout) -> Callable:
    """Dynamo's callable for a training graph: `forward` and `backward` (our compiled
    graphs, boxed) run by one autograd function (the module docstring)."""
    n_out = plan.num_outputs
    non_diff, diff, tangents = plan.non_differentiable, plan.differentiable, plan.tangents
    deterministic = plan.deterministic
    peek = torch._C._functorch.peek_interpreter_stack
    restrides = tuple(enumerate(tangents))
    unsafe_views, unsafe_view = plan.unsafe_views, torch.ops.aten._unsafe_view

    class Step(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            outs = forward(list(args))
            ctx.save_for_backward(*[s.detach() if s._is_view() else s
                                    for s in outs[n_out:]])
            user = list(outs[:n_out])
            for i in unsafe_views:   # a view of an intermediate, returned as a new tensor
                user[i] = unsafe_view(user[i], user[i].shape)
            if non_diff:
                ctx.mark_non_differentiable(*[user[i] for i in non_diff])
            ctx._materialize_non_diff_grads = False
            return tuple(user)

        @staticmethod
        @_no_dynamo
        def backward(ctx, *grads):
            # (run by the autograd engine, maybe from a frame Dynamo watches: the code
            # after a graph break; none of our frames may be traced into a user's graph)
            if peek() is not None:
                raise RuntimeError(
                    "It looks like you're trying to call a compiled backward function "
                    "within vmap/grad/vjp, which isn't supported. Try wrapping vmap inside "
                    "torch.compile, or skip compiling the backward function.")
            if deterministic is False and torch.are_deterministic_algorithms_enabled():
                raise RuntimeError(
                    "This compiled backward function is being run with "
                    "torch.use_deterministic_algorithms(True), but it was previously "
                    "generated during the forward function while "
                    "torch.use_deterministic_algorithms(False) was set.")
            args = [*ctx.saved_tensors, *[grads[i] for i in diff]]
            # autograd's references to the saved tensors go now (unless the graph is
            # kept), as AOTAutograd's do: the backward frees each after its last use
            clear = getattr(ctx, "maybe_clear_saved_tensors", None)
            if clear is not None:
                clear()
            base = len(args) - len(tangents)
            for j, (shape, stride) in restrides:
                g = args[base + j]
                if g.stride() != stride and g.numel() > 1 or g.shape != shape:
                    fixed = torch.empty_strided(shape, stride, dtype=g.dtype, device=g.device)
                    fixed.copy_(g)
                    args[base + j] = fixed
            if torch.is_grad_enabled():   # create_graph=True
                return _NoDoubleBackward.apply(backward, args,
                                               torch.empty(0, requires_grad=True))
            return tuple(backward(args))

    detach, bump = plan.detach, plan.bump
    grad_enabled, set_grad = torch.is_grad_enabled, torch._C._set_grad_enabled
    apply = Step.apply

    def run(*args):
        if bump:
            increment_version(tuple(args[i] for i in bump))
        if detach:
            args = list(args)
            for i in detach:
                args[i] = args[i].detach()
        if grad_enabled():
            return list(apply(*args))
        set_grad(True)   # an enable_grad inside no_grad: outputs that require grad
        try:
            return list(apply(*args))
        finally:
            set_grad(False)
    run.compiled_graph = forward   # type: ignore[attr-defined]
    run.lean_training = plan       # type: ignore[attr-defined]
    return run


def runner(capture: Capture, example_inputs: list) -> Callable | None:
    """`lean` for the graph AOTAutograd just compiled, or None (why, at DEBUG)."""
    if not capture.forwards and not capture.backwards:   # an inference graph after all
        return None
    try:
        plan = layout(capture, example_inputs)
    except NotLean as e:
        log.debug("lean training runtime: not used: %s", e)
        return None
    except Exception as e:   # metadata of another torch: AOTAutograd's runtime
        log.debug("lean training runtime: not used: %s: %s", type(e).__name__, e)
        return None
    return lean(capture.forwards[0][0], capture.backwards[0][0], plan)
