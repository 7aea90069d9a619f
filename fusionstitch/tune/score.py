"""The stitch planner's scores with the performance library behind them.

`PerfScore` answers what `ModelScore` answers, the seconds a pattern saves against its
ops run alone, from measured times where the library holds both variants of the
pattern's key (`split - fused`, runtime/measure.py), and from the cost model elsewhere. Under
FUSIONSTITCH_TUNE=1 `tune(patterns)` measures those of the given patterns the library
lacks (the planner hands it the patterns the ILP chose: the fusions the plan would
run), records them, and reloads the library so that the scores come from what the file
holds (another process may have recorded the same key first: its time wins, for both).
"""
from __future__ import annotations

import logging

from ..runtime import counters
from ..targets import resolve
from . import library
from .key import PatternKey, op_signature, pattern_key

log = logging.getLogger("fusionstitch.tune")

class NotMeasurable(Exception):
    """The pattern cannot be measured on its own (why, in words)."""


# the function timing a pattern fused and split: runtime/measure.py (it builds programs,
# a layer above planning) registers it when the runtime is imported (docs/LAYERS.md)
_MEASURERS: list = []


def register_measurer(fn) -> None:
    _MEASURERS[:] = [fn]


def measure(graph, pattern, target: str) -> dict:
    if not _MEASURERS:
        raise NotMeasurable("no measurer is registered (fusionstitch.runtime.measure is "
                            "not imported)")
    return _MEASURERS[0](graph, pattern, target)

# measurements one planning run may make: a graph with more unmeasured choices goes on
# being tuned by later compiles (each plans with what the library then holds)
MAX_MEASUREMENTS = 32


class PerfScore:
    def __init__(self, graph, target: str, model, level: int):
        self.graph = graph
        self.target = target
        self.model = model
        self.snap = library.snapshot(target)
        # only targets whose kernels are worth timing (Target.tunable: the interpreter's
        # times say nothing of a GPU)
        self.tuning = (level >= 1 and resolve(target).tunable and not graph.symbolic)
        self.measured_here = 0
        self._keys: dict[frozenset, PatternKey] = {}
        self._position: dict[str, int] | None = None
        self._hits: set[frozenset] = set()
        self._tried: set[frozenset] = set()

    def key(self, pattern: frozenset) -> PatternKey:
        k = self._keys.get(pattern)
        if k is None:
            if self._position is None:
                self._position = {n.name: i for i, n in enumerate(self.graph.nodes)}
            k = self._keys[pattern] = pattern_key(self.graph, pattern, self._position)
        return k

    def measured(self, pattern: frozenset) -> float | None:
        """Seconds the pattern saves by the library's times, or None (not measured)."""
        if not self.snap.times:
            return None
        if pattern not in self._keys and \
                op_signature(self.graph, pattern) not in self.snap.signatures:
            return None
        k = self.key(pattern)
        fused, split = self.snap.get(k, "fused"), self.snap.get(k, "split")
        if fused is None or split is None:
            return None
        if pattern not in self._hits:
            self._hits.add(pattern)
            counters.bump("tune_hits")
        return split - fused

    def __call__(self, graph, pattern: frozenset, device) -> float:
        m = self.measured(pattern)
        return self.model(graph, pattern, device) if m is None else m

    def _choice(self, pattern: frozenset) -> bool:
        """Whether running the pattern fused is a choice (two launches or more apart)."""
        return sum(self.model.launches.get(m, 0) for m in pattern) >= 2

    def tune(self, patterns) -> int:
        """Measure the patterns the library lacks (FUSIONSTITCH_TUNE=1); how many were."""
        if not self.tuning:
            return 0
        entries = []
        for p in patterns:
            if (self.measured_here >= MAX_MEASUREMENTS or p in self._tried
                    or not self._choice(p) or self.measured(p) is not None):
                continue
            self._tried.add(p)
            try:
                got = measure(self.graph, p, self.target)
            except NotMeasurable as e:
                log.debug("tune: a pattern of %d ops is not measured: %s", len(p), e)
                continue
            except Exception as e:   # a kernel that does not build or run: the model decides
                log.warning("tune: measuring a pattern of %d ops failed (%s: %s); the cost "
                            "model scores it", len(p), type(e).__name__, e)
                continue
            self.measured_here += 1
            counters.bump("tune_measurements")
            k = self.key(p)
            log.info("tune: %d ops fused %.3g s, split %.3g s (%s)", len(p),
                     got["fused"][0], got["split"][0], k.shapes)
            entries += [(k, v, t, n) for v, (t, n) in got.items()]
        if entries:
            library.record(self.target, entries)
            self.snap = library.snapshot(self.target)
        return len(entries) // 2
