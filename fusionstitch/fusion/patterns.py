"""Candidate fusion patterns for the ILP (FusionStitching 2019 §4.2).

- substitution fusion (Algorithm 1): collapse every op between consecutive
  partition ops of the topological order into one pattern, for a growing set
  of partition ops (unfusible ops, then batched GEMMs, column reductions,
  scalar reductions, row reductions);
- neighbour merges: substitution pieces joined by a data edge across a
  partition op (what XLA's producer-consumer fusion reaches);
- exploratory fusion (Algorithm 2): bounded recursive producer/consumer
  expansion from seeds with large tensors;
- kernel packing: independent ops of one span layer, grouped by schedule
  compatibility, up to a footprint limit.

Every pattern returned passes the planner's checks (each generator's `leg`: a
`stitch.StitchChecks`, which asks the legality seam, fusion/legality.py, then the
profitability rules, profit.py): fusible ops, no cycle, one consistent schedule per
component, the target's code generator lowers it, and it pays.
"""
from __future__ import annotations

from collections.abc import Iterator

from ..analysis.span import span_of
from ..ir.graph import Graph
from ..ir.ops import FUSIBLE_DOTS, SIMPLE_REDUCTIONS
from ..schedule.propagate import (Inconsistent,
                                  component_space, components, reduction_space)
from .plan import KERNEL, is_input, node_kind

# Largest pattern: past a few thousand ops a generated kernel compiles slowly (Triton and
# C++ compile time grows faster than linearly); below that, splitting a chain costs a
# round trip of its live values through memory (cartpole's 2,300-op loop body).
MAX_PATTERN_OPS = 4096
# Exploratory fusion: seeds are the fusible ops with the largest outputs (the paper's
# "large input/output tensors"), expanded at most this deep, with at most this many
# patterns per seed (the paper gives up exploring when it takes long).
EXPLORE_SEEDS = 32
EXPLORE_DEPTH = 4
EXPLORE_PATTERNS_PER_SEED = 48
# The paper skips seeds with many operands since expansion explores their subsets.
EXPLORE_MAX_OPERANDS = 10
# Kernel packing: total bytes one packed launch may touch. Past ~256 MiB a launch is
# bandwidth-bound for > 80 us on any device we target, so the launch latency packing
# saves (a few us) is noise; staying below keeps each packed kernel's tail short.
PACK_MAX_BYTES = 256 << 20
PACK_MAX_OPS = MAX_PATTERN_OPS


def _reduction_kind(graph: Graph, name: str) -> str | None:
    node = graph[name]
    if node.op in FUSIBLE_DOTS:
        return "batched_gemm"
    if node.op not in SIMPLE_REDUCTIONS:
        return None
    try:
        s = reduction_space(graph, node)
    except Inconsistent:
        return "other_reduction"
    if s.blocks == 1:
        return "scalar_reduction"
    return "column_reduction" if s.kind == "column" else "row_reduction"


# The order in which substitution fusion grows its partition set (2019 §4.2.1).
PARTITION_STEPS = ("batched_gemm", "column_reduction", "scalar_reduction", "row_reduction")


def _split_legal(leg, names: list[str]) -> list[list[str]]:
    """Split ops (in topological order) into legal pieces: whole components when they
    are legal, else greedy runs that stay legal as they grow."""
    graph = leg.graph
    pieces: list[list[str]] = []
    for comp in components(graph, names):
        if len(comp) <= MAX_PATTERN_OPS and leg.check(comp):
            pieces.append(comp)
            continue
        # grow each run by galloping (double the step while legal, halve on failure):
        # O(log n) checks per piece instead of one per op
        i = 0
        while i < len(comp):
            run, i, step = [comp[i]], i + 1, 1
            while i < len(comp) and len(run) < MAX_PATTERN_OPS:
                take = comp[i:i + min(step, MAX_PATTERN_OPS - len(run))]
                if leg.check(run + take):
                    run += take
                    i += len(take)
                    step *= 2
                elif step > 1:
                    step //= 2
                else:
                    break
            pieces.append(run)
    return pieces


def substitution_patterns(leg, packing: bool = True) -> Iterator[frozenset]:
    graph = leg.graph
    order = [n.name for n in graph.nodes if not is_input(n)]
    kinds = {n: _reduction_kind(graph, n) for n in order}
    partition_kinds: set[str] = set()
    for step in (None,) + PARTITION_STEPS:
        if step is not None:
            partition_kinds.add(step)
        segment: list[str] = []
        segments: list[list[str]] = []
        for n in order:
            if n not in leg.fusible or kinds[n] in partition_kinds:
                if segment:
                    segments.append(segment)
                segment = []
                if n in leg.fusible:
                    segments.append([n])  # a partition op still heads its own kernel
                continue
            segment.append(n)
        if segment:
            segments.append(segment)
        round_pieces: list[list[str]] = []
        for seg in segments:
            pieces = _split_legal(leg, seg)
            round_pieces.extend(pieces)
            for p in pieces:
                if len(p) > 1:
                    yield frozenset(p)
            # independent legal pieces of one segment may also share a launch
            packable = [p for p in pieces if len(p) > 1 or node_kind(graph[p[0]]) == KERNEL]
            if packing and len(packable) > 1:
                yield from _pack(leg, packable)
        if step is None:
            yield from neighbour_merges(leg, round_pieces)


def neighbour_merges(leg, pieces: list[list[str]]) -> Iterator[frozenset]:
    """Pieces joined by a data edge across a partition op, merged pairwise.

    Substitution fusion cuts the topological order at partition ops, so a
    producer and its consumer that sit on either side of an unrelated GEMM land
    in different segments (a gradient chain and its bias-gradient column sum).
    XLA's producer-consumer fusion does join them; these candidates let the ILP
    choose that too.
    """
    owner = {n: i for i, p in enumerate(pieces) for n in p}
    seen: set = set()
    for i, p in enumerate(pieces):
        for n in p:
            for u in leg.graph.users[n]:
                j = owner.get(u)
                if j is None or j == i:
                    continue
                # the whole consumer piece, or just the consumer op (its piece may hold
                # ops that do not fit, e.g. other gradients' sums)
                for key, merged in (((i, j), p + pieces[j]), ((i, u), p + [u])):
                    if key in seen:
                        continue
                    seen.add(key)
                    if len(merged) <= MAX_PATTERN_OPS and leg.check(merged):
                        yield frozenset(merged)


def _pack(leg, pieces: list[list[str]]) -> Iterator[frozenset]:
    """Pack independent pieces into launches, within the footprint limits."""
    from ..analysis.cost import group_bytes
    graph = leg.graph
    batch: list[str] = []
    nbytes = 0
    for p in pieces:
        b = group_bytes(graph, tuple(p))
        if batch and (len(batch) + len(p) > PACK_MAX_OPS or nbytes + b > PACK_MAX_BYTES
                      or not leg.check(batch + p)):
            if len(batch) > 1:
                yield frozenset(batch)
            batch, nbytes = [], 0
        batch += p
        nbytes += b
    if len(batch) > 1 and leg.check(batch):
        yield frozenset(batch)


def exploratory_patterns(leg) -> Iterator[frozenset]:
    graph = leg.graph
    position = {n.name: i for i, n in enumerate(graph.nodes)}

    def size(name):
        t = graph[name].type
        return getattr(t, "nbytes", 0)

    seeds = [n for n in leg.fusible
             if node_kind(graph[n]) == KERNEL and len(graph[n].inputs) <= EXPLORE_MAX_OPERANDS]
    seeds.sort(key=lambda n: (-size(n), position[n]))
    for seed in seeds[:EXPLORE_SEEDS]:
        found: list[frozenset] = []
        seen: set[frozenset] = set()

        def explore(pattern: frozenset, depth: int) -> None:
            if depth == 0 or len(found) >= EXPLORE_PATTERNS_PER_SEED:
                return
            cands = set()
            for m in pattern:
                cands.update(i for i in graph[m].inputs if i in leg.fusible)   # producers
                cands.update(u for u in graph.users[m] if u in leg.fusible)     # consumers
            for c in sorted(cands - pattern, key=position.__getitem__):
                new = pattern | {c}
                if new in seen or len(found) >= EXPLORE_PATTERNS_PER_SEED:
                    continue
                seen.add(new)
                if leg.check(new):
                    found.append(new)
                    explore(new, depth - 1)

        explore(frozenset([seed]), EXPLORE_DEPTH)
        yield from found


def packing_patterns(leg) -> Iterator[frozenset]:
    """Independent single ops of one span layer, grouped by schedule compatibility."""
    graph = leg.graph
    span = span_of(graph)
    buckets: dict[tuple, list[str]] = {}
    for node in graph.nodes:
        n = node.name
        if n not in leg.fusible or node_kind(node) != KERNEL:
            continue
        try:
            s = component_space(graph, [n])
        except Inconsistent:
            continue
        buckets.setdefault((span[n], s.kind), []).append(n)
    for key in sorted(buckets):
        ops = buckets[key]
        if len(ops) > 1:
            yield from _pack(leg, [[o] for o in ops])


def candidate_patterns(leg, packing: bool = True) -> list[frozenset]:
    """All candidates, deduplicated, in a deterministic order."""
    out: dict[frozenset, None] = {}
    gens = (substitution_patterns, exploratory_patterns) + ((packing_patterns,) if packing else ())
    for gen in gens:
        for p in (gen(leg, packing) if gen is substitution_patterns else gen(leg)):
            if len(p) > 1:
                out.setdefault(p, None)
    return list(out)
