"""Strategy `stitch`: the FusionStitching planner (2019 §4).

1. candidates: substitution, exploratory and packing patterns (patterns.py),
   each legal on its own;
2. scores (model-based, §4.3): time saved = M(V) + (N - 1)·φ, where V is the
   off-chip traffic no longer moved and N the launches merged; non-positive
   scores are dropped. `score_hook` lets an execution-based score replace it;
3. ILP (ilp.py): disjoint patterns of maximal total score; after each solve the
   fused graph is checked for cycles and each cycle found becomes a constraint
   ("not all of these patterns together"), until the plan is acyclic;
4. the chosen patterns become groups, each labelled with its composition.

Planning time per stage is kept in the plan's `stages` (seconds).
"""
from __future__ import annotations

import logging
import os
import time
from typing import Callable

from ..analysis.cost import DeviceSpec, device_spec, group_bytes
from ..analysis.reach import group_cycle
from ..ir.graph import Graph
from ..schedule.compose import composition
from . import ilp
from .patterns import Legality, candidate_patterns
from .plan import FREE, LIBRARY, KERNEL, FusionPlan, is_input, node_kind, plan_from_groups

log = logging.getLogger("fusionstitch.fusion")

# Each round adds one cycle-breaking constraint per cycle found; real graphs need a
# handful. Past this many rounds the remaining cyclic patterns are dropped instead.
MAX_CYCLE_ROUNDS = 50

ScoreFn = Callable[[Graph, frozenset, DeviceSpec], float]


def fuel() -> int | None:
    """FUSIONSTITCH_FUEL=N: apply at most N fusions (bisect a miscompile to one fusion)."""
    v = os.environ.get("FUSIONSTITCH_FUEL")
    return int(v) if v not in (None, "") else None


class ModelScore:
    """Time a pattern saves against running its ops alone (seconds)."""

    def __init__(self, graph: Graph, device: DeviceSpec):
        self.graph = graph
        self.device = device
        self.alone: dict[str, int] = {}
        self.launches: dict[str, int] = {}
        for node in graph.nodes:
            if is_input(node):
                continue
            kind = node_kind(node)
            self.alone[node.name] = 0 if kind == FREE else group_bytes(graph, (node.name,))
            self.launches[node.name] = 1 if kind in (KERNEL, LIBRARY) else 0

    def __call__(self, graph: Graph, pattern: frozenset, device: DeviceSpec) -> float:
        n = sum(self.launches[m] for m in pattern)
        if n == 0:
            return 0.0
        saved = sum(self.alone[m] for m in pattern) - group_bytes(graph, tuple(pattern))
        return device.memory_time(saved) + (n - 1) * device.launch_latency.value


def _find_cycle(graph: Graph, groups: list[frozenset]) -> list[int] | None:
    """Chosen-group indices on one cycle of the fused graph, or None."""
    owner: dict[str, int] = {}
    for gi, g in enumerate(groups):
        for n in g:
            owner[n] = gi
    nxt = len(groups)
    for node in graph.nodes:
        if not is_input(node) and node.name not in owner:
            owner[node.name] = nxt
            nxt += 1
    edges: dict[int, set[int]] = {}
    for node in graph.nodes:
        dst = owner.get(node.name)
        if dst is None:
            continue
        for i in node.inputs:
            src = owner.get(i)
            if src is not None and src != dst:
                edges.setdefault(src, set()).add(dst)
    cycle = group_cycle(list(range(nxt)), edges)
    if cycle is None:
        return None
    return sorted(g for g in cycle if g < len(groups))


def plan_stitch(graph: Graph, target: str, *, score_hook: ScoreFn | None = None,
                time_limit: float = ilp.DEFAULT_TIME_LIMIT_S) -> FusionPlan:
    stages: dict[str, float] = {}
    t = time.perf_counter()
    leg = Legality(graph, batched_gemms=True)
    candidates = candidate_patterns(leg)
    stages["candidates"] = time.perf_counter() - t

    t = time.perf_counter()
    device = device_spec(target)
    score = score_hook or ModelScore(graph, device)
    scored = [(p, score(graph, p, device)) for p in candidates]
    patterns = [p for p, s in scored if s > 0]
    scores = [s for p, s in scored if s > 0]
    stages["scores"] = time.perf_counter() - t

    t = time.perf_counter()
    forbidden: list[frozenset] = []
    chosen: list[int] = []
    for round_ in range(MAX_CYCLE_ROUNDS + 1):
        sol = ilp.solve(patterns, scores, forbidden, time_limit)
        chosen = list(sol.chosen)
        cycle = _find_cycle(graph, [patterns[i] for i in chosen])
        if cycle is None:
            break
        bad = frozenset(chosen[g] for g in cycle)
        log.info("stitch: chosen patterns %s form a cycle; adding a constraint", sorted(bad))
        if round_ == MAX_CYCLE_ROUNDS:
            chosen = [c for c in chosen if c not in bad]
            log.warning("stitch: cycles remain after %d rounds; dropping %d patterns",
                        MAX_CYCLE_ROUNDS, len(bad))
        forbidden.append(bad)
    stages["ilp"] = time.perf_counter() - t

    t = time.perf_counter()
    groups = [patterns[i] for i in chosen]
    limit = fuel()
    if limit is not None:
        groups = groups[:limit]
    plan = plan_from_groups(graph, groups, "stitch", compose=composition)
    stages["plan"] = time.perf_counter() - t
    log.info("stitch: %d candidates, %d scored > 0, %d chosen (%s, %d cycle constraints), "
             "%d kernels", len(candidates), len(patterns), len(chosen), sol.method,
             len(forbidden), plan.num_kernels)
    return plan.with_stages(stages)
