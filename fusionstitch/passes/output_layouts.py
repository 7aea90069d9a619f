"""Graph outputs stored in the memory layout eager gives them.

The caller sees some outputs in another dense order than row-major: an elementwise
result of a channels-last image is channels-last in eager, and Inductor returns it so
(frontend/output_layout.py reads eager's orders from the traced graph). Our kernels
store row-major, and the frontend then copied such an output into eager's strides per
call: a second pass over it (an elementwise op of a channels-last [4, 64, 64, 64]: 3.5
ms where Inductor's one kernel takes 0.27).

So such an output V is spelled as eager lays it out: `permute(clone(permute(V, order)),
inverse)`, with `order` eager's dims outermost first. The kernel computing V stores the
clone (row-major in that order: eager's memory), V itself is not stored unless something
else reads it (codegen/layout_copies.py computes it once for both), and the output is a
view of the clone with eager's strides, which the frontend then finds in place (no copy).

Only for values our kernels compute (elementwise, reductions, data movement): a
parameter, a view (an alias the frontend keeps as it is), a GEMM's or a library call's
result (torch lays those out itself, usually as eager does), and a value another output
is a view of (eager's outputs alias it: the frontend's copy keeps that) are left to the
frontend.
Runs after fold_views, which would cancel the permute pair.
"""
from __future__ import annotations

import torch

from ..ir.graph import PARAMETER, Graph, Node, Ref, TensorType, fresh_name
from ..ir.ops import Category, lookup
from .conv_layout import CLONE, PERMUTE

_COMPUTED = frozenset({Category.ELEMENTWISE, Category.REDUCE, Category.DATA_MOVEMENT})


def spell_output_layouts(g: Graph, orders: dict[int, tuple[int, ...]]) -> Graph:
    """`g` with each output at a position of `orders` (position -> eager's order of its
    dims in memory, outermost first) stored in that order (module docstring); `g` itself
    where there is none to spell."""
    if not orders:
        return g
    viewed = _viewed_by_outputs(g)
    taken = {n.name for n in g.nodes}
    nodes = list(g.nodes)
    outputs = list(g.outputs)
    spelled: dict[tuple[str, tuple[int, ...]], Ref] = {}
    for pos, order in sorted(orders.items()):
        o = outputs[pos] if 0 <= pos < len(outputs) else None
        if not isinstance(o, Ref):
            continue
        v = g[o.name]
        order = tuple(order)
        if not _spellable(v, order) or v.name in viewed:
            continue
        key = (v.name, order)
        if key not in spelled:
            inverse = tuple(order.index(d) for d in range(len(order)))
            shape = tuple(v.type.shape[d] for d in order)
            moved = TensorType(shape, v.type.dtype)
            p = Node(fresh_name(f"{v.name}_in_eager_order", taken), PERMUTE,
                     (Ref(v.name), order), type=moved)
            c = Node(fresh_name(f"{v.name}_eager_layout", taken), CLONE, (Ref(p.name),),
                     (("memory_format", torch.contiguous_format),), type=moved)
            back = Node(fresh_name(f"{v.name}_as_eager", taken), PERMUTE,
                        (Ref(c.name), inverse), type=v.type)
            nodes += [p, c, back]
            spelled[key] = Ref(back.name)
        outputs[pos] = spelled[key]
    if not spelled:
        return g
    return Graph(tuple(nodes), tuple(outputs), g.name)


def _viewed_by_outputs(g: Graph) -> set[str]:
    """Values that another graph output is a view of: in eager that output aliases the
    value's memory, which the frontend keeps (it copies the value into eager's layout
    and views the copy), so such a value is left to it."""
    out = set()
    for o in g.outputs:
        if not isinstance(o, Ref):
            continue
        n = g[o.name]
        while lookup(n.op).view and n.args and isinstance(n.args[0], Ref):
            n = g[n.args[0].name]
            out.add(n.name)
    return out


def _spellable(v: Node, order: tuple[int, ...]) -> bool:
    if v.op == PARAMETER or not isinstance(v.type, TensorType):
        return False
    d = lookup(v.op)
    if d.view or d.category not in _COMPUTED:
        return False
    rank = len(v.type.shape)
    return rank > 1 and sorted(order) == list(range(rank)) and order != tuple(range(rank))


spell_output_layouts.needs_orders = True
