"""A batched matmul of two broadcasts becomes one plain matmul.

`torch.matmul(e[B,1,L,D], w[1,K,D,C])` reaches us as AOTAutograd spells
broadcasting for bmm: each operand expanded to [B,K,..], copied to contiguous
memory, viewed as [B*K,..], then `bmm`. The copies are B (or K) times larger
than their sources (capsule routing: 14 MB of copies of a 1.6 MB embedding and
a 64 KB weight), and the bmm then runs B*K small GEMMs. When the left operand
varies only with b and the right one only with k, every output block is
`e[b] @ w[k]`, so all of them are one GEMM:

    mm(e.reshape(B*L, D), w.permute(1, 0, 2).reshape(D, K*C))   -> [B*L, K*C]

whose result, viewed [B, L, K, C] and permuted to [B, K, L, C], is the bmm's.
The small weight is copied to lay its K blocks side by side, and the result is
copied once into the bmm's contiguous layout: the graph's later views of it
(free groups, run as views of the real tensor) need the layout they were
traced with. One GEMM and one copy of the result replace B*K small GEMMs and
the copies of both broadcasts.
"""
from __future__ import annotations

import torch

from ..ir.graph import Graph, Node, Ref, TensorType, fresh_name
from .simplify import RESHAPES

BMM = "bmm.default"
EXPAND = "expand.default"
CLONE = "clone.default"


def _broadcast_source(ref, nodes: dict[str, Node]):
    """(source, [b, k] flags) when `ref` is reshape(clone(expand(source, [B, K, R, S]))) to
    [B*K, R, S]: flags say whether the source varies along B and along K."""
    if not isinstance(ref, Ref):
        return None
    view = nodes[ref.name]
    if view.op not in RESHAPES or not isinstance(view.args[0], Ref):
        return None
    inner = nodes[view.args[0].name]
    if inner.op == CLONE:
        fmt = dict(inner.kwargs).get("memory_format", torch.contiguous_format)
        if len(inner.args) != 1 or fmt not in (torch.contiguous_format, torch.preserve_format):
            return None
        inner = nodes[inner.args[0].name] if isinstance(inner.args[0], Ref) else None
    if inner is None or inner.op != EXPAND or not isinstance(inner.args[0], Ref):
        return None
    out = inner.type.shape
    src = nodes[inner.args[0].name]
    if len(out) != 4 or not isinstance(src.type, TensorType) or src.type.rank > 4:
        return None
    shape = (1,) * (4 - src.type.rank) + src.type.shape
    if shape[2:] != out[2:] or view.type.shape != (out[0] * out[1],) + out[2:]:
        return None
    return src, (shape[0] != 1, shape[1] != 1), out


def _rewrite(n: Node, nodes: dict[str, Node], taken: set[str]) -> list[Node] | None:
    if n.op != BMM or n.kwargs or len(n.args) != 2:
        return None
    left, right = (_broadcast_source(a, nodes) for a in n.args)
    if left is None or right is None:
        return None
    (e, e_varies, e_out), (w, w_varies, w_out) = left, right
    # e varies with b only, w with k only (each output block is e[b] @ w[k])
    if e_varies[1] or w_varies[0] or e_out[:2] != w_out[:2]:
        return None
    (B, K, L, D), C = e_out, w_out[3]
    dt = n.type.dtype

    def node(stem: str, op: str, args: tuple, shape: tuple) -> Node:
        return Node(fresh_name(f"{n.name}_{stem}", taken), op, args, type=TensorType(shape, dt))

    rows = node("rows", "reshape.default", (Ref(e.name), (B * L, D)), (B * L, D))
    blocks = node("blocks", "reshape.default", (Ref(w.name), (K, D, C)), (K, D, C))
    side = node("side", "permute.default", (Ref(blocks.name), (1, 0, 2)), (D, K, C))
    # the copy that lays the blocks side by side is a kernel's (a reshape of the permute
    # would make torch copy it at every call: 7 us of capsule_routing's 30)
    laid = Node(fresh_name(f"{n.name}_laid", taken), CLONE, (Ref(side.name),),
                (("memory_format", torch.contiguous_format),), type=side.type)
    cols = node("cols", "view.default", (Ref(laid.name), (D, K * C)), (D, K * C))
    gemm = node("mm", "mm.default", (Ref(rows.name), Ref(cols.name)), (B * L, K * C))
    split = node("split", "view.default", (Ref(gemm.name), (B, L, K, C)), (B, L, K, C))
    order = node("order", "permute.default", (Ref(split.name), (0, 2, 1, 3)), (B, K, L, C))
    dense = Node(fresh_name(f"{n.name}_dense", taken), CLONE, (Ref(order.name),),
                 (("memory_format", torch.contiguous_format),), type=order.type)
    out = Node(n.name, "view.default", (Ref(dense.name), n.type.shape), type=n.type)
    return [rows, blocks, side, laid, cols, gemm, split, order, dense, out]


def unbroadcast_bmm(g: Graph) -> Graph:
    """Rewrite each bmm of a b-only and a k-only broadcast as one mm (see the module doc);
    the expands and copies it no longer reads are left to `dce`."""
    nodes = {n.name: n for n in g.nodes}
    taken = set(nodes)
    out: list[Node] = []
    changed = False
    for n in g.nodes:
        new = _rewrite(n, nodes, taken) if n.op == BMM else None
        if new is None:
            out.append(n)
        else:
            out += new
            changed = True
    return Graph(tuple(out), g.outputs, g.name) if changed else g
