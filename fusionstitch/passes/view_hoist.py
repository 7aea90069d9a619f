"""Views of an elementwise result read its operands instead: the result is never made whole.

A mean's backward broadcasts the gradient over the reduced dim and scales it
(`div(expand(g), n)`); when the mean's input was a stack of per-step outputs, the
stack's backward then selects each step of that (an unrolled RNN over 28 steps: 28
`select(div(expand(g), 28), 1, t)`). Planned as written, the elementwise op is a
kernel that writes the whole broadcast (7 MB for birnn's full size) and every step's
kernel reads a strided slice of it. Moved above the op, each view reads the op's
operands, and a select or slice of a broadcast along a broadcast dim is the broadcast's
source itself:

    select(div(expand(unsqueeze(g, 1)), 28), 1, t)  ->  div(select(expand(...), 1, t), 28)
                                                    ->  div(expand(squeeze(unsqueeze(g, 1), 1)), 28)

which fold_views reduces to `div(g, 28)` and CSE to one node for every step.

- An elementwise op is rewritten when every reader of its result is a select or slice
  of it, neither it nor a view is a graph output, the views together hold no more
  elements than the result (no overlapping slices computed twice), every tensor operand
  has the result's shape (it gets the same view) or is 0-d (it stays), and each view's
  result keeps at least one dim (type promotion between a 0-d and a dimensioned tensor
  differs). The op is computed per view, named as the view.
- `select`/`slice` of `expand(u)` along a dim where `u` has size 1 (or that expand
  added) becomes `expand` of `u` squeezed there: no element is read twice.

Repeats until nothing changes (a chain of elementwise ops moves one op per round).
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, Ref, TensorType, fresh_name
from ..ir.ops import Category, lookup

VIEWS = frozenset({"select.int", "slice.Tensor"})
EXPAND = "expand.default"
MAX_ROUNDS = 16


def _elementwise(n: Node) -> bool:
    return lookup(n.op).category == Category.ELEMENTWISE and not lookup(n.op).random


def _int_numel(t) -> int | None:
    """The element count of a tensor type of static sizes; None for a symbolic one."""
    if not isinstance(t, TensorType):
        return None
    n = t.numel
    return n if type(n) is int else None


def _hoistable(e: Node, g: Graph, users: dict, outputs: frozenset) -> bool:
    if not _elementwise(e) or e.name in outputs or not isinstance(e.type, TensorType):
        return False
    readers = users[e.name]
    if not readers:
        return False
    total = 0
    for u in readers:
        v = g[u]
        if v.op not in VIEWS or u in outputs or not v.args or v.args[0] != Ref(e.name) \
                or any(isinstance(a, Ref) for a in v.args[1:]) or v.kwargs \
                or not isinstance(v.type, TensorType) or v.type.rank == 0:
            return False
        n = _int_numel(v.type)
        if n is None:
            return False
        total += n
    whole = _int_numel(e.type)
    if whole is None or total > whole:
        return False
    if any(isinstance(v, Ref) or isinstance(v, (list, tuple)) and
           any(isinstance(x, Ref) for x in v) for _, v in e.kwargs):
        return False
    for a in e.args:
        if isinstance(a, Ref):
            t = g[a.name].type
            if not isinstance(t, TensorType) or (t.shape != e.type.shape and t.rank != 0):
                return False
        elif isinstance(a, (list, tuple)) and any(isinstance(x, Ref) for x in a):
            return False
    return True


def _view_of_broadcast(v: Node, g: Graph, taken: set) -> list[Node] | None:
    """`v` (a select or slice of an expand along a broadcast dim) as a squeeze (select)
    and an expand of the expand's source; None where it is not one."""
    src = g[v.args[0].name]
    if src.op != EXPAND or not isinstance(src.args[0], Ref):
        return None
    u = g[src.args[0].name]
    if not isinstance(u.type, TensorType):
        return None
    rank, urank = src.type.rank, u.type.rank
    dim = (v.args[1] if len(v.args) > 1 else 0) % rank if rank else 0
    lead = rank - urank                  # dims expand added in front of u's
    if dim >= lead and not (type(u.type.shape[dim - lead]) is int
                            and u.type.shape[dim - lead] == 1):
        return None                      # a dim of u's own (or a symbolic one): not a broadcast
    out = []
    base = Ref(u.name)
    if v.op == "select.int" and dim >= lead:
        shape = u.type.shape[:dim - lead] + u.type.shape[dim - lead + 1:]
        sq = Node(fresh_name(f"{v.name}_src", taken), "squeeze.dim", (base, dim - lead),
                  type=TensorType(shape, u.type.dtype))
        taken.add(sq.name)
        out.append(sq)
        base = Ref(sq.name)
    out.append(Node(v.name, EXPAND, (base, tuple(v.type.shape)), type=v.type))
    return out


def _round(g: Graph) -> Graph:
    users, outputs = g.users, g.output_names
    hoisted = {n.name for n in g.nodes if _hoistable(n, g, users, outputs)}
    taken = {n.name for n in g.nodes}
    nodes: list[Node] = []
    changed = False
    for n in g.nodes:
        if n.name in hoisted:
            changed = True
            continue
        if n.op in VIEWS and n.args and isinstance(n.args[0], Ref):
            src = g[n.args[0].name]
            if src.name in hoisted:
                args = []
                for a in src.args:
                    if isinstance(a, Ref) and g[a.name].type.rank != 0:
                        t = g[a.name].type
                        view = Node(fresh_name(f"{n.name}_{a.name}", taken), n.op,
                                    (a,) + tuple(n.args[1:]),
                                    type=TensorType(n.type.shape, t.dtype))
                        taken.add(view.name)
                        nodes.append(view)
                        a = Ref(view.name)
                    args.append(a)
                nodes.append(Node(n.name, src.op, tuple(args), src.kwargs, type=n.type))
                continue
            if n.name not in outputs and isinstance(n.type, TensorType) and \
                    not any(isinstance(a, Ref) for a in n.args[1:]) and not n.kwargs:
                moved = _view_of_broadcast(n, g, taken)
                if moved is not None:
                    nodes.extend(moved)
                    changed = True
                    continue
        nodes.append(n)
    return Graph(tuple(nodes), g.outputs, g.name) if changed else g


def hoist_views(g: Graph) -> Graph:
    """Move selects and slices above the elementwise ops they read, and onto the source
    of the broadcasts they read (the module docstring)."""
    for _ in range(MAX_ROUNDS):
        new = _round(g)
        if new is g:
            return g
        g = new
    return g
