"""The query of torch's CPU flash attention stored in the layout its output is read in.

`_scaled_dot_product_flash_attention_for_cpu(q, k, v)` returns its output [B, H, S, D]
in q's memory order: row-major for a row-major q, and [B, S, H, D] in memory (each
token's heads side by side) for a q that is a transposed [B, S, H, D] tensor. Models
read the output as `transpose(1, 2).reshape(B, S, H * D)` for the output projection: a
view of the second, a copy of the first. A query that our kernels compute (rotary
embeddings: `q * cos + rotate_half(q) * sin` of the projection's transposed view) is
stored row-major [B, H, S, D], so every attention paid that copy (qwen2_train, small: a
reshape that copied, 10 us of a 0.7 ms step, and the copy saved for the backward's weight
gradient). Inductor stores such a query in [B, S, H, D] order (its pointwise kernels
keep their input's order) and its attention output's reshape is a view.

So a query computed by a kernel, whose attention output is read through
`permute(.., [0, 2, 1, 3])`, is handed to the attention as

    permute(clone(permute(q, [0, 2, 1, 3])), [0, 2, 1, 3])

as passes/conv_layout.py hands a convolution a channels-last input: the copy fuses into
q's producer, which then stores q in [B, S, H, D] order instead of [B, H, S, D] (no
extra pass over memory; fusion/plan.py `detach_views` keeps the outer permute out of
the kernel). A query saved for the backward (a free graph output) is saved as that copy,
so its producer stores it once and the backward's attention gets the forward's layout.

Correctness never depends on the layout: kernels read their inputs through their
run-time strides and torch's attention takes any strides. Not rewritten: a query that
is a view or a library call's result (its layout is another op's choice; a projection's
transposed view is [B, S, H, D] already), one another op reads too (its producer would
store it in both orders), a query or an attention output whose layout the caller sees
(a graph output outside `free_outputs`), and outputs read otherwise.
"""
from __future__ import annotations

import torch

from ..ir.graph import GETITEM, Graph, Node, Ref, TensorType, fresh_name
from ..ir.ops import Category, lookup
from .conv_layout import seen_values

ATTENTION = "_scaled_dot_product_flash_attention_for_cpu.default"
PERMUTE = "permute.default"
CLONE = "clone.default"
HEADS_INNER = (0, 2, 1, 3)        # [B, H, S, D] <-> [B, S, H, D], its own inverse
FLOATS = ("f32", "bf16", "f16", "f64")


def attention_query_layout(g: Graph, target=None, free_outputs: frozenset[int] = frozenset()
                           ) -> Graph:
    """Rewrite each attention of the module docstring; `g` itself when none qualifies.
    `free_outputs`: positions of graph outputs whose layout the caller does not see."""
    if not any(n.op == ATTENTION for n in g.nodes):
        return g
    seen = seen_values(g, frozenset(free_outputs))
    users = g.users
    taken = {n.name for n in g.nodes}
    nodes: list[Node] = []
    at_output: dict[str, Ref] = {}
    for n in g.nodes:
        if not _rewritable(g, n, users, seen):
            nodes.append(n)
            continue
        q = n.args[0]
        tq = g[q.name].type
        inner = TensorType(tuple(tq.shape[d] for d in HEADS_INNER), tq.dtype)
        qp = Node(fresh_name(f"{n.name}_q_bshd", taken), PERMUTE, (q, HEADS_INNER), type=inner)
        qc = Node(fresh_name(f"{n.name}_q_copy", taken), CLONE, (Ref(qp.name),),
                  (("memory_format", torch.contiguous_format),), type=inner)
        qb = Node(fresh_name(f"{n.name}_q", taken), PERMUTE, (Ref(qc.name), HEADS_INNER),
                  type=tq)
        at_output.setdefault(q.name, Ref(qb.name))
        nodes += [qp, qc, qb, n.replace(args=(Ref(qb.name),) + tuple(n.args[1:]))]
    if not at_output:
        return g
    outputs = tuple(at_output.get(o.name, o) if isinstance(o, Ref) and k in free_outputs
                    else o for k, o in enumerate(g.outputs))
    return Graph(tuple(nodes), outputs, g.name)


attention_query_layout.needs_context = True


def _rewritable(g: Graph, n: Node, users: dict, seen: set[str]) -> bool:
    if n.op != ATTENTION or not n.args or not isinstance(n.args[0], Ref):
        return False
    q = g[n.args[0].name]
    if not isinstance(q.type, TensorType) or q.type.rank != 4 or q.type.dtype not in FLOATS \
            or q.type.numel == 0 or q.name in seen:
        return False
    d = lookup(q.op)
    if d.view or d.category not in (Category.ELEMENTWISE, Category.DATA_MOVEMENT):
        return False            # a view, a parameter, a library call's result
    if users[q.name] != (n.name,):
        return False            # read elsewhere too: its producer would store it twice
    out = [g[u] for u in users[n.name] if g[u].op == GETITEM and g[u].args[1] == 0]
    if len(out) != 1 or out[0].name in seen:
        return False
    return any(g[u].op == PERMUTE and tuple(g[u].args[1]) == HEADS_INNER
               for u in users[out[0].name])
