"""Matrix-vector products become a broadcast multiply and a sum, which fusion can stitch.

A (batched) matrix multiply whose result has one row or one column (M == 1 or
N == 1: `bmm(a[B,M,K], x[B,K,1])`, `mm(v[1,K], w[K,N])`) does two flops per
element it reads: it is memory bound, and a GEMM library call buys nothing
over a reduction. As a library call it is also a wall that fusion cannot cross:
the vector's producer and the result's consumers run as separate kernels, and
the matrix is read once more per call. As `sum(mul(a, x^T), K)` it is an
elementwise op and a reduction, which the planner fuses with its neighbours
(capsule routing's weighted sums and agreements are these; TorchInductor's CPU
lowering of bmm makes the same rewrite).

Only f32 and f64: in a half type `mul` rounds each product before the sum,
while the GEMM accumulates unrounded products, so the numbers would differ.

A product over one term (K == 1: `bmm(g[B,M,1], v[B,1,N])`, the backward of a
matrix-vector product) is an outer product, a broadcast `mul` alone: each element is
one product rounded once, as the GEMM rounds it, in every float type (a product of two
halves is exact in fp32).
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, Ref, TensorType, fresh_name

MATMULS = frozenset({"bmm.default", "mm.default"})
FLOAT_TYPES = frozenset({"f32", "f64"})
OUTER_TYPES = FLOAT_TYPES | {"f16", "bf16"}


def _vector_product(n: Node, types: dict[str, TensorType]) -> bool:
    if n.op not in MATMULS or n.kwargs or len(n.args) != 2:
        return False
    if not all(isinstance(a, Ref) for a in n.args):
        return False
    a, b = (types.get(r.name) for r in n.args)
    if not isinstance(a, TensorType) or not isinstance(b, TensorType) \
            or not isinstance(n.type, TensorType):
        return False
    if len({a.dtype, b.dtype, n.type.dtype}) != 1 or n.type.numel == 0:
        return False
    if a.shape[-1] == 1:
        return a.dtype in OUTER_TYPES
    m, n_cols = a.shape[-2], b.shape[-1]
    return a.dtype in FLOAT_TYPES and (m == 1 or n_cols == 1)


def decompose_matvec(g: Graph) -> Graph:
    """Rewrite each f32/f64 mm/bmm with M == 1 or N == 1 as mul + sum (the sum keeps the
    name), and each with K == 1 as a mul (of any float type)."""
    types = {n.name: n.type for n in g.nodes}
    if not any(_vector_product(n, types) for n in g.nodes):
        return g
    taken = set(types)
    nodes: list[Node] = []
    for n in g.nodes:
        if not _vector_product(n, types):
            nodes.append(n)
            continue
        a, b = n.args
        ta, tb = types[a.name], types[b.name]
        rank = ta.rank
        swap = tuple(range(rank - 2)) + (rank - 1, rank - 2)
        lead = ta.shape[:-2]
        m, k, cols = ta.shape[-2], ta.shape[-1], tb.shape[-1]
        if k == 1:
            # out[.., i, j] = a[.., i, 0] * b[.., 0, j]: a column times a row
            nodes.append(Node(n.name, "mul.Tensor", (a, b), type=n.type))
            continue
        if cols == 1:
            # out[.., i, 0] = sum_j a[.., i, j] * b[.., j, 0]: b's column as a row
            vec = Node(fresh_name(f"{n.name}_vec", taken), "permute.default", (b, swap),
                       type=TensorType(lead + (1, k), tb.dtype))
            prod = Node(fresh_name(f"{n.name}_prod", taken), "mul.Tensor", (a, Ref(vec.name)),
                        type=TensorType(lead + (m, k), ta.dtype))
            dim = rank - 1
        else:
            # out[.., 0, i] = sum_j a[.., 0, j] * b[.., j, i]: a's row as a column
            vec = Node(fresh_name(f"{n.name}_vec", taken), "permute.default", (a, swap),
                       type=TensorType(lead + (k, 1), ta.dtype))
            prod = Node(fresh_name(f"{n.name}_prod", taken), "mul.Tensor", (Ref(vec.name), b),
                        type=TensorType(lead + (k, cols), ta.dtype))
            dim = rank - 2
        total = Node(n.name, "sum.dim_IntList", (Ref(prod.name), (dim,), True), type=n.type)
        nodes += [vec, prod, total]
    return Graph(tuple(nodes), g.outputs, g.name)
