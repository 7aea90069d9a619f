"""patterns: substitution (Algorithm 1, multi-step partitions), exploratory (Algorithm 2)
and packing candidates of FusionStitching 2019 §4.2; every candidate is legal."""
import pytest

from fusionstitch.analysis.span import span_of
from fusionstitch.fusion import patterns
from fusionstitch.fusion.legality import Legality
from fusionstitch.fusion.patterns import (EXPLORE_DEPTH, candidate_patterns,
                                          exploratory_patterns, packing_patterns,
                                          substitution_patterns)
from fusionstitch.fusion.stitch import StitchChecks
from fusionstitch.fusion.plan import KERNEL, LIBRARY, node_kind
from fusionstitch.ir.text import parse
from fusionstitch.schedule.compose import composition
from fusionstitch.schedule.propagate import components

# Elementwise runs between large GEMMs (library calls, the first partition ops; small
# GEMMs may be composed into a kernel, so these are larger than any fusible tile).
BETWEEN_MMS = parse("""graph between_mms(%x: f32[256,256], %w: f32[256,256]) {
  %a: f32[256,256] = mm.default(%x, %w)
  %b: f32[256,256] = relu.default(%a)
  %c: f32[256,256] = mul.Tensor(%b, %b)
  %d: f32[256,256] = add.Scalar(%c, 1.0)
  %e: f32[256,256] = mm.default(%d, %w)
  %f: f32[256,256] = neg.default(%e)
  %h: f32[256,256] = exp.default(%f)
  return (%h)
}""")

# A row reduction between elementwise ops: one big pattern (step 0) and, once row
# reductions are partition ops, the runs before and after it.
ROW_REDUCTION = parse("""graph row_reduction(%x: f32[8,64]) {
  %a: f32[8,64] = neg.default(%x)
  %a2: f32[8,64] = exp.default(%a)
  %r: f32[8,1] = sum.dim_IntList(%a2, [-1], True)
  %b: f32[8,64] = div.Tensor(%a2, %r)
  %c: f32[8,64] = relu.default(%b)
  return (%c)
}""")

# A column reduction (bias gradient) next to a row reduction: they cannot share a kernel.
ROW_AND_COLUMN = parse("""graph row_and_column(%x: f32[8,64], %y: f32[8,64]) {
  %a: f32[8,64] = mul.Tensor(%x, %y)
  %col: f32[1,64] = sum.dim_IntList(%a, [0], True)
  %row: f32[8,1] = amax.default(%a, [-1], True)
  %s: f32[8,64] = sub.Tensor(%a, %row)
  %t: f32[8,64] = add.Tensor(%s, %col)
  %u: f32[64,8] = permute.default(%t, [1, 0])
  %v: f32[64,8] = tanh.default(%u)
  return (%v)
}""")

# Independent ops of one span layer (backward-pass gradient accumulation shape).
INDEPENDENT = parse("""graph independent(%x: f32[8,64], %y: f32[8,64], %z: f32[4]) {
  %e: f32[8,64] = exp.default(%x)
  %n: f32[8,64] = neg.default(%y)
  %r: f32[4] = relu.default(%z)
  %s: f32[8,64] = sigmoid.default(%e)
  return (%s, %n, %r)
}""")

# Library and unfusible ops mixed in: conv, a random op, a scatter, a composite softmax.
MIXED = parse("""graph mixed(%x: f32[1,1,4,8], %k: f32[1,1,1,1], %idx: i64[4,8]) {
  %a: f32[1,1,4,8] = relu.default(%x)
  %conv: f32[1,1,4,8] = convolution.default(%a, %k, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
  %b: f32[1,1,4,8] = exp.default(%conv)
  %v: f32[4,8] = view.default(%b, [4, 8])
  %rnd: f32[4,8] = rand_like.default(%v)
  %c: f32[4,8] = add.Tensor(%v, %rnd)
  %sc: f32[4,8] = scatter_add.default(%c, 1, %idx, %c)
  %sm: f32[4,8] = _softmax.default(%sc, 1, False)
  %d: f32[4,8] = neg.default(%sm)
  %e: f32[4,8] = mul.Tensor(%d, %c)
  return (%e)
}""")


def chain(n: int):
    lines = ["graph chain(%x: f32[16]) {", "  %v0: f32[16] = neg.default(%x)"]
    for i in range(1, n):
        op = "exp.default" if i % 2 else "neg.default"
        lines.append(f"  %v{i}: f32[16] = {op}(%v{i - 1})")
    lines += [f"  return (%v{n - 1})", "}"]
    return parse("\n".join(lines))


@pytest.fixture
def small_limit(monkeypatch):
    """A pattern limit a test graph can exceed (the real one is large)."""
    monkeypatch.setattr(patterns, "MAX_PATTERN_OPS", 64)
    monkeypatch.setattr(patterns, "PACK_MAX_OPS", 64)
    return 64


GRAPHS = [BETWEEN_MMS, ROW_REDUCTION, ROW_AND_COLUMN, INDEPENDENT, MIXED]


def checks(graph):
    """The generators' checks: target-free legality with small GEMMs in kernels, no
    profitability rule."""
    return StitchChecks(Legality(graph, gemms=True))


def sets(patterns):
    return {frozenset(p) for p in patterns}


def test_ops_between_gemms_become_one_pattern():
    subs = sets(substitution_patterns(checks(BETWEEN_MMS)))
    assert {"b", "c", "d"} in subs and {"f", "h"} in subs
    assert not any(p & {"a", "e"} for p in subs)


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.name)
def test_library_and_unfusible_ops_are_never_inside_a_pattern(graph):
    leg = checks(graph)
    for p in candidate_patterns(leg):
        for n in p:
            assert node_kind(graph[n]) != LIBRARY, (sorted(p), n)
            assert n in leg.fusible, (sorted(p), n)
    if graph is MIXED:   # the scatter has a kernel rule: a kernel alone, in no pattern
        assert leg.fusible == {"a", "b", "v", "c", "d", "e", "sc"}
        assert not any("sc" in p and len(p) > 1 for p in candidate_patterns(leg))


def test_partition_growth_splits_at_the_row_reduction():
    subs = sets(substitution_patterns(checks(ROW_REDUCTION)))
    # step 0: nothing fusible partitions, the whole softmax-like row is one pattern
    assert frozenset({"a", "a2", "r", "b", "c"}) in subs
    # row reductions as partition ops: the runs before and after the reduction
    assert frozenset({"a", "a2"}) in subs and frozenset({"b", "c"}) in subs
    # a partition op heads its own kernel: no pattern holds r with only one side
    assert subs == {frozenset({"a", "a2", "r", "b", "c"}), frozenset({"a", "a2"}),
                    frozenset({"b", "c"})}


def test_row_and_column_reductions_never_share_a_pattern():
    for p in candidate_patterns(checks(ROW_AND_COLUMN)):
        assert not {"col", "row"} <= p
    subs = sets(substitution_patterns(checks(ROW_AND_COLUMN)))
    # the column-reduction step splits the graph at %col; what follows it is one row kernel
    assert frozenset({"row", "s", "t", "u", "v"}) in subs


def _adjacent_pairs(graph, leg):
    for n in leg.fusible:
        for u in graph.users[n]:
            if u in leg.fusible and KERNEL in (node_kind(graph[n]), node_kind(graph[u])):
                yield frozenset({n, u})


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.name)
def test_exploratory_patterns_grow_from_seed_neighbours(graph):
    leg = checks(graph)
    found = list(exploratory_patterns(leg))
    found_sets = set(found)
    for p in found:
        assert Legality(graph, gemms=True).group(p), sorted(p)
        assert len(components(graph, p)) == 1, f"{sorted(p)} is not connected"
        assert 2 <= len(p) <= EXPLORE_DEPTH + 1
        if len(p) > 2:
            # Algorithm 2: each pattern is an earlier pattern plus one producer/consumer
            assert any(p - {m} in found_sets for m in p), sorted(p)
    # small graphs: every fusible kernel op is a seed, so every legal producer/consumer
    # pair around it is explored
    for pair in _adjacent_pairs(graph, leg):
        if leg.check(pair):
            assert pair in found_sets, sorted(pair)


def test_exploratory_seed_takes_its_neighbours_on_both_sides():
    found = set(exploratory_patterns(checks(BETWEEN_MMS)))
    # seed %c: producer %b and consumer %d
    assert {frozenset({"b", "c"}), frozenset({"c", "d"}), frozenset({"b", "c", "d"})} <= found


def test_packing_groups_independent_ops_of_one_layer():
    leg = checks(INDEPENDENT)
    packs = sets(packing_patterns(leg))
    assert packs == {frozenset({"s", "n", "r"})}
    assert composition(INDEPENDENT, ("n", "r", "s")) == "packing"


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.name)
def test_packing_members_are_independent_and_share_a_layer(graph):
    leg = checks(graph)
    span = span_of(graph)
    for p in packing_patterns(leg):
        assert len({span[n] for n in p}) == 1, sorted(p)
        for a in p:
            for b in p:
                assert not leg.reach.reaches(a, b), (a, b)


def _check_candidates(graph):
    leg = checks(graph)
    cands = candidate_patterns(leg)
    assert len(cands) == len(set(cands))
    for p in cands:
        assert 1 < len(p) <= patterns.MAX_PATTERN_OPS
        d = Legality(graph, gemms=True).group(p)
        assert d, (sorted(p), d.reason)
    return cands


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.name)
def test_every_candidate_is_legal_and_bounded(graph):
    assert _check_candidates(graph)


def test_candidates_respect_the_pattern_limit(small_limit):
    for graph in GRAPHS + [chain(150)]:
        _check_candidates(graph)


def test_long_chain_is_split_at_the_pattern_limit(small_limit):
    subs = sets(substitution_patterns(checks(chain(150))))
    assert max(len(p) for p in subs) == small_limit
    # the pieces of one step cover the chain: 64 + 64 + 22
    assert any(len(p) == 150 - 2 * small_limit for p in subs)


def test_candidates_are_deterministic():
    for graph in GRAPHS:
        assert candidate_patterns(checks(graph)) == candidate_patterns(checks(graph))
