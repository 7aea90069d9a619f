"""A reduction that keeps its reduced dims, viewed without them, reduces without them.

AOTAutograd writes the gradient of a bias or a norm's weight as
`view(sum(g, [0, 1], keepdim=True), [n])`: the kernel stores a [1, 1, n] tensor and the
runtime makes the [n] view of it through torch at every call (`reshape`, 1-3 us; six
of them in a small qwen2 training step's backward, one per bias or norm weight). The
same elements in the same order come out of `sum(g, [0, 1])`, which the kernel stores
as [n] itself. So

    v = view(r(x, dims, True, ...), shape)   ->   v = r(x, dims, False, ...)

where `shape` is r's shape without the reduced dims (the view drops exactly them), r
has no other reader and is no graph output. The node keeps the view's name, so its
readers are untouched. Reductions: `sum.dim_IntList`, `mean.dim`, `amax.default`,
`amin.default` (their keepdim is their third argument).
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, Ref, TensorType
from ..ir.ops import LOGICAL_RESHAPES

KEEPDIM_REDUCTIONS = frozenset({"sum.dim_IntList", "mean.dim", "amax.default",
                                "amin.default"})


def drop_kept_dims(g: Graph) -> Graph:
    """`g` with each view of the module docstring folded into its reduction; `g` itself
    when there is none."""
    users = g.users
    outputs = g.output_names
    folded: dict[str, Node] = {}      # the view's name -> the reduction that replaces it
    for n in g.nodes:
        if n.op not in LOGICAL_RESHAPES or not n.args or not isinstance(n.args[0], Ref):
            continue
        r = g[n.args[0].name]
        if r.op in KEEPDIM_REDUCTIONS and users[r.name] == (n.name,) and \
                r.name not in outputs and _drops_exactly_the_kept_dims(r, n.type):
            args = (r.args[0], r.args[1], False) + tuple(r.args[3:])
            folded[n.name] = Node(n.name, r.op, args, r.kwargs, type=n.type)
    if not folded:
        return g
    gone = {g[v].args[0].name for v in folded}
    nodes = tuple(folded.get(n.name, n) for n in g.nodes if n.name not in gone)
    return Graph(nodes, g.outputs, g.name)


def _drops_exactly_the_kept_dims(r: Node, viewed: TensorType) -> bool:
    if len(r.args) < 3 or r.args[2] is not True or not isinstance(r.type, TensorType):
        return False
    dims = r.args[1]
    rank = r.type.rank
    if not isinstance(dims, (list, tuple)) or not dims or rank == 0 or \
            not all(isinstance(d, int) and -rank <= d < rank for d in dims):
        return False
    reduced = {d % rank for d in dims}
    kept = tuple(s for i, s in enumerate(r.type.shape) if i not in reduced)
    return tuple(viewed.shape) == kept and viewed.dtype == r.type.dtype
