"""View/bitcast folding: chains of reshapes and permutes become one op, identities vanish.

Shapes in the IR are logical, so any chain of pure reshapes (view, reshape,
squeeze, unsqueeze, alias) is one reshape of the chain's source to the final
shape, and a chain of permutes is one permute. A reshape or expand that keeps
its input's type is the identity and its uses read the input directly; so is a
`constant_pad_nd` whose pads are all zero (a copy, not a view: transformers' "same"
padding before a 1x1 convolution), whose uses read its input.

One exception keeps AOTAutograd's output aliasing intact: an output is never
forwarded onto a parameter or onto another output, since the caller may rely
on it being a distinct tensor (a view of the input, not the input itself).
"""
from __future__ import annotations

from collections import Counter

from ..ir.graph import Graph, Node, Ref, TensorType, map_refs
from ..ir.ops import LOGICAL_RESHAPES
from .dce import dce

# Pure logical reshapes: the result holds the input's elements in the same order (a
# flag of the op table, ir/ops.py)
RESHAPES = LOGICAL_RESHAPES
# Ops that are the identity when their result type equals their input's type.
IDENTITY_WHEN_SAME_TYPE = RESHAPES | {"expand.default"}
PERMUTE = "permute.default"
PAD = "constant_pad_nd.default"


def _zero_pad(n: Node) -> bool:
    """n pads nothing: a constant_pad_nd whose pads are all the int 0."""
    return n.op == PAD and len(n.args) >= 2 and isinstance(n.args[1], (tuple, list)) \
        and all(type(p) is int and p == 0 for p in n.args[1])


def _folded_op(ops: frozenset[str]) -> str:
    """The one op a folded reshape chain becomes."""
    # reshape may copy where view would fail on a non-viewable (strided) input, and
    # squeeze/unsqueeze/alias/view never copy, so a chain holding a reshape stays one.
    if "reshape.default" in ops:
        return "reshape.default"
    # _unsafe_view tells AOTAutograd the result is not an alias to be tracked.
    if "_unsafe_view.default" in ops:
        return "_unsafe_view.default"
    return "view.default"


def fold_views(g: Graph) -> Graph:
    """Collapse reshape and permute chains, drop identity views, then run `dce`."""
    params = {n.name for n in g.params}
    types = {}
    fwd: dict[str, Ref] = {}
    reshape_src: dict[str, tuple[str, frozenset[str]]] = {}  # name -> (chain source, ops)
    permute_src: dict[str, tuple[str, tuple[int, ...]]] = {}  # name -> (source, total perm)
    out_uses = Counter(o.name for o in g.output_refs)
    nodes: list[Node] = []

    def forward(n: Node, target: str) -> bool:
        """Make uses of n read target instead; refused where the output rule forbids."""
        if out_uses[n.name] and (target in params or out_uses[target]):
            return False
        fwd[n.name] = Ref(target)
        out_uses[target] += out_uses.pop(n.name, 0)
        return True

    for n in g.nodes:
        if any(i in fwd for i in n.inputs):
            n = n.replace(args=map_refs(n.args, lambda r: fwd.get(r.name, r)),
                          kwargs=tuple((k, map_refs(v, lambda r: fwd.get(r.name, r)))
                                       for k, v in n.kwargs))
        src = n.args[0] if n.args else None
        if isinstance(src, Ref) and isinstance(n.type, TensorType):
            if (n.op in IDENTITY_WHEN_SAME_TYPE or _zero_pad(n)) \
                    and types[src.name] == n.type and forward(n, src.name):
                continue
            if n.op in RESHAPES:
                source, ops = reshape_src.get(src.name, (src.name, frozenset()))
                ops = ops | {n.op}
                if types[source] == n.type and forward(n, source):
                    continue
                if source != src.name and types[source].dtype == n.type.dtype:
                    n = Node(n.name, _folded_op(ops), (Ref(source), n.type.shape), type=n.type)
                    reshape_src[n.name] = (source, ops)
                else:
                    reshape_src[n.name] = (src.name, frozenset({n.op}))
            elif n.op == PERMUTE:
                rank = n.type.rank
                perm = tuple(d % rank for d in n.args[1]) if rank else ()
                source, inner = permute_src.get(src.name, (src.name, tuple(range(rank))))
                total = tuple(inner[d] for d in perm)
                if total == tuple(range(rank)) and forward(n, source):
                    continue
                if source != src.name:
                    n = Node(n.name, PERMUTE, (Ref(source), total), type=n.type)
                permute_src[n.name] = (source, total)
        types[n.name] = n.type
        nodes.append(n)
    if not fwd and all(a is b for a, b in zip(nodes, g.nodes)):
        return dce(g)
    outputs = tuple(fwd.get(o.name, o) if isinstance(o, Ref) else o for o in g.outputs)
    return dce(Graph(tuple(nodes), outputs, g.name))
