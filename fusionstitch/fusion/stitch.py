"""Strategy `stitch`: the FusionStitching planner (2019 §4).

1. candidates: substitution and exploratory patterns (patterns.py), each legal
   on its own (the legality seam, legality.py) and within the profitability rules
   (profit.py: the recompute limit), both asked through `StitchChecks`. Kernel
   packing is its own stage after the ILP (step 4): packing candidates inside the
   ILP pre-empt vertical fusions that save bytes (a packed pair of reductions blocks
   each reduction's producer fusion), while packing the chosen groups span layer by
   span layer gets the same launches saved;
2. scores (model-based, §4.3): time saved = M(V) + (N - 1)·φ, where V is the
   off-chip traffic no longer moved and N the launches merged; non-positive
   scores are dropped. Where the performance library (fusionstitch/tune) holds
   measured times of a pattern, its execution-based score (time split minus time
   fused) replaces the model's; under FUSIONSTITCH_TUNE=1 the chosen patterns it
   lacks are measured and the ILP solved again with them. `score_hook` replaces
   both (the library is then not read);
3. ILP (ilp.py): disjoint patterns of maximal total score; after each solve the
   fused graph is checked for cycles and each cycle found becomes a constraint
   ("not all of these patterns together"), until the plan is acyclic. The xla
   baseline's groups are candidates too, with the side constraint that the
   chosen patterns save at least the bytes the baseline saves: stitch never
   moves more traffic than the plan it must beat, and saves launches within that;
4. kernel packing: independent chosen groups of one span layer of the fused
   graph, bucketed by schedule kind, share launches (pack_layers);
5. the groups become the plan, each labelled with its composition.

Planning time per stage is kept in the plan's `stages` (seconds).
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from ..analysis.cost import DeviceSpec, group_bytes
from ..analysis.reach import group_cycle
from ..ir.graph import Graph
from ..schedule.compose import composition
from ..schedule.propagate import components, group_spaces
from ..targets import Target, resolve
from . import ilp
from .decision import ALLOW, Decision
from .gc_pause import gc_paused
from .legality import Legality
from .merge import merge_kernels
from .patterns import candidate_patterns
from .profit import RecomputeLimit
from .trace import PlanTrace, Verdict
from .plan import (FREE, KERNEL, LIBRARY, FusionPlan, is_input, node_kind, plan_from_groups,
                   quotient, topological_order)

log = logging.getLogger("fusionstitch.fusion")

# Each round adds one cycle-breaking constraint per cycle found; real graphs need a
# handful. Past this many rounds the remaining cyclic patterns are dropped instead.
MAX_CYCLE_ROUNDS = 50
# FUSIONSTITCH_TUNE=1: measure-and-choose-again rounds per planning run (a round measures
# only what the previous choice lacked, so real graphs settle in two or three)
MAX_TUNE_ROUNDS = 4

ScoreFn = Callable[[Graph, frozenset, DeviceSpec], float]


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

    def saved_bytes(self, graph: Graph, pattern: frozenset) -> int:
        return sum(self.alone[m] for m in pattern) - group_bytes(graph, tuple(pattern))

    def __call__(self, graph: Graph, pattern: frozenset, device: DeviceSpec) -> float:
        n = sum(self.launches[m] for m in pattern)
        if n == 0:
            return 0.0
        return (device.memory_time(self.saved_bytes(graph, pattern))
                + (n - 1) * device.launch_latency.value)


def _baseline_groups(graph: Graph, target: Target, leg) -> list[frozenset]:
    """The xla baseline's multi-op groups: candidates, and the traffic to match.

    Seeding the ILP with the baseline's own groups makes "move no more bytes than
    the baseline" always satisfiable; the ILP then saves as much time as it can
    within that traffic.
    """
    from . import PLANNERS
    from .xla import plan_xla
    xla = PLANNERS.get("xla")
    if xla is None:
        return []
    # its trace would go unread: the stitch plan's own trace records stitch's decisions
    plan = xla(graph, target, traced=False) if xla is plan_xla else xla(graph, target)
    return [frozenset(g.nodes) for g in plan.groups
            if g.kind == KERNEL and len(g.nodes) > 1 and leg.check(g.nodes)]


def _find_cycles(graph: Graph, groups: list[frozenset]) -> list[list[int]]:
    """Several cycles of the fused graph (chosen-group indices), found in one pass:
    after each cycle, its first group is set aside and the search goes on, so one
    ILP round can add a constraint for every independent cycle."""
    cycles, remaining = [], list(range(len(groups)))
    while (cycle := _find_cycle(graph, [groups[i] for i in remaining])) is not None:
        cycles.append([remaining[g] for g in cycle])
        remaining.pop(cycle[0])
    return cycles


def _find_cycle(graph: Graph, groups: list[frozenset]) -> list[int] | None:
    """Chosen-group indices on one cycle of the fused graph, or None."""
    q = quotient(graph, groups)  # chosen groups are non-empty: unit i is groups[i]
    cycle = group_cycle(list(range(len(q.units))), dict(enumerate(q.succ)))
    if cycle is None:
        return None
    return sorted(g for g in cycle if g < len(groups))


class StitchChecks:
    """What the stitch planner's stages (candidate generators, the baseline, packing,
    merging) ask of a node set: the legality seam's verdict (`legality`, a
    legality.Legality), then each profitability rule's (`rules`, profit.py) on each
    connected part of the set, remembered per set. A refusal is recorded in the plan
    trace under the check that made it: `legality` (the seam records its own) or
    `profit`."""

    def __init__(self, legality: Legality, rules=(), trace=None):
        self.legality = legality
        self.graph = legality.graph
        self.rules = tuple(rules)
        self.trace = trace
        self._profit: dict[frozenset, Decision] = {}

    @property
    def fusible(self) -> set[str]:
        return self.legality.fusible

    @property
    def reach(self):
        return self.legality.reach

    def check(self, names) -> Decision:
        key = names if type(names) is frozenset else frozenset(names)
        d = self.legality.group(key)
        if d and self.rules and len(key) > 1:
            d = self.profitable(key)
        return d

    def profitable(self, key: frozenset) -> Decision:
        """The profitability rules' verdict on the legal set `key`: each connected part
        of two ops or more is asked on its own (independent parts of a kernel cost
        nothing of each other's)."""
        d = self._profit.get(key)
        if d is not None:
            return d
        d = ALLOW
        if any(rule.applies(key) for rule in self.rules):
            comps = components(self.graph, key)
            if len(comps) > 1:
                for comp in comps:
                    if len(comp) > 1 and not (d := self.profitable(frozenset(comp))):
                        break
            else:
                for rule in self.rules:
                    if not (d := rule(key)):
                        break
        self._profit[key] = d
        if not d and log.isEnabledFor(logging.DEBUG):
            log.debug("unprofitable group of %d ops (%s): %s", len(key),
                      " ".join(sorted(key)[:6]), d.reason)
        if not d and self.trace is not None:
            if d.rule in {r.name for r in self.rules}:
                self.trace.unprofitable[key] = d.reason
            else:   # a legality refusal found while reading the kernel (profit.py)
                self.trace.rejected[key] = d.reason
        return d


def stitch_checks(graph: Graph, target: str | Target, trace=None) -> StitchChecks:
    """The checks of the stitch planner for `target`: its legality (fusion/legality.py),
    then the recompute limit where the target sets one and generates kernels (refusals
    recorded in `trace`, a PlanTrace, when given)."""
    target = resolve(target)
    legality = Legality(graph, target, trace=trace)
    rules = ()
    if legality.lowering and target.max_recompute:
        rules = (RecomputeLimit(legality, target.max_recompute, target.reused_values),)
    return StitchChecks(legality, rules, trace)


def _scored(graph, candidates, baseline, score, model, perf, device, trace):
    """The candidates worth choosing, their scores, and the ILP's byte requirement.

    Non-positive scores are dropped, except the baseline's groups (they make "save at
    least the baseline's bytes" satisfiable). A baseline group the library measured
    slower fused than split is dropped too, and its bytes leave the requirement: the
    baseline is a standard to beat only where nothing better is known."""
    slower = set()
    if perf is not None:
        slower = {p for p in baseline if (m := perf.measured(p)) is not None and m <= 0}
    scored = [(p, score(graph, p, device)) for p in candidates]
    keep = [i for i, (p, s) in enumerate(scored)
            if s > 0 or (p in baseline and p not in slower)]
    for p, s in scored:
        if s > 0 or (p in baseline and p not in slower):
            trace.candidates[p] = None
            continue
        source = ("the performance library's measured times give" if perf is not None
                  and perf.measured(p) is not None else "the cost model gives")
        trace.candidates[p] = Verdict("score", p, f"{source} the candidate group holding "
                                      f"both ({len(p)} ops) no gain ({s:.3g} s saved)")
    patterns = [scored[i][0] for i in keep]
    scores = [max(scored[i][1], 1e-12) for i in keep]
    # never move more bytes than the baseline: its groups are candidates, so this holds
    saved = [model.saved_bytes(graph, p) for p in patterns]
    need = sum(model.saved_bytes(graph, p) for p in baseline if p not in slower)
    return patterns, scores, ((saved, need) if need > 0 else None)


def _solve(graph, patterns, scores, at_least, time_limit):
    """The ILP, re-solved with a constraint per cycle of the fused graph until acyclic:
    (chosen pattern indices, solver used, cycle constraints added, indices chosen and then
    dropped for a cycle when out of rounds)."""
    forbidden: list[frozenset] = []
    dropped: set[int] = set()
    chosen: list[int] = []
    method = "none"
    for _ in range(MAX_CYCLE_ROUNDS):
        sol = ilp.solve(patterns, scores, forbidden, time_limit, at_least=at_least)
        chosen, method = list(sol.chosen), sol.method
        cycles = _find_cycles(graph, [patterns[i] for i in chosen])
        if not cycles:
            break
        for cycle in cycles:
            bad = frozenset(chosen[g] for g in cycle)
            log.info("stitch: chosen patterns %s form a cycle; adding a constraint",
                     sorted(bad))
            forbidden.append(bad)
    else:
        # out of rounds: drop the patterns of every remaining cycle until none is left
        while (cycle := _find_cycle(graph, [patterns[i] for i in chosen])) is not None:
            bad = {chosen[g] for g in cycle}
            log.warning("stitch: cycles remain after %d ILP rounds; dropping patterns %s",
                        MAX_CYCLE_ROUNDS, sorted(bad))
            chosen = [c for c in chosen if c not in bad]
            dropped.update(bad)
    return chosen, method, forbidden, dropped


@gc_paused
def plan_stitch(graph: Graph, target: str | Target, *, score_hook: ScoreFn | None = None,
                time_limit: float = ilp.DEFAULT_TIME_LIMIT_S,
                fuel: int | None = None) -> FusionPlan:
    """The FusionStitching plan of `graph` for `target`. `fuel`: apply only the first
    `fuel` groups the ILP chose (None: all, then packed and merged). The choice does not
    depend on the fuel (the xla baseline it must beat is planned in full: a standard,
    not a fusion applied), so fuel k + 1 applies fuel k's groups and one more."""
    stages: dict[str, float] = {}
    t = time.perf_counter()
    target = resolve(target)
    trace = PlanTrace("stitch", target.name)
    leg = stitch_checks(graph, target, trace)
    candidates = candidate_patterns(leg, packing=False)
    stages["candidates"] = time.perf_counter() - t

    t = time.perf_counter()
    baseline = _baseline_groups(graph, target, leg)
    candidates = list(dict.fromkeys(candidates + baseline))
    stages["baseline"] = time.perf_counter() - t

    t = time.perf_counter()
    device = target.device_spec
    model = ModelScore(graph, device)
    perf = None
    if score_hook is None:
        from ..tune import perf_score
        perf = perf_score(graph, target.name, model)
    score = score_hook or perf or model
    stages["scores"] = time.perf_counter() - t
    tuned = 0.0
    for tune_round in range(MAX_TUNE_ROUNDS + 1):
        t = time.perf_counter()
        patterns, scores, at_least = _scored(graph, candidates, baseline, score, model, perf,
                                             device, trace)
        stages["scores"] += time.perf_counter() - t
        t = time.perf_counter()
        chosen, method, forbidden, dropped = _solve(graph, patterns, scores, at_least, time_limit)
        stages["ilp"] = stages.get("ilp", 0.0) + time.perf_counter() - t
        # FUSIONSTITCH_TUNE=1: measure the chosen fusions the library lacks, then choose
        # again with their measured scores, until the choice needs no new measurement
        if perf is None or tune_round == MAX_TUNE_ROUNDS:
            break
        t = time.perf_counter()
        measured = perf.tune([patterns[i] for i in chosen])
        tuned += time.perf_counter() - t
        if not measured:
            break
    if perf is not None and perf.tuning:
        stages["tune"] = tuned
    taken = set(chosen)
    in_cycle = {i for bad in forbidden for i in bad} | dropped
    for i, p in enumerate(patterns):
        if i in taken:
            continue
        if i in in_cycle:
            trace.candidates[p] = Verdict(
                "cycle", p, f"the candidate group holding both ({len(p)} ops) would close a "
                f"cycle with other chosen groups (a path leaves it and re-enters); the ILP "
                f"was told not to choose them together")
        else:
            trace.candidates[p] = Verdict(
                "ilp", p, f"the ILP chose other, overlapping groups over the candidate "
                f"holding both ({len(p)} ops, {scores[i]:.3g} s saved): a higher total score")

    t = time.perf_counter()
    groups = [patterns[i] for i in chosen]
    limit = fuel
    if limit is not None:
        for p in groups[limit:]:
            trace.candidates[p] = Verdict("fuel", p, f"FUSIONSTITCH_FUEL={limit}: out of "
                                          f"fuel before this fusion")
        groups = groups[:limit]
    else:
        groups = pack_layers(graph, groups, leg)
    stages["packing"] = time.perf_counter() - t
    t = time.perf_counter()
    if limit is None:
        groups = merge_kernels(graph, groups, leg, perf or model, device)
    stages["merging"] = time.perf_counter() - t
    t = time.perf_counter()
    plan = plan_from_groups(graph, groups, "stitch", compose=composition, trace=trace)
    stages["plan"] = time.perf_counter() - t
    log.info("stitch: %d candidates, %d scored > 0, %d chosen (%s, %d cycle constraints), "
             "%d kernels", len(candidates), len(patterns), len(chosen), method,
             len(forbidden), plan.num_kernels)
    return plan.with_stages(stages)


def pack_layers(graph: Graph, groups: list[frozenset], leg) -> list[frozenset]:
    """Kernel packing of the chosen groups, span layer by span layer (2018 §3.3).

    In the fused graph, a group's span is its distance to the end; groups of one
    span layer have no path between them, and edges only go from higher to lower
    spans, so merging the kernel groups of each layer keeps the plan acyclic.
    Each layer's kernels are packed into launches within the footprint limits.
    """
    from .patterns import PACK_MAX_BYTES, PACK_MAX_OPS
    q = quotient(graph, groups)
    units, succ, position = q.units, q.succ, q.position
    order = topological_order(succ)
    span = [0] * len(units)
    for u in reversed(order):  # consumers first
        span[u] = 1 + max((span[v] for v in succ[u]), default=-1)
    layers: dict[tuple, list[int]] = {}
    for u, names in enumerate(units):
        kinds = {node_kind(graph[n]) for n in names}
        # only kernels that are legal on their own (a schedule exists) can share a launch
        if KERNEL in kinds and all(n in leg.fusible for n in names) and leg.check(names):
            schedule = tuple(sorted({s.kind for s in group_spaces(graph, names, staged=True)}))
            layers.setdefault((span[u], schedule), []).append(u)
    merged: set[int] = set()
    packed: list[frozenset] = []
    for level in sorted(layers):
        members = sorted(layers[level], key=lambda u: position[units[u][0]])
        batch: list[int] = []
        ops = nbytes = 0
        for u in members + [None]:
            if u is not None:
                b = group_bytes(graph, tuple(units[u]))
                if not batch or (ops + len(units[u]) <= PACK_MAX_OPS
                                 and nbytes + b <= PACK_MAX_BYTES):
                    batch.append(u)
                    ops += len(units[u])
                    nbytes += b
                    continue
            if len(batch) > 1:
                packed.append(frozenset(n for v in batch for n in units[v]))
                merged.update(batch)
            if u is not None:
                batch, ops, nbytes = [u], len(units[u]), group_bytes(graph, tuple(units[u]))
    kept = [g for gi, g in enumerate(groups) if gi not in merged]
    return kept + packed
