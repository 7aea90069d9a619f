"""Outputs that were apart stay apart: a rewrite never makes two outputs one tensor.

CSE merges equal computations, and the folding passes turn an op into its argument; when
that happens to two graph outputs (`x.sin(), x.sin()`; `(x * 2).float(), x * 2`), or
makes an output a parameter or a view of one, the Program would return one tensor for
values eager returns as tensors of their own. A caller who then updates one in place
changes the other; and AOTAutograd, which traced the outputs as unrelated, hands the
backward wrong tangents for them (a training step through `x.half().float()` twice got a
wrong gradient; the dynamic fuzzer found it).

`keep_apart(before, after)` compares the graph handed to canonicalisation with the
result: each output whose memory (its root through views) is an earlier output's or a
parameter's in `after` but was not in `before` gets a `clone` of its own. Outputs the
graph itself returned as one value, or as views of one, stay as they are: eager returns
them so too.
"""
from __future__ import annotations

from ..ir.graph import PARAMETER, Graph, Node, Ref, TensorType, fresh_name
from ..ir.ops import view_root

CLONE = "clone.default"


def _shared(g: Graph) -> list[bool]:
    """Per output: whether its memory is an earlier output's or a parameter's."""
    seen: set[str] = set()
    out = []
    for o in g.outputs:
        if not isinstance(o, Ref):
            out.append(False)
            continue
        root = view_root(g, o.name)
        out.append(root in seen or g[root].op == PARAMETER)
        seen.add(root)
    return out


def keep_apart(before: Graph, after: Graph) -> Graph:
    """`after` with a clone for each output that shares memory there and did not in
    `before` (the same outputs, position for position)."""
    if len(before.outputs) != len(after.outputs):
        return after
    was, now = _shared(before), _shared(after)
    fix = [k for k, (a, b) in enumerate(zip(was, now)) if b and not a
           and isinstance(after[after.outputs[k].name].type, TensorType)]
    if not fix:
        return after
    taken = {n.name for n in after.nodes}
    nodes = list(after.nodes)
    outputs = list(after.outputs)
    for k in fix:
        src = after[outputs[k].name]
        copy = Node(fresh_name(f"{src.name}_out{k}", taken), CLONE, (Ref(src.name),),
                    type=src.type)
        nodes.append(copy)
        outputs[k] = Ref(copy.name)
    return Graph(tuple(nodes), tuple(outputs), after.name)
