"""`as_strided_scatter` of a row-major window into a fresh tensor becomes a slice_scatter.

AOTAutograd's functionalization spells a write into a view of a fresh tensor as
`as_strided_scatter(base, src, size, stride, offset)`: base with the elements of its
storage that `as_strided(size, stride, offset)` picks replaced by src. A classifier
head made channels-last has one per backward (transformers' MobileNetV2: the gradient of
`flatten(mean(x, (2, 3), keepdim=True))` written into zeros, `as_strided_scatter(full,
g, [4, 1280], [1280, 1], 0)`), and no code generator lowers the general op, so it ran
through torch and split its neighbours' kernel.

Where the window is row-major (its strides those of a contiguous tensor of its sizes,
on every dim longer than 1), it picks the storage elements offset .. offset + numel in
order: the result is `slice_scatter` of src's elements into base's flat elements, or
src itself reshaped where the window is all of base. This holds for a base whose
storage is its row-major elements from offset 0, which the rewrite asks of base by
taking only the results of factory ops that make such a tensor (`FRESH`); any other
base, window or symbolic size keeps the op.
"""
from __future__ import annotations

import math

import torch

from ..ir.graph import Graph, Node, Ref, TensorType, fresh_name

SCATTER = "as_strided_scatter.default"
VIEW = "view.default"
# factory ops whose result is a fresh tensor, row-major from storage offset 0
FRESH = frozenset({"full.default", "zeros.default", "new_zeros.default", "new_full.default",
                   "new_empty.default", "empty.memory_format", "ones.default",
                   "new_ones.default"})


def _row_major_strides(size) -> list[int]:
    out, n = [], 1
    for d in reversed(size):
        out.append(n)
        n *= d
    return out[::-1]


def _window(n: Node, g: Graph) -> tuple[int, int] | None:
    """(offset, numel) of `n`'s window where the rewrite applies, else None."""
    if n.op != SCATTER or n.kwargs or len(n.args) not in (4, 5):
        return None
    base, src, size, stride = n.args[:4]
    offset = n.args[4] if len(n.args) == 5 else 0
    if not isinstance(base, Ref) or not isinstance(src, Ref):
        return None
    made = g[base.name]
    if made.op not in FRESH or made.kwarg("memory_format") not in (None,
                                                                  torch.contiguous_format):
        return None
    tb, ts = made.type, g[src.name].type
    if not all(isinstance(t, TensorType) and all(type(d) is int for d in t.shape)
               for t in (tb, ts, n.type)):
        return None
    if offset is None:
        offset = 0
    if not all(type(v) is int for v in (*size, *stride, offset)):
        return None
    if tuple(ts.shape) != tuple(size) or ts.dtype != tb.dtype or offset < 0:
        return None
    if any(d > 1 and s != r for d, s, r in zip(size, stride, _row_major_strides(size))):
        return None
    numel = math.prod(size)
    if numel == 0 or offset + numel > tb.numel:
        return None
    return offset, numel


def rewrite_strided_scatters(g: Graph) -> Graph:
    """Rewrite each `as_strided_scatter` `_window` accepts as described in the module
    docstring; the result keeps the op's name."""
    windows = {n.name: w for n in g.nodes if (w := _window(n, g)) is not None}
    if not windows:
        return g
    taken = {n.name for n in g.nodes}
    nodes: list[Node] = []
    for n in g.nodes:
        if n.name not in windows:
            nodes.append(n)
            continue
        offset, numel = windows[n.name]
        base, src = n.args[0], n.args[1]
        tb = n.type
        if offset == 0 and numel == tb.numel:
            nodes.append(Node(n.name, VIEW, (src, tuple(tb.shape)), type=tb))
            continue
        flat = TensorType((tb.numel,), tb.dtype)
        fb = Node(fresh_name(f"{n.name}_base", taken), VIEW, (base, (tb.numel,)), type=flat)
        fs = Node(fresh_name(f"{n.name}_src", taken), VIEW, (src, (numel,)),
                  type=TensorType((numel,), tb.dtype))
        sc = Node(fresh_name(f"{n.name}_flat", taken), "slice_scatter.default",
                  (Ref(fb.name), Ref(fs.name), 0, offset, offset + numel, 1), type=flat)
        nodes += [fb, fs, sc, Node(n.name, VIEW, (Ref(sc.name), tuple(tb.shape)), type=tb)]
    return Graph(tuple(nodes), g.outputs, g.name)
