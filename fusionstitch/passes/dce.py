"""Dead-code elimination: drop nodes whose results no output needs."""
from __future__ import annotations

from ..ir.graph import PARAMETER, Graph
from ._effects import has_side_effect, is_random


def _is_root(op: str) -> bool:
    # Parameters are the call signature. Random ops stay even when dead: each call
    # advances the global RNG, so dropping one would shift every later draw.
    return op == PARAMETER or is_random(op) or has_side_effect(op)


def dce(g: Graph) -> Graph:
    """Remove nodes that neither reach an output nor have an effect; order is kept."""
    live = {o.name for o in g.output_refs}
    live.update(n.name for n in g.nodes if _is_root(n.op))
    for n in reversed(g.nodes):  # topological order: users come after their inputs
        if n.name in live:
            live.update(n.inputs)
    if len(live) == len(g.nodes):
        return g
    return Graph(tuple(n for n in g.nodes if n.name in live), g.outputs, g.name)
