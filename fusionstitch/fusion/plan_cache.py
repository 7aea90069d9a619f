"""A cache of final fusion plans (after code-generation legality), in memory and on disk.

A warm start (a new compile of a graph planned before) loads its plan instead of
planning again: the stitch planner takes seconds on graphs of thousands of ops.

The key is everything the plan depends on:
- the graph's exact IR text (`ir.text.print_graph`, less the graph's name, which
  is a process-wide counter): graphs are specialised to concrete sizes, so the
  text holds every shape, dtype, literal and node name the planner reads;
- the strategy and the resolved target;
- `fusionstitch.__version__` and a digest of the package's own sources: the
  planner's thresholds and rules are code, and a development tree changes them
  without a new version number;
- the torch and scipy versions (op decompositions, the HiGHS ILP solver);
- the performance library's contents for this machine and target and the
  FUSIONSTITCH_TUNE level (`tune.plan_key_part`), when the library has times or
  tuning is on: a plan made with measured times is the plan of those times. A plan
  that tuning made is stored under the library as it was after tuning, so the warm
  start that follows loads it without planning (or measuring) again.
Planning that reads anything else does not use the cache: a fuel limit
(`make_plan(fuel=...)`, the driver's FUSIONSTITCH_FUEL), a planner replaced in
`PLANNERS`, or a `score_hook` (only `plan_stitch` takes one, and `make_plan`, the one
caller of this cache, passes none).

The value is the plan's groups (node names, kind, composition) and the stages of
the planning run that made it (kept for reading, not reported again). A kernel group's
schedule (`Group.schedule`) is not stored: a loaded plan's groups are scheduled again by
the planner's function (`plan.schedule_of`), which gives what the planning run decided
(the key holds the graph and the code). Stored, a schedule would carry symbolic size
expressions and guards (ir/symbolic.py) through JSON for no gain; once schedules are
choices no function of the group gives, they must be stored (bump FORMAT then). Files are
`cache_dir("plans")/<key>.json`, written to a temporary file and renamed into
place (as the kernel caches do). An entry that does not load, does not match its
key or its checksum (of every field), or does not give a valid plan for the graph is
ignored (logged at DEBUG) and the graph is planned again: a bad entry costs time,
never a result.
`FUSIONSTITCH_PLAN_CACHE=0` turns the cache off.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from ..config import plan_cache_enabled
from ..ir.graph import Graph
from ..ir.text import print_graph
from ..runtime import counters
from ..runtime.cache import cache_dir, digest, register_memory_cache, write_atomic
from .plan import FREE, KERNEL, LIBRARY, FusionPlan, Group, is_input, node_kind, schedule_of

log = logging.getLogger("fusionstitch.fusion")

# Bump when the file layout changes: older files then miss instead of failing to load.
FORMAT = 2
# The stage a loaded plan reports: its seconds are the time the look-up took.
HIT_STAGE = "plan_cache"

# key -> (the plan's strategy, its groups as stored: ((nodes, kind, composition), ...))
_MEMORY: dict[str, tuple[str, tuple]] = {}


def enabled() -> bool:
    """Whether planning may use the cache now (FUSIONSTITCH_PLAN_CACHE)."""
    return plan_cache_enabled()


@lru_cache(maxsize=1)
def code_stamp() -> str:
    """A digest of this package's Python sources (what decides plans besides the graph)."""
    root = Path(__file__).resolve().parent.parent
    parts = []
    for path in sorted(root.rglob("*.py")):
        parts += [str(path.relative_to(root)), path.read_text(errors="replace")]
    return digest(*parts)


@lru_cache(maxsize=1)
def versions() -> str:
    import torch

    from ..config import __version__
    try:
        import scipy
        scipy_version = scipy.__version__
    except ImportError:  # the ILP falls back to greedy selection
        scipy_version = "none"
    return f"fusionstitch {__version__}, torch {torch.__version__}, scipy {scipy_version}"


def graph_text(graph: Graph) -> str:
    """The graph's IR text without its name (names are counters: forward_0, forward_7).
    A graph of symbolic sizes prints their expressions; the hints its inputs' sizes have
    follow (lowering, hence code-generation legality, decides at the hints)."""
    text = print_graph(replace(graph, name="g"))
    if graph.symbolic:
        from ..ir.symbolic import hint, is_symbolic
        hints = sorted({f"{d}={hint(d)}" for n in graph.params
                        for d in getattr(n.type, "shape", ()) if is_symbolic(d)})
        text += "\nhints " + " ".join(hints)
    return text


def plan_key(graph: Graph, strategy: str, target: str, tune: str | None = None) -> str:
    """`tune`: the performance library's part (`tune.plan_key_part`, read now when None);
    empty while the planner has no measured time to read, so keys stay as they were."""
    if tune is None:
        from ..tune import plan_key_part
        tune = plan_key_part(target)
    parts = (tune,) if tune else ()
    return digest(f"plan-cache {FORMAT}", versions(), code_stamp(), strategy, target,
                  graph_text(graph), *parts)


def _path(key: str) -> Path:
    return cache_dir("plans") / f"{key}.json"


def _encode(plan: FusionPlan) -> tuple[str, tuple]:
    return plan.strategy, tuple((g.nodes, g.kind, g.composition) for g in plan.groups)


def _checksum(entry: dict) -> str:
    """The digest of every field of a stored entry but its checksum (all of it is read
    back: a damaged byte anywhere makes the entry miss)."""
    rest = {k: v for k, v in entry.items() if k != "checksum"}
    return digest(json.dumps(rest, separators=(",", ":"), sort_keys=True))


def _read(key: str) -> tuple[str, tuple] | None:
    """The stored (strategy, groups) of `key`, or None (missing, unreadable, corrupt, another
    key)."""
    try:
        path = _path(key)
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:   # also a cache folder that cannot be made
        log.debug("plan cache: ignoring unreadable entry %s: %s", key, e)
        return None
    try:
        if entry["format"] != FORMAT or entry["key"] != key:
            raise ValueError("format or key does not match")
        if entry["checksum"] != _checksum(entry):
            raise ValueError("checksum does not match")
        groups = entry["groups"]
        if not isinstance(entry["strategy"], str):
            raise ValueError("no strategy")
        return entry["strategy"], tuple((tuple(nodes), kind, comp) for nodes, kind, comp in groups)
    except (KeyError, TypeError, ValueError) as e:
        log.debug("plan cache: ignoring %s: %s", path, e)
        return None


def _rebuild(graph: Graph, strategy: str, groups: tuple) -> FusionPlan:
    """The plan of `graph` with these groups; ValueError when they cannot be its plan."""
    position = {n.name: i for i, n in enumerate(graph.nodes) if not is_input(n)}
    out = []
    for i, (nodes, kind, comp) in enumerate(groups):
        if not nodes or not all(isinstance(n, str) and n in position for n in nodes):
            raise ValueError(f"group {i} names nodes that are not ops of the graph")
        if any(position[a] >= position[b] for a, b in zip(nodes, nodes[1:])):
            raise ValueError(f"group {i}: nodes are not in graph order")
        if not isinstance(comp, str):
            raise ValueError(f"group {i} has no composition")
        kinds = {node_kind(graph[n]) for n in nodes}
        if len(nodes) == 1:
            # code-generation legality may run a kernel op through torch
            ok = kind in kinds or (kinds == {KERNEL} and kind == LIBRARY)
        else:
            ok = kind == (FREE if kinds == {FREE} else KERNEL)
        if not ok:
            raise ValueError(f"group {i} cannot be a {kind!r} group")
        schedule = None
        if kind == KERNEL:
            schedule = schedule_of(graph, tuple(nodes))
            if schedule is None:    # a plan's kernel groups all lower, hence have one
                raise ValueError(f"group {i}: no schedule covers the kernel group")
        out.append(Group(i, tuple(nodes), kind, comp, schedule))
    plan = FusionPlan(graph, tuple(out), strategy)
    plan.validate()
    return plan


def load(graph: Graph, key: str) -> FusionPlan | None:
    """The cached plan of `graph` (stage `plan_cache`: the seconds this took), or None."""
    start = time.perf_counter()
    entry = _MEMORY.get(key)
    if entry is None:
        entry = _read(key)
    if entry is None:
        counters.bump("plan_cache_misses")
        return None
    try:
        plan = _rebuild(graph, *entry)
    except (ValueError, TypeError, KeyError) as e:   # TypeError: e.g. a list where a name is
        log.debug("plan cache: entry %s is not a plan of %s (%s); planning again",
                  key, graph.name, e)
        _MEMORY.pop(key, None)
        counters.bump("plan_cache_misses")
        return None
    _MEMORY[key] = entry
    counters.bump("plan_cache_hits")
    return plan.with_stages({HIT_STAGE: time.perf_counter() - start})


def store(plan: FusionPlan, target: str, key: str) -> None:
    """Remember `plan` under `key`, in memory and on disk (a failed write is only logged)."""
    strategy, groups = _MEMORY[key] = _encode(plan)
    as_lists = [[list(nodes), kind, comp] for nodes, kind, comp in groups]
    entry = {"format": FORMAT, "key": key, "strategy": strategy, "target": target,
             "graph": plan.graph.name, "stages": dict(plan.stages), "groups": as_lists}
    entry["checksum"] = _checksum(entry)
    try:
        write_atomic(_path(key), json.dumps(entry, separators=(",", ":")).encode("utf-8"))
    except OSError as e:
        log.debug("plan cache: cannot write %s: %s", key, e)


def clear_memory_cache() -> None:
    """Forget the plans of this process (the disk cache stays)."""
    _MEMORY.clear()


register_memory_cache(clear_memory_cache)
