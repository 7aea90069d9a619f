"""A value saved for the backward is saved channels-last when it is computed from
channels-last values.

conv_layout runs convolutions channels-last: their results are NHWC memory read as
NCHW (`permute(y_nhwc, NCHW)`), and the kernels that read them (batch norm, activation)
loop over the NHWC order. What such a kernel saves for the backward (a training forward's
free outputs: a SiLU's sigmoid, a normalised value) was stored row-major NCHW, one
scattered element per channel across that loop (mobilevit_train_cl's batch statistics
kernels, `bench.groups`: 3.4-3.8x Inductor's time), and the backward's kernels, which
loop over the NHWC gradient, read it across their grain once per pass (2-7x). Inductor
keeps a pointwise result in its input's layout.

So a free output V computed elementwise from channels-last values (`channels_last_values`:
the NCHW views of NHWC memory conv_layout makes, graph inputs with channels-last strides,
and elementwise results whose same-shape inputs are all such) is spelled as eager would lay
out a channels-last result: `permute(clone(permute(V, NHWC)), NCHW)` (output_layouts'
spelling). The kernel computing V stores the clone in its own loop order, and the
backward reads the view through its strides (its inputs' strides are recorded at
compile time: frontend/fx_to_ir). A V that already has an NHWC copy (a convolution's
input) is saved as that copy. read_copies, after this pass, then has V's other readers
read the copy, so V is stored once.

Values between kernels too (`_copy_between_kernels`, forward and backward): a value our
kernels compute elementwise from channels-last values, not a graph output, read by more
than one op or by a reduction, and read only by ops whose kernels loop over NHWC order
(elementwise ops of channels-last values, NHWC copies, batch statistics), gets an NHWC
copy that read_copies has its readers read (mobilevit_train_cl's gradient summed from two
convolutions' input gradients and read by the batch statistics' backward was stored NCHW
across the grain: `bench.groups` 4.6-5.9x Inductor). bench.ab, 21 rounds, one thread,
small size, without -> with (2026-12-03): mobilevit_train_cl 26.5 -> 25.4 ms,
mobilenet_v2_train_cl 26.0 -> 25.6, mobilevit_train 24.0 -> 23.6, mobilenet_v2_train
17.8 -> 17.7, resnet_train_cl 4.29 -> 3.89, resnet_train 3.34 -> 3.35.

Only on targets that run convolutions channels-last (Target.conv_layout), for values our
kernels compute (elementwise or data movement, not a view, a parameter or a library
call's result), of rank 4, read by our kernels alone (a library call, such as a 1x1
convolution conv_layout leaves NCHW, would be handed the copy and choose its own layout
from it), and whose layout nobody else sees (a value also at a seen output position
keeps its layout).
"""
from __future__ import annotations

import torch

from ..ir.graph import PARAMETER, Graph, Node, Ref, TensorType, fresh_name
from ..ir.ops import Category, lookup
from .conv_layout import CLONE, PERMUTE, TO_NCHW, TO_NHWC, channels_last_input, seen_values
from .output_layouts import spell_output_layouts
from .read_copies import nhwc_copy_permute

_COMPUTED = frozenset({Category.ELEMENTWISE, Category.DATA_MOVEMENT})


def save_channels_last(g: Graph, target=None, free_outputs: frozenset[int] = frozenset()
                       ) -> Graph:
    """`g` with each free output computed from channels-last values saved channels-last
    (module docstring); `g` itself where there is none or the target keeps NCHW."""
    if getattr(target, "conv_layout", None) != "channels_last":
        return g
    g = _copy_between_kernels(g)
    if not free_outputs:
        return g
    cl = channels_last_values(g)
    seen = seen_values(g, frozenset(free_outputs))
    copies = _nhwc_copies(g)
    users = g.users
    orders: dict[int, tuple[int, ...]] = {}
    to_copy: dict[int, str] = {}
    for k in sorted(free_outputs):
        o = g.outputs[k] if 0 <= k < len(g.outputs) else None
        if not isinstance(o, Ref) or o.name not in cl or o.name in seen:
            continue
        v = g[o.name]
        d = lookup(v.op)
        if v.op == PARAMETER or d.view or d.category not in _COMPUTED or \
                not all(_kernel_reads(g[u]) for u in users[v.name]):
            continue
        if v.name in copies:
            to_copy[k] = copies[v.name]
        else:
            orders[k] = TO_NHWC
    if not orders and not to_copy:
        return g
    if to_copy:
        taken = {n.name for n in g.nodes}
        nodes = list(g.nodes)
        outputs = list(g.outputs)
        views: dict[str, Ref] = {}
        for k, c in to_copy.items():
            if c not in views:
                back = Node(fresh_name(f"{outputs[k].name}_saved", taken), PERMUTE,
                            (Ref(c), TO_NCHW), type=g[outputs[k].name].type)
                nodes.append(back)
                views[c] = Ref(back.name)
            outputs[k] = views[c]
        g = Graph(tuple(nodes), tuple(outputs), g.name)
    return spell_output_layouts(g, orders)


save_channels_last.needs_context = True


def _copy_between_kernels(g: Graph) -> Graph:
    """`g` with an NHWC copy after each value that our kernels compute from channels-last
    values and that only kernels looping over NHWC order read (`_nhwc_reader`): a
    gradient summed from two convolutions' input gradients, read by the batch statistics'
    backward. read_copies then has its readers read the copy."""
    cl = channels_last_values(g)
    outputs = {o.name for o in g.outputs if isinstance(o, Ref)}
    copies = _nhwc_copies(g)
    users = g.users
    picked = set()
    for v in g.nodes:
        if v.name not in cl or v.name in outputs or v.name in copies or \
                lookup(v.op).category != Category.ELEMENTWISE or not users[v.name]:
            continue
        readers = [g[u] for u in users[v.name]]
        # one elementwise reader is fused with v: nothing stored between them
        crosses = len(readers) > 1 or lookup(readers[0].op).category == Category.REDUCE
        if crosses and all(_nhwc_reader(r, cl) for r in readers):
            picked.add(v.name)
    if not picked:
        return g
    taken = {n.name for n in g.nodes}
    nodes: list[Node] = []
    for n in g.nodes:
        nodes.append(n)
        if n.name in picked:
            moved = TensorType(tuple(n.type.shape[d] for d in TO_NHWC), n.type.dtype)
            p = Node(fresh_name(f"{n.name}_nhwc", taken), PERMUTE, (Ref(n.name), TO_NHWC),
                     type=moved)
            c = Node(fresh_name(f"{n.name}_stored_nhwc", taken), CLONE, (Ref(p.name),),
                     (("memory_format", torch.contiguous_format),), type=moved)
            nodes += [p, c]
    return Graph(tuple(nodes), g.outputs, g.name)


def _nhwc_reader(n: Node, cl: set[str]) -> bool:
    """n's kernel loops over NHWC order: an elementwise op of channels-last values, an
    NHWC permute (a copy's), or a reduction over N, H and W (batch statistics)."""
    if n.op == PERMUTE:
        return tuple(n.args[1]) == TO_NHWC
    d = lookup(n.op)
    if d.view:
        return False
    if d.category == Category.ELEMENTWISE:
        return n.name in cl
    if d.category == Category.REDUCE and len(n.args) > 1 and \
            isinstance(n.args[1], (tuple, list)):
        return sorted(k % 4 for k in n.args[1]) == [0, 2, 3]
    return False


def channels_last_values(g: Graph) -> set[str]:
    """4-D values whose memory is (or whose kernel loops over) NHWC order: `permute(x,
    NCHW)` views (conv_layout's results and gradients), graph inputs with recorded
    channels-last strides, and elementwise results whose same-shape inputs are all such
    values (one NCHW input of that shape makes its kernel loop NCHW, or either way: not
    taken)."""
    cl: set[str] = set()
    for n in g.nodes:
        t = n.type
        if not isinstance(t, TensorType) or t.rank != 4:
            continue
        if n.op == PERMUTE and len(n.args) == 2 and tuple(n.args[1]) == TO_NCHW:
            cl.add(n.name)
        elif n.op == PARAMETER:
            if channels_last_input(n):
                cl.add(n.name)
        elif lookup(n.op).category == Category.ELEMENTWISE:
            full = [r.name for r in _refs(n) if g[r.name].type.shape == t.shape]
            if full and all(r in cl for r in full):
                cl.add(n.name)
    return cl


def _kernel_reads(n: Node) -> bool:
    """n reads its inputs in a kernel of ours (through their strides), not in a library
    call whose own layout choice follows its input's (a convolution left NCHW) nor
    through a view (a GEMM's reshape would copy a channels-last value)."""
    if n.op == PERMUTE:             # the first half of an NHWC copy, which is a kernel's
        return tuple(n.args[1]) == TO_NHWC
    d = lookup(n.op)
    return not d.view and d.category in (Category.ELEMENTWISE, Category.DATA_MOVEMENT,
                                         Category.REDUCE)


def _refs(n: Node):
    return [a for a in n.args if isinstance(a, Ref)]


def _nhwc_copies(g: Graph) -> dict[str, str]:
    """V -> the name of a row-major `clone(permute(V, NHWC))` in g."""
    found: dict[str, str] = {}
    for n in g.nodes:
        p = nhwc_copy_permute(g, n)
        if p is not None:
            found.setdefault(p.args[0].name, n.name)
    return found
