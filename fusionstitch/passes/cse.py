"""Common-subexpression elimination: one node per distinct computation."""
from __future__ import annotations

from typing import Any

import torch

from ..ir.graph import PARAMETER, Graph, Node, Ref, TensorLiteral, map_refs
from ._effects import has_side_effect, is_random


def _key(value: Any) -> Any:
    """A hashable key that is equal only for interchangeable argument values.

    Python's `==` would merge `1`, `1.0` and `True`, and `0.0` with `-0.0`
    (which differ under division), and never merges NaN with itself, so every
    literal is tagged with its type and floats are keyed by their repr.
    """
    if isinstance(value, Ref):
        return ("ref", value.name)
    if isinstance(value, tuple):
        return ("tuple",) + tuple(_key(v) for v in value)
    if isinstance(value, TensorLiteral):
        t = value.value.detach().cpu()
        # Bytes, not torch.equal: torch.equal treats 0.0 and -0.0 as equal.
        return ("tensor", str(t.dtype), tuple(t.shape), value.to_bytes())
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(value).__name__, str(value))
    return (type(value).__name__, value)


def _mergeable(n: Node) -> bool:
    return n.op != PARAMETER and not is_random(n.op) and not has_side_effect(n.op)


def cse(g: Graph) -> Graph:
    """Merge nodes with equal op, arguments (after earlier merges) and type.

    The first node keeps its name; later duplicates disappear and their uses and
    outputs are rewritten to it.
    """
    replaced: dict[str, Ref] = {}
    seen: dict[Any, str] = {}
    nodes: list[Node] = []

    def fwd(r: Ref) -> Ref:
        return replaced.get(r.name, r)

    for n in g.nodes:
        if any(i in replaced for i in n.inputs):
            n = n.replace(args=map_refs(n.args, fwd),
                          kwargs=tuple((k, map_refs(v, fwd)) for k, v in n.kwargs))
        if _mergeable(n):
            key = (n.op, _key(n.args), _key(n.kwargs), n.type)
            first = seen.get(key)
            if first is not None:
                replaced[n.name] = Ref(first)
                continue
            seen[key] = n.name
        nodes.append(n)
    if not replaced:
        return g
    outputs = tuple(fwd(o) if isinstance(o, Ref) else o for o in g.outputs)
    return Graph(tuple(nodes), outputs, g.name)
