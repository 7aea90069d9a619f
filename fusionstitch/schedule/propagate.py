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
            "general" blocks = B kept indices, R reduced elements gathered with strides
                     (reductions over middle dims, e.g. batch-norm statistics)
            "batch"  blocks = B programs over the batch entries of small (batched) GEMMs;
                     a program holds its entries' tiles and everything computed from them
                     on chip (block composition); layout = (GEMM batch entries,)
    blocks  B, row  R

Propagation: every reduction in the group fixes (kind, B, R) and they must
agree (the paper's rule that a Row schedule propagates through Row reductions
only, a Column one through Column reductions only). Every other member must be
per-element (numel B*R) or per-block (numel B) in that space; in a flat space
every member has the group's largest numel or is a scalar. A group whose ops
fall into several independent components is checked per component (kernel
packing runs each component in its own block range).

A group's schedule (`Schedule`, made by `group_schedule`) is decided once, by the
planner that makes the group: the plan carries it (fusion/plan.py's `Group.schedule`)
and lowering reads it from there (codegen/lower.py's `lower_group`); only a candidate
group, which has no plan yet, is scheduled by lowering itself, with the same function.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Graph, Node, TensorType, TupleType
# the op kinds are flags of the op table (ir/ops.py); these names are its views
from ..ir.ops import FULL_REDUCTIONS, FUSIBLE_DOTS, SIMPLE_REDUCTIONS, Category, lookup
from ..ir.symbolic import recording


@dataclass(frozen=True)
class Space:
    kind: str     # flat | row | column | general | batch
    blocks: int   # B
    row: int      # R (elements per block); N for flat
    numel: int    # B * R
    layout: tuple = ()   # general reductions: (input shape, reduced dims)
    staged: bool = False  # a single-program staged component (see component_space)

    def __str__(self) -> str:
        return f"{self.kind}[{self.blocks}x{self.row}]"


class Inconsistent(Exception):
    """No schedule satisfies the group; the message says which op breaks it."""


def type_numel(t) -> int:
    if isinstance(t, TensorType):
        return t.numel
    if isinstance(t, TupleType):
        return max((e.numel for e in t.elements if e is not None), default=0)
    return 0


def reduced_dims(graph: Graph, node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(input shape, sorted reduced dims) of a simple reduction."""
    src = graph[node.args[0].name].type
    shape = src.shape
    if node.op in FULL_REDUCTIONS:
        return shape, tuple(range(len(shape)))
    # linalg_vector_norm(self, ord, dim, ...) puts its dims after `ord`
    at = 2 if node.op == "linalg_vector_norm.default" else 1
    dims = node.args[at] if len(node.args) > at else node.kwarg("dim")
    if isinstance(dims, int):
        dims = (dims,)
    if not dims or not shape:
        # None or [] reduce every dim (aten's convention); a 0-d input has no dims to
        # reduce, whatever `dim` says (aten takes 0 and -1 there)
        return shape, tuple(range(len(shape)))
    return shape, tuple(sorted({d % len(shape) for d in dims}))


def reduction_space(graph: Graph, node: Node) -> Space:
    """The space one reduction imposes (row, column), or Inconsistent."""
    shape, dims = reduced_dims(graph, node)
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
    # reduced dims interleave kept ones: each block gathers its R elements with strides
    return Space("general", b, r, numel, (tuple(shape), tuple(red)))


def dot_dims(graph: Graph, node: Node) -> tuple[int, int, int, int]:
    """(batch, m, n, k) of mm / addmm / bmm."""
    lhs, rhs = (node.args[1], node.args[2]) if node.op == "addmm.default" else node.args[:2]
    a, b = graph[lhs.name].type.shape, graph[rhs.name].type.shape
    if len(a) == 3:
        return a[0], a[1], b[2], a[2]
    return 1, a[0], b[1], a[1]


# Block composition: the elements one block may keep on chip for its batch entry.
# 16K fp32 = 64 KiB, under a third of a Hopper block's 227 KiB of shared memory, leaving
# room for the GEMM operand tiles and double buffering.
BLOCK_ELEMENTS_MAX = 16384


def _fits(numel: int, space: Space) -> bool:
    if numel in (space.numel, space.blocks, 1, 0):
        return True
    if space.kind == "batch":
        return numel % space.blocks == 0 and numel // space.blocks <= space.row
    return False


def _split(shape, parts: int) -> bool:
    """Do the leading dims of `shape` hold exactly `parts` entries (a prefix product)?"""
    prod = 1
    for d in (*shape, None):
        if prod == parts:
            return True
        if d is None or prod > parts:
            return False
        prod *= d
    return False


def batch_programs(batch: int, kept_shapes) -> int:
    """Programs of a block composition over `batch` GEMM entries: the most (a divisor of
    `batch`) for which every reduction stays inside one program, i.e. each kept shape starts
    with the programs' entries. A softmax over the heads of [batch * heads] scores takes
    whole batches per program (the 2019 paper's layout constraint: a block reads back only
    what it computed itself)."""
    if all(_split(k, batch) for k in kept_shapes):
        return batch     # a symbolic batch stays symbolic (ir/symbolic.py)
    # (a symbolic batch is fixed at its hint by the search: int() records that guard)
    for count in range(int(batch) - 1, 0, -1):
        if batch % count == 0 and all(_split(k, count) for k in kept_shapes):
            return count
    return 1


def _batch_component(graph: Graph, names: list[str], dots: list[str], escaping) -> Space:
    """Block composition around small GEMMs: one program per batch entry (or per group of
    entries, see `batch_programs`), every op of an entry on chip (BLOCK_ELEMENTS_MAX)."""
    batches = {dot_dims(graph, graph[d])[0] for d in dots}
    if len(batches) > 1:
        raise Inconsistent(f"GEMMs with different batch counts {sorted(batches)} in one block "
                           "composition")
    (batch,) = batches
    kept = []
    for name in names:
        node = graph[name]
        if node.op in SIMPLE_REDUCTIONS:
            shape, dims = reduced_dims(graph, node)
            kept.append([shape[d] for d in range(len(shape)) if d not in dims])
    programs = batch_programs(batch, kept)
    space = Space("batch", programs, BLOCK_ELEMENTS_MAX, programs * BLOCK_ELEMENTS_MAX,
                  (batch,))
    for name in names:
        node = graph[name]
        if lookup(node.op).category == Category.TUPLE:
            continue
        n = type_numel(node.type)
        if n > space.numel:
            raise Inconsistent(f"%{name} ({node.op}) with {n} elements does not fit on chip in "
                               f"{programs} programs of {space}")
        if (name in escaping or node.op in SIMPLE_REDUCTIONS) and not _fits(n, space):
            raise Inconsistent(f"%{name} ({node.op}) with {n} elements does not split into the "
                               f"{programs} programs of {space}")
    return space


# A staged single-program component (see `component_space`) holds no value larger than
# this: it is for the small tails of a step (a loss's per-row terms summed to a scalar, a
# bias gradient of a small classifier), where a second launch costs more than the work.
STAGED_ELEMENTS_MAX = 1 << 16


def component_space(graph: Graph, names: list[str], escaping: set[str] | None = None,
                    staged: bool = False) -> Space:
    """The one space every op of a connected component fits, or raise Inconsistent.

    `escaping` names the members whose values leave the group; a member that
    does not escape may be smaller (a broadcast operand, a slice, a piece of a
    concat): it is evaluated where its consumer reads it.

    `staged`: when no one schedule fits (reductions of different shapes: per-row
    losses summed to a scalar, a row-wise gradient and its column sum), one
    program may run the reductions as stages in order, as block composition does
    around GEMMs (FusionStitching 2019 §5.1 with the whole component as the one
    batch entry): the result is a "batch" space of one program. Only for small
    components (STAGED_ELEMENTS_MAX); the planner also bounds its bytes.
    """
    escaping = set(names) if escaping is None else escaping
    try:
        return _component_space(graph, names, escaping)
    except Inconsistent as e:
        if not staged or any(graph[n].op in FUSIBLE_DOTS for n in names):
            raise
        big = next((n for n in names if type_numel(graph[n].type) > STAGED_ELEMENTS_MAX), None)
        if big is not None:
            raise Inconsistent(f"{e}; and %{big} ({graph[big].op}) is too large for one "
                               f"program to run the group in stages") from None
        return Space("batch", 1, STAGED_ELEMENTS_MAX, STAGED_ELEMENTS_MAX, (1,), staged=True)


def _component_space(graph: Graph, names: list[str], escaping: set[str]) -> Space:
    dots = [n for n in names if graph[n].op in FUSIBLE_DOTS]
    if dots:
        return _batch_component(graph, names, dots, escaping)
    space: Space | None = None
    for name in names:
        node = graph[name]
        if node.op not in SIMPLE_REDUCTIONS:
            continue
        s = reduction_space(graph, node)
        if space is None:
            space = s
        elif (s.kind, s.blocks, s.numel, s.layout) != (space.kind, space.blocks, space.numel,
                                                        space.layout):
            raise Inconsistent(f"%{name} ({node.op}) needs a {s} schedule but the group "
                               f"already has {space}")
    if space is None:
        n = max(type_numel(graph[x].type) for x in names)
        space = Space("flat", 1, n, n)
    for name in names:
        node = graph[name]
        if node.op in SIMPLE_REDUCTIONS:
            continue
        d = lookup(node.op)
        if d.category in (Category.TUPLE,):
            continue
        n = type_numel(node.type)
        if name not in escaping and n <= space.numel:
            # an internal value (a broadcast operand, a slice or a piece of a concat):
            # evaluated where its consumer reads it, as XLA's loop fusion does
            continue
        if space.kind == "flat":
            # thread composition: every output is evaluated over its own index range
            # (the grid covers the largest), recomputing its producers per element
            if n > space.numel:
                raise Inconsistent(f"%{name} ({node.op}) has {n} elements, more than the "
                                   f"{space.numel} of the pointwise kernel")
        elif not _fits(type_numel(node.type), space):
            raise Inconsistent(f"%{name} ({node.op}) with {type_numel(node.type)} elements is "
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


def group_spaces(graph: Graph, names, staged: bool = False) -> list[Space]:
    """One space per component, in component order; raises Inconsistent.

    `staged` allows single-program staged components (`component_space`)."""
    escaping = escaping_values(graph, names)
    return [component_space(graph, c, escaping, staged) for c in components(graph, names)]


@dataclass(frozen=True)
class Schedule:
    """How one kernel group runs: its components (node names in graph order; kernel
    packing gives each its own block range) and the space each runs in, with staged
    single-program components allowed (as every kernel group is lowered).

    `guards`: the size relations (ir/symbolic.py) the decision relied on in a graph of
    symbolic sizes: a plan decides under `suspended` (no guard), so the schedule keeps
    its own, and lowering records them as its kernel's guards, as it would had it
    decided itself."""

    components: tuple[tuple[str, ...], ...]
    spaces: tuple[Space, ...]
    guards: frozenset = frozenset()

    def __str__(self) -> str:
        return ",".join(str(s) for s in self.spaces)


def group_schedule(graph: Graph, names) -> Schedule:
    """The schedule of group `names`, or raise Inconsistent: the one function that
    decides it (the planners when they make a plan's groups, lowering for a candidate
    group). Sizes stay symbolic and comparisons are recorded even while planning is
    `suspended` (`recording` inside it), so the spaces are those lowering would find."""
    with recording() as guards:
        escaping = escaping_values(graph, names)
        comps = components(graph, names)
        spaces = tuple(component_space(graph, c, escaping, staged=True) for c in comps)
    return Schedule(tuple(tuple(c) for c in comps), spaces, frozenset(guards))
