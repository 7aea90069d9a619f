"""Schedule consistency: can one kernel schedule cover every op of a group?

After FusionStitching 2018 §4.1–4.2. A schedule splits a work space into
blocks (one program each): a Row schedule gives each block whole trailing
rows, a Column schedule whole leading columns. We keep the part of that
space the code generators need, as a `Space`:

    kind    "flat"   no reductions: every op is pointwise over N elements
            "row"    blocks = B rows of R contiguous elements; reductions over the
                     trailing dims (softmax, layernorm, row sums) stay in a block
            "column" blocks = B columns of R strided elements; reductions over the
                     leading dims (bias gradients, batch statistics)
            "batch"  blocks = B batch entries; small batched GEMMs (block composition)
    blocks  B, row  R

Propagation: every reduction in the group fixes (kind, B, R) and they must
agree (the paper's rule that a Row schedule propagates through Row reductions
only, a Column one through Column reductions only). Every other member must be
per-element (numel B*R) or per-block (numel B) in that space; in a flat space
every member has the group's largest numel or is a scalar. A group whose ops
fall into several independent components is checked per component (kernel
packing runs each component in its own block range).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Graph, Node, TensorType, TupleType
from ..ir.ops import Category, lookup

# Reductions whose reduced dims we can read from the arguments.
_DIM_REDUCTIONS = {
    "sum.dim_IntList", "mean.dim", "amax.default", "amin.default", "max.dim", "min.dim",
    "argmax.default", "argmin.default", "prod.dim_int", "var.correction", "var.dim",
    "var_mean.correction", "std.correction", "any.dim", "any.dims", "all.dim",
    "logsumexp.default", "linalg_vector_norm.default",
}
_FULL_REDUCTIONS = {"sum.default", "mean.default", "max.default", "min.default",
                    "prod.default", "any.default", "all.default"}
SIMPLE_REDUCTIONS = frozenset(_DIM_REDUCTIONS | _FULL_REDUCTIONS)
BATCHED_DOTS = frozenset({"bmm.default"})


@dataclass(frozen=True)
class Space:
    kind: str     # flat | row | column | batch
    blocks: int   # B
    row: int      # R (elements per block); N for flat
    numel: int    # B * R

    def __str__(self) -> str:
        return f"{self.kind}[{self.blocks}x{self.row}]"


class Inconsistent(Exception):
    """No schedule satisfies the group; the message says which op breaks it."""


def _numel(t) -> int:
    if isinstance(t, TensorType):
        return t.numel
    if isinstance(t, TupleType):
        return max((e.numel for e in t.elements if e is not None), default=0)
    return 0


def _reduced_dims(graph: Graph, node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(input shape, sorted reduced dims) of a simple reduction."""
    src = graph[node.args[0].name].type
    shape = src.shape
    if node.op in _FULL_REDUCTIONS:
        return shape, tuple(range(len(shape)))
    # linalg_vector_norm(self, ord, dim, ...) puts its dims after `ord`
    at = 2 if node.op == "linalg_vector_norm.default" else 1
    dims = node.args[at] if len(node.args) > at else node.kwarg("dim")
    if isinstance(dims, int):
        dims = (dims,)
    if not dims:  # None or [] reduce every dim (aten's convention)
        return shape, tuple(range(len(shape)))
    rank = max(len(shape), 1)
    return shape, tuple(sorted({d % rank for d in dims}))


def reduction_space(graph: Graph, node: Node) -> Space:
    """The space one reduction imposes (row, column), or Inconsistent."""
    shape, dims = _reduced_dims(graph, node)
    # size-1 dims do not matter for contiguity: drop them from both sides
    live = [i for i, d in enumerate(shape) if d != 1]
    red = [i for i in live if i in dims]
    keep = [i for i in live if i not in dims]
    numel = 1
    for d in shape:
        numel *= d
    r = 1
    for i in red:
        r *= shape[i]
    b = numel // r if r else 0
    if not red or not keep:
        return Space("row", b, r, numel)  # nothing reduced, or a scalar reduction
    if min(red) > max(keep):
        return Space("row", b, r, numel)
    if max(red) < min(keep):
        return Space("column", b, r, numel)
    raise Inconsistent(f"{node.op} (%{node.name}) reduces dims {list(dims)} of "
                       f"{list(shape)}: neither trailing (Row) nor leading (Column)")


def batch_space(graph: Graph, node: Node) -> Space:
    a = graph[node.args[0].name].type.shape
    b = graph[node.args[1].name].type.shape
    per = a[1] * a[2] + b[1] * b[2] + a[1] * b[2]
    return Space("batch", a[0], per, a[0] * per)


def _fits(numel: int, space: Space) -> bool:
    if numel in (space.numel, space.blocks, 1, 0):
        return True
    if space.kind == "batch":
        return space.blocks > 0 and numel % space.blocks == 0 and numel // space.blocks <= space.row
    return False


def component_space(graph: Graph, names: list[str], escaping: set[str] | None = None) -> Space:
    """The one space every op of a connected component fits, or raise Inconsistent.

    `escaping` names the members whose values leave the group; a member that
    does not escape may also be a smaller broadcast operand (its numel divides
    the space's), recomputed where it is read.
    """
    escaping = set(names) if escaping is None else escaping
    space: Space | None = None
    for name in names:
        node = graph[name]
        if node.op in SIMPLE_REDUCTIONS:
            s = reduction_space(graph, node)
        elif node.op in BATCHED_DOTS:
            s = batch_space(graph, node)
        else:
            continue
        if space is None:
            space = s
        elif (s.kind, s.blocks, s.numel) != (space.kind, space.blocks, space.numel):
            raise Inconsistent(f"%{name} ({node.op}) needs a {s} schedule but the group "
                               f"already has {space}")
    if space is None:
        n = max(_numel(graph[x].type) for x in names)
        space = Space("flat", 1, n, n)
    for name in names:
        node = graph[name]
        if node.op in SIMPLE_REDUCTIONS or node.op in BATCHED_DOTS:
            continue
        d = lookup(node.op)
        if d.category in (Category.TUPLE,):
            continue
        n = _numel(node.type)
        if name not in escaping and n and space.numel % n == 0:
            continue  # an internal broadcast operand, recomputed per use
        if space.kind == "flat":
            if n not in (space.numel, 1, 0):
                raise Inconsistent(f"%{name} ({node.op}) has {n} elements; a pointwise "
                                   f"kernel over {space.numel} elements cannot produce it")
        elif not _fits(_numel(node.type), space):
            raise Inconsistent(f"%{name} ({node.op}) with {_numel(node.type)} elements is "
                               f"neither per-element nor per-block in the {space} schedule")
    return space


def components(graph: Graph, names) -> list[list[str]]:
    """Weakly connected components of the group (edges inside the group only)."""
    members = list(dict.fromkeys(names))
    inside = set(members)
    parent = {m: m for m in members}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for m in members:
        for i in graph[m].inputs:
            if i in inside:
                parent[find(i)] = find(m)
    comps: dict[str, list[str]] = {}
    for m in members:
        comps.setdefault(find(m), []).append(m)
    return list(comps.values())


def escaping_values(graph: Graph, names) -> set[str]:
    """Members whose values are read outside the group or returned."""
    inside = set(names)
    outputs = graph.output_names
    return {n for n in inside
            if n in outputs or any(u not in inside for u in graph.users[n])}


def group_spaces(graph: Graph, names) -> list[Space]:
    """One space per component, in component order; raises Inconsistent."""
    escaping = escaping_values(graph, names)
    return [component_space(graph, c, escaping) for c in components(graph, names)]
