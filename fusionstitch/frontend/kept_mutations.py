"""Input mutations a training forward keeps in its graph, applied by us.

AOTAutograd copies every mutated input's new value back after the compiled forward
(its runtime wrapper's mutation epilogue): a batch norm's running mean, running
variance and batch count, three per batch norm, each a `view_as` and a `copy_`
through the dispatcher, ~3.5 us apiece on one thread even where our kernel already
wrote the new value in place (runtime/inplace.py: the copy of a tensor onto itself).
resnet_train's 18 cost ~60 us a step, mobilenet_v2_train's 156 about 0.5 ms.
Inductor asks AOTAutograd to keep such mutations in the graph
(`keep_inference_input_mutations`): mutations of inputs autograd does not see (a
buffer that does not require grad, or one mutated under no_grad) are then traced as
`copy_(input, new_value)` at the end of the forward graph, and the epilogue skips them.

The backend asks for that for training graphs (`wanted`), and `strip` takes those
trailing copies out of the graph before anything else reads it: each new value becomes
one more graph output after the others (so the positions AOTAutograd's metadata gives,
the user outputs and the tensors saved for the backward, do not move), and the pair
(that output, the input) joins AOTAutograd's mutated pairs, so the program stores the
new value into the input's memory where it can (runtime/inplace.py). `Applied` wraps
the compiled graph: after each call it copies each new value the program did not write
in place into its input (under no_grad, as AOTAutograd's in-graph `copy_` would run),
bumps the version of one it did write (as that `copy_` would have), and returns the
outputs AOTAutograd expects, without the appended ones. The same wrapper serves a graph
run through torch (a fallback runs the stripped graph, which returns the new values).

A mutation other than such a copy kept in the graph (`set_`, `resize_`, a copy into a
view of an input) is left where it is: the graph's op then has no lowering, and the
graph runs through torch as any graph with such an op does (a counted fallback).
FUSIONSTITCH_KEEP_MUTATIONS=0 leaves the mutations to AOTAutograd's epilogue (the A/B).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.fx
from torch.autograd.graph import increment_version

from ..config import env_flag_default

COPY = torch.ops.aten.copy_.default


def wanted(gm: torch.fx.GraphModule, example_inputs: list) -> bool:
    """Whether to ask AOTAutograd to keep input mutations in the graph: only for a graph
    it will compile for training (grad mode on, an input that requires grad, and an
    output of Dynamo's graph that requires grad, by its traced value where it has one).
    Its inference graphs keep their mutations out of the graph (frontend/graph_cache.py's
    lean wrapper, and the optimizer steps' in-place writes, are built on that layout): an
    update under no_grad of parameters that require grad is one."""
    if not env_flag_default("FUSIONSTITCH_KEEP_MUTATIONS", True):
        return False
    if not torch.is_grad_enabled() or not any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in example_inputs):
        return False
    outputs = gm.graph.output_node().args[0]
    values = [o.meta.get("example_value", o.meta.get("val")) if isinstance(o, torch.fx.Node)
              else None for o in (outputs if isinstance(outputs, (tuple, list)) else [outputs])]
    if not values or any(v is None for v in values):
        return True                 # no traced values to tell: by the inputs
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in values)


def seen_by_autograd() -> frozenset[int]:
    """The inputs of the graph AOTAutograd is compiling now whose kept mutations it
    bumps the version of itself (call it in the compiler callback); none where its
    metadata is not of this torch's layout (each is then bumped here: a version that
    moved twice fails autograd's saved-tensor check exactly where once would)."""
    meta = getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)
    try:
        return frozenset(meta.mutated_graph_handled_indices_seen_by_autograd)
    except (AttributeError, TypeError):
        return frozenset()


def strip(gm: torch.fx.GraphModule) -> list[tuple[int, int]]:
    """Take the trailing `copy_(placeholder, value)` nodes (no reader) out of `gm`, in
    place, appending each value to its outputs; returns (output position, placeholder
    position) per copy, in graph order ([] where there is none)."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    position = {n: k for k, n in enumerate(placeholders)}
    out = graph.output_node()
    copies = [n for n in graph.nodes if n.op == "call_function" and n.target is COPY
              and not n.users and n.args and n.args[0] in position
              and isinstance(n.args[1], torch.fx.Node)]
    # only copies after every other reader of their input: at the end of the graph
    order = {n: k for k, n in enumerate(graph.nodes)}
    copies = [c for c in copies
              if all(order[u] < order[c] for u in c.args[0].users if u is not c)]
    if not copies:
        return []
    outputs = list(out.args[0])
    pairs = []
    for c in copies:
        pairs.append((len(outputs), position[c.args[0]]))
        outputs.append(c.args[1])
    out.args = (tuple(outputs),) + tuple(out.args[1:])
    for c in copies:
        graph.erase_node(c)
    gm.recompile()
    return pairs


class Applied:
    """A compiled graph of a stripped forward (`strip`), with its input mutations applied
    after each call (the module docstring). Boxed, as AOTAutograd calls it."""

    _boxed_call = True

    def __init__(self, inner: Callable, pairs: list[tuple[int, int]],
                 seen: frozenset[int] = frozenset()):
        """`seen`: the placeholders among `pairs` whose version AOTAutograd bumps itself
        after the call (a mutation autograd sees, kept in the graph because it ran under
        no_grad: `seen_by_autograd`); each other one is bumped here, once, as eager's
        in-place update would."""
        self.inner = inner
        self.first = pairs[0][0]                  # the outputs AOTAutograd expects
        self.inputs = [j for _, j in pairs]
        self.positions = [i for i, _ in pairs]
        self.bumped = [j not in seen for _, j in pairs]

    def __call__(self, args: list) -> list:
        targets = [args[j] for j in self.inputs]  # (a boxed callee may clear `args`)
        outs = self.inner(args)
        with torch.no_grad():
            for t, i, bump in zip(targets, self.positions, self.bumped):
                new = outs[i]
                if new is not t:                  # else written in place by our kernel
                    # (`.data`: a version counter of its own, where AOTAutograd bumps t's)
                    (t if bump else t.data).copy_(new)
                elif bump:
                    increment_version(t)
        del outs[self.first:]
        return outs


def compiler(keep: bool, kind: str, make: Callable, plain: Callable) -> Callable:
    """An AOTAutograd compiler callback for graphs of `kind`: a graph with kept mutations
    (`keep`, `strip`) is made by `make(g, kind=kind, kept=pairs)` and wrapped in
    `Applied`; any other goes to `plain(g, example_inputs)`."""
    def compile_graph(g: torch.fx.GraphModule, example_inputs: list) -> Callable:
        pairs = strip(g) if keep else []
        if not pairs:
            return plain(g, example_inputs)
        return Applied(make(g, kind=kind, kept=pairs), pairs, seen_by_autograd())
    return compile_graph
