"""The ILP of FusionStitching 2019 §4.1, solved with HiGHS (scipy.optimize.milp).

    maximise   sum_p score_p * x_p
    subject to sum_{p contains v} x_p <= 1      for every node v (one row per node)
               sum_{p in C} x_p <= |C| - 1      for every cycle C found so far
               x_p in {0, 1}

The wrapper knows nothing of graphs or costs: it gets patterns (sets of
hashable items), scores and extra "not all of these" constraints. When HiGHS
is unavailable, fails, or runs out of time without a solution, a greedy
selection (best score first, disjoint) is used instead and said so.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("fusionstitch.fusion")

# HiGHS time limit per solve: planning must stay interactive (the LSTM-400 budget is
# 10 s for the whole planner); a time-limited solve still returns its best incumbent.
DEFAULT_TIME_LIMIT_S = 5.0


@dataclass(frozen=True)
class Solution:
    chosen: tuple[int, ...]   # indices of chosen patterns, ascending
    objective: float
    method: str               # "highs" | "greedy"
    status: str


def greedy(patterns, scores, forbidden=()) -> list[int]:
    """Best score first, skipping overlaps and completions of a forbidden set."""
    order = sorted(range(len(patterns)), key=lambda i: (-scores[i], i))
    used: set = set()
    chosen: list[int] = []
    chosen_set: set[int] = set()
    for i in order:
        if scores[i] <= 0 or used & patterns[i]:
            continue
        if any(i in f and len((f - {i}) - chosen_set) == 0 for f in forbidden):
            continue
        chosen.append(i)
        chosen_set.add(i)
        used |= patterns[i]
    return sorted(chosen)


def solve(patterns: list[frozenset], scores: list[float], forbidden: list[frozenset] = (),
          time_limit: float = DEFAULT_TIME_LIMIT_S,
          at_least: tuple[list[float], float] | None = None) -> Solution:
    """Choose disjoint patterns of maximal total score, avoiding each forbidden set.

    `at_least=(weights, bound)` adds sum_p weights_p * x_p >= bound (a side
    requirement such as "save at least this many bytes").
    """
    n = len(patterns)
    if n == 0:
        return Solution((), 0.0, "highs", "empty")
    try:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import csr_array
    except ImportError:  # pragma: no cover - scipy is a dependency
        chosen = greedy(patterns, scores, forbidden)
        return Solution(tuple(chosen), sum(scores[i] for i in chosen), "greedy", "no scipy")
    items = {}
    rows, cols = [], []
    for j, p in enumerate(patterns):
        for v in p:
            r = items.setdefault(v, len(items))
            rows.append(r)
            cols.append(j)
    base = len(items)
    upper = [1.0] * base
    for k, f in enumerate(forbidden):
        for j in f:
            rows.append(base + k)
            cols.append(j)
        upper.append(len(f) - 1.0)
    a = csr_array((np.ones(len(rows)), (np.array(rows), np.array(cols))),
                  shape=(base + len(forbidden), n))
    # scale scores (seconds, ~1e-6) to O(1) so HiGHS's tolerances mean something
    c = np.asarray(scores, dtype=float)
    scale = 1.0 / max(np.abs(c).max(), 1e-30)
    constraints = [LinearConstraint(a, -np.inf, np.array(upper))]
    if at_least is not None:
        w = np.asarray(at_least[0], dtype=float)
        wscale = 1.0 / max(np.abs(w).max(), 1e-30)
        # a hair of slack: the bound is met exactly by the baseline's own patterns
        constraints.append(LinearConstraint(w[None, :] * wscale,
                                            at_least[1] * wscale - 1e-7, np.inf))
    res = milp(-c * scale, constraints=constraints,
               integrality=np.ones(n), bounds=Bounds(0, 1),
               options={"time_limit": time_limit, "disp": False})
    if res.x is None:
        log.warning("ILP: HiGHS returned no solution (%s); using greedy selection", res.message)
        chosen = greedy(patterns, scores, forbidden)
        return Solution(tuple(chosen), sum(scores[i] for i in chosen), "greedy", res.message)
    chosen = tuple(int(j) for j in np.flatnonzero(res.x > 0.5))
    return Solution(chosen, sum(scores[j] for j in chosen), "highs", res.message)
