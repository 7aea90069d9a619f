"""A sum of matrix products becomes a chain of `addmm`s: the GEMM adds into the sum.

A weight used at several places (an unrolled RNN's cell, a layer shared across depth,
tied embeddings) gets its gradient as a sum of products, one per use, which
AOTAutograd spells as a chain of adds:

    %s1 = add(mm(a1, b1), mm(a2, b2))      ->   %s1 = addmm(mm(a1, b1), a2, b2)
    %s2 = add(%s1, mm(a3, b3))             ->   %s2 = addmm(%s1, a3, b3)

Unfused, every product is a matrix of its own in memory (50 steps of a [384, 1024]
gradient: 75 MB written by the GEMMs and read back by the sum), while `addmm` with
beta 1 adds each product tile into the running sum as the GEMM stores it, and the
sum never leaves the cache. TorchInductor's post-grad patterns make the same
rewrite.

Only where the other addend is itself a GEMM's result (mm, addmm, or a link already
rewritten) of the product's exact shape and dtype: an accumulation chain. An add of a
product and any other value (a residual) stays an elementwise add, which the planner
fuses with the ops around it. Only f32 and f64: in a half type `addmm` adds the
unrounded product where eager rounds it first.

The product must have no other reader (it is no longer computed on its own). The
numbers are those of a GEMM that accumulates in a different order: equal up to the
rounding any GEMM algorithm change gives.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, Ref, TensorType

PRODUCT = "mm.default"
GEMMS = frozenset({"mm.default", "addmm.default"})
FLOAT_TYPES = frozenset({"f32", "f64"})


def _plain_product(n: Node | None, t: TensorType) -> bool:
    return (n is not None and n.op == PRODUCT and not n.kwargs and len(n.args) == 2
            and all(isinstance(a, Ref) for a in n.args) and n.type == t)


def _addend(n: Node | None, t: TensorType, gemm_results: set[str]) -> bool:
    return n is not None and n.name in gemm_results and n.type == t


def _link(n: Node, nodes: dict[str, Node], users: dict, outputs: frozenset,
          gemm_results: set[str]) -> tuple[Node, str] | None:
    """(the product, the addend's name) when `n` adds a single-use product to a GEMM's
    result of its shape and dtype; the later product in graph order is the one folded."""
    if n.op != "add.Tensor" or n.kwargs or len(n.args) != 2:
        return None
    a, b = n.args
    t = n.type
    if not (isinstance(a, Ref) and isinstance(b, Ref)) or a.name == b.name:
        return None
    if not isinstance(t, TensorType) or t.dtype not in FLOAT_TYPES or t.numel == 0:
        return None
    for prod, other in ((b, a), (a, b)):   # prefer b: in a chain it is the new product
        p = nodes.get(prod.name)
        if not _plain_product(p, t) or users[prod.name] != (n.name,) or prod.name in outputs:
            continue
        if _addend(nodes.get(other.name), t, gemm_results):
            return p, other.name
    return None


def accumulate_products(g: Graph) -> Graph:
    """Rewrite each f32/f64 `add(product, gemm result)` of one shape as an `addmm` into
    the GEMM result (the add keeps its name); the folded product is dropped."""
    nodes = {n.name: n for n in g.nodes}
    users, outputs = g.users, g.output_names
    gemm_results = {n.name for n in g.nodes if n.op in GEMMS}
    folded: dict[str, Node] = {}      # add's name -> its addmm
    dropped: set[str] = set()
    for n in g.nodes:
        link = _link(n, nodes, users, outputs, gemm_results)
        if link is None:
            continue
        prod, into = link
        lhs, rhs = prod.args
        folded[n.name] = Node(n.name, "addmm.default", (Ref(into), lhs, rhs), type=n.type)
        dropped.add(prod.name)
        gemm_results.add(n.name)
    if not folded:
        return g
    return Graph(tuple(folded.get(n.name, n) for n in g.nodes if n.name not in dropped),
                 g.outputs, g.name)
