"""ilp: the §4.1 selection (disjoint patterns, maximal score, forbidden sets), its greedy
fallback, and agreement with brute force on small random instances."""
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionstitch.fusion.ilp import Solution, greedy, solve


def P(*items):
    return frozenset(items)


def disjoint(patterns, chosen):
    seen = set()
    for i in chosen:
        if seen & patterns[i]:
            return False
        seen |= patterns[i]
    return True


def respects(forbidden, chosen):
    return not any(f <= set(chosen) for f in forbidden)


def brute_force(patterns, scores, forbidden=()):
    """Best total score over every disjoint subset that completes no forbidden set."""
    best = 0.0
    for r in range(1, len(patterns) + 1):
        for sub in itertools.combinations(range(len(patterns)), r):
            if disjoint(patterns, sub) and respects(forbidden, sub):
                best = max(best, sum(scores[i] for i in sub))
    return best


# Overlapping patterns where the best single pattern is not in the best plan:
# {b,c} scores most alone, but {a,b} + {c,d} together score more.
OVERLAP = [P("a", "b"), P("c", "d"), P("b", "c")]
OVERLAP_SCORES = [3.0, 3.0, 5.0]


def test_overlaps_pick_the_best_disjoint_combination():
    sol = solve(OVERLAP, OVERLAP_SCORES)
    assert sol.chosen == (0, 1)
    assert sol.objective == pytest.approx(6.0)
    assert sol.method == "highs"


def test_greedy_takes_the_best_single_pattern_first():
    # the reason for the ILP: best-first is not optimal on the same instance
    assert greedy(OVERLAP, OVERLAP_SCORES) == [2]


def test_forbidden_set_forces_the_next_best():
    sol = solve(OVERLAP, OVERLAP_SCORES, [P(0, 1)])
    assert sol.chosen == (2,)
    assert sol.objective == pytest.approx(5.0)
    # forbidding that one too leaves one of the pair
    sol = solve(OVERLAP, OVERLAP_SCORES, [P(0, 1), P(2)])
    assert len(sol.chosen) == 1 and sol.chosen[0] in (0, 1)
    assert sol.objective == pytest.approx(3.0)


def test_forbidden_set_of_three_keeps_two():
    pats = [P("a"), P("b"), P("c"), P("a", "b", "c")]
    sol = solve(pats, [2.0, 2.0, 2.0, 1.0], [P(0, 1, 2)])
    assert len(sol.chosen) == 2 and set(sol.chosen) < {0, 1, 2}
    assert sol.objective == pytest.approx(4.0)


def test_overlapping_pair_counts_once():
    # {a,b} and {b} share b: only one of them
    sol = solve([P("a", "b"), P("b")], [1.0, 1.5])
    assert sol.chosen == (1,)


def test_scores_at_seconds_scale():
    # the planner's scores are seconds (~1e-6); scaling must keep the optimum
    scores = [s * 1e-7 for s in OVERLAP_SCORES]
    sol = solve(OVERLAP, scores)
    assert sol.chosen == (0, 1)
    assert sol.objective == pytest.approx(6e-7)


def test_zero_patterns():
    sol = solve([], [])
    assert sol == Solution((), 0.0, "highs", "empty")
    assert greedy([], []) == []


def test_negative_scores_are_never_chosen():
    sol = solve([P("a"), P("b")], [-1.0, 2.0])
    assert sol.chosen == (1,)
    assert greedy([P("a"), P("b")], [-1.0, 2.0]) == [1]


def test_deterministic():
    pats = [P(i, i + 1) for i in range(20)] + [P(i) for i in range(21)]
    scores = [1.0] * 20 + [0.5] * 21   # many optimal plans: the answer must not wander
    first = solve(pats, scores)
    for _ in range(3):
        assert solve(pats, scores) == first
    assert greedy(pats, scores) == greedy(pats, scores)


def test_greedy_is_disjoint_and_respects_forbidden():
    pats = [P("a", "b"), P("c", "d"), P("e", "f"), P("b", "c"), P("f")]
    scores = [5.0, 4.0, 3.0, 2.0, 1.0]
    forbidden = [P(0, 1), P(2)]
    chosen = greedy(pats, scores, forbidden)
    assert disjoint(pats, chosen) and respects(forbidden, chosen)
    # 0 first, 1 would complete {0,1}, 2 forbidden alone, 3 overlaps 0, then 4
    assert chosen == [0, 4]


def test_falls_back_to_greedy_when_highs_gives_nothing(monkeypatch, caplog):
    import scipy.optimize

    class NoSolution:
        x = None
        message = "time limit reached, no feasible solution"

    monkeypatch.setattr(scipy.optimize, "milp", lambda *a, **k: NoSolution())
    with caplog.at_level("WARNING", logger="fusionstitch.fusion"):
        sol = solve(OVERLAP, OVERLAP_SCORES, [P(2)])
    assert sol.method == "greedy" and "no feasible" in sol.status
    assert disjoint(OVERLAP, sol.chosen) and respects([P(2)], sol.chosen)
    assert sol.chosen == (0, 1) and sol.objective == pytest.approx(6.0)
    assert "greedy" in caplog.text


@st.composite
def instances(draw):
    universe = draw(st.integers(2, 8))
    n = draw(st.integers(1, 12))
    item_sets = st.frozensets(st.integers(0, universe - 1), min_size=1, max_size=4)
    patterns = [draw(item_sets) for _ in range(n)]
    # integer scores: HiGHS's relative gap (1e-4) cannot hide a difference of 1
    scores = [float(draw(st.integers(1, 50))) for _ in range(n)]
    forbidden = draw(st.lists(st.frozensets(st.integers(0, n - 1), min_size=1, max_size=3),
                              max_size=3))
    return patterns, scores, forbidden


@settings(max_examples=80, deadline=None)
@given(instances())
def test_matches_brute_force(inst):
    patterns, scores, forbidden = inst
    sol = solve(patterns, scores, forbidden)
    assert sol.method == "highs"
    assert list(sol.chosen) == sorted(set(sol.chosen))
    assert disjoint(patterns, sol.chosen) and respects(forbidden, sol.chosen)
    assert sol.objective == pytest.approx(sum(scores[i] for i in sol.chosen))
    assert sol.objective == pytest.approx(brute_force(patterns, scores, forbidden))
    # greedy: feasible, never better than the optimum
    g = greedy(patterns, scores, forbidden)
    assert disjoint(patterns, g) and respects(forbidden, g)
    assert sum(scores[i] for i in g) <= sol.objective + 1e-9
