"""A value that the graph also copies channels-last is read from that copy.

conv_layout gives each convolution (and each 1x1 convolution run as a GEMM) over a value
V its own NHWC copy, `clone(permute(V, NHWC))`, which the kernel computing V stores
beside V. When V has other readers (a residual add, a pooling, a second convolution
left NCHW), the kernel stores V twice: NHWC for the convolution and NCHW for them, the
second a pass over memory whose stores cross the grain of the loop
(codegen/layout_copies.py computes V once for both). Inductor stores such a V once,
channels-last, and its readers read that.

So V's other readers read `permute(copy, NCHW)` instead: the same values, a view of the
copy (no new kernel: readers read their inputs through strides), one view per reader,
made right before it (a planner that puts V, its copy and some readers in one kernel
keeps the view of a reader outside it out of that kernel, fusion/plan.py detach_views,
so the kernel stores the copy alone, not the view's NCHW elements beside it). The copy
moves up to right after V (it reads nothing else), so that every reader comes after it.
V is then read by its copy alone, and the planner computes it inside the copy's kernel
without storing it.

Only where it pays and is safe: V is a 4-D value computed in the graph (not a parameter,
a constant or a view), not a graph output (whose layout the caller or the backward sees),
and its copy is row-major (`clone` of the NHWC permute); runs after conv_layout, only
where the target runs convolutions channels-last.
"""
from __future__ import annotations

import torch

from ..ir.graph import CONSTANT, PARAMETER, Graph, Node, Ref, TensorType, fresh_name, map_refs
from ..ir.ops import lookup
from .conv_layout import CLONE, PERMUTE, TO_NCHW, TO_NHWC


def read_channels_last_copies(g: Graph, target=None,
                              free_outputs: frozenset[int] = frozenset()) -> Graph:
    """`g` with the readers of each value that has an NHWC copy reading the copy (module
    docstring); `g` itself where there is none or the target keeps NCHW."""
    if getattr(target, "conv_layout", None) != "channels_last":
        return g
    readers = g.users
    outputs = g.output_names
    copies: dict[str, tuple[Node, Node]] = {}     # V -> (its NHWC permute, the copy)
    for n in g.nodes:
        p = nhwc_copy_permute(g, n)
        if p is None or readers[p.name] != (n.name,):
            continue
        v = g[p.args[0].name]
        if v.name in copies or not _copyable(v, outputs) or readers[v.name] == (p.name,):
            continue
        copies[v.name] = (p, n)
    if not copies:
        return g
    taken = set(readers)
    moved = {m.name for p, c in copies.values() for m in (p, c)}
    copy_of: dict[str, Node] = {}
    nodes: list[Node] = []
    for n in g.nodes:
        if n.name in moved:
            continue
        # each reader reads a view of its own, made right before it: a planner that
        # puts V, its copy and some readers in one kernel keeps the view of a reader
        # outside it out of the kernel (fusion/plan.py detach_views), so the kernel
        # stores the copy alone, not the view's NCHW elements beside it
        view_of: dict[str, Ref] = {}
        for v in dict.fromkeys(i for i in n.inputs if i in copy_of):
            c = copy_of[v]
            nchw = Node(fresh_name(f"{v}_from_copy", taken), PERMUTE,
                        (Ref(c.name), TO_NCHW), type=g[v].type)
            nodes.append(nchw)
            view_of[v] = Ref(nchw.name)
        nodes.append(_reading(n, view_of))
        if n.name in copies:        # the copy right after V; the others read its views
            p, c = copies[n.name]
            nodes += [p, c]
            copy_of[n.name] = c
    return Graph(tuple(nodes), g.outputs, g.name)


read_channels_last_copies.needs_context = True


def nhwc_copy_permute(g: Graph, n: Node) -> Node | None:
    """The permute p when n is a row-major NHWC copy `clone(p)`, `p = permute(V, NHWC)`
    of a value V of the graph (conv_layout's and output_layouts' copies); else None."""
    if n.op != CLONE or len(n.args) != 1 or not isinstance(n.args[0], Ref) or \
            n.kwarg("memory_format") not in (None, torch.contiguous_format):
        return None
    p = g[n.args[0].name]
    if p.op != PERMUTE or tuple(p.args[1]) != TO_NHWC or not isinstance(p.args[0], Ref):
        return None
    return p


def _copyable(v: Node, outputs: frozenset[str]) -> bool:
    t = v.type
    return v.op not in (PARAMETER, CONSTANT) and not lookup(v.op).view \
        and v.name not in outputs and isinstance(t, TensorType) and t.rank == 4 \
        and t.numel != 0


def _reading(n: Node, view_of: dict[str, Ref]) -> Node:
    """`n` reading view_of[V] wherever it read a V of `view_of`."""
    if not view_of or not any(i in view_of for i in n.inputs):
        return n
    swap = lambda r: view_of.get(r.name, r)
    return n.replace(args=map_refs(n.args, swap),
                     kwargs=tuple((k, map_refs(v, swap)) for k, v in n.kwargs))
