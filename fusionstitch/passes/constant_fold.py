"""Constant folding: evaluate small nodes whose inputs are all constants."""
from __future__ import annotations

import logging

import torch

from ..ir.graph import CONSTANT, GETITEM, PARAMETER, Graph, Node, TensorLiteral, TensorType
from ..ir.ops import call_reference, lookup
from ..ir.symbolic import has_symbols
from ._effects import has_side_effect, is_random

log = logging.getLogger("fusionstitch.passes")

# Largest result (in elements) that is folded. A constant is stored in the graph
# and copied to the device at run time, so folding a big creation op (a 1M-element
# `full`) would bloat the graph and move bytes instead of computing them; 4096
# elements (16 KiB in f32) covers scalars, masks and small index tables.
MAX_FOLDED_NUMEL = 1 << 12

# Creation ops whose result is uninitialised memory: folding would bake garbage
# bytes into the graph for nothing.
UNINITIALISED = frozenset({
    "empty.memory_format", "empty_strided.default", "empty_like.default",
    "new_empty.default", "new_empty_strided.default",
})


def _foldable(n: Node, constants: dict[str, torch.Tensor]) -> bool:
    if n.op in (PARAMETER, CONSTANT, GETITEM) or n.op in UNINITIALISED:
        return False
    if not isinstance(n.type, TensorType) or not all(i in constants for i in n.inputs):
        return False  # tuple results are not folded: a constant holds one tensor
    # a value of a symbolic size (ir/symbolic.py) differs from call to call
    if has_symbols(n.type.shape) or has_symbols(n.args) or has_symbols(
            tuple(v for _, v in n.kwargs)) or n.type.numel > MAX_FOLDED_NUMEL:
        return False
    d = lookup(n.op)
    return not (d.fallback or d.is_library or d.view or is_random(n.op) or
                has_side_effect(n.op))


def _on_cpu(kwargs: tuple) -> tuple:
    """Creation kwargs retargeted to the CPU, where folding runs.

    The constant records no device: the runtime moves constants to the graph's.
    """
    out = []
    for k, v in kwargs:
        if k == "device" and v is not None:
            v = torch.device("cpu")
        elif k == "pin_memory" and v:
            v = False  # pinning needs a CUDA runtime and changes no value
        out.append((k, v))
    return tuple(out)


def constant_fold(g: Graph) -> Graph:
    """Replace each foldable node by a `constant` node of the same name and type.

    Inputs left unused are not removed here; `dce` does that.
    """
    env: dict[str, torch.Tensor] = {}
    nodes: list[Node] = []
    folded = 0
    for n in g.nodes:
        if n.op == CONSTANT:
            env[n.name] = n.kwarg("value").value.cpu()  # folding runs on the CPU
        elif _foldable(n, env):
            try:
                with torch.no_grad():
                    value = call_reference(n.op, n.args, _on_cpu(n.kwargs), env)
            except Exception as e:  # a value the op rejects stays a runtime error
                log.debug("constant_fold: %%%s (%s) not folded: %s", n.name, n.op, e)
                nodes.append(n)
                continue
            if not isinstance(value, torch.Tensor) or TensorType.of(value) != n.type:
                log.debug("constant_fold: %%%s (%s) evaluated to a different type",
                          n.name, n.op)
                nodes.append(n)
                continue
            value = value.detach().clone(memory_format=torch.contiguous_format)
            env[n.name] = value
            n = Node(n.name, CONSTANT, kwargs=(("value", TensorLiteral(value)),), type=n.type)
            folded += 1
        nodes.append(n)
    if not folded:
        return g
    return Graph(tuple(nodes), g.outputs, g.name)
