"""The performance library: measured kernel times that the planner prefers to its model.

FusionStitching 2018 §4.4 keeps a persistent key-value store of measured kernel times;
2019 §4.3 scores fusion patterns by execution (time the ops alone, time the fused
kernel) where the cost model cannot rank them. Here:

- `key.py`: what a time is keyed by (pattern structure, shape bucket, dtypes, target,
  machine);
- `library.py`: the sqlite store, read once per file version, never trusted when damaged;
- `fusionstitch/runtime/measure.py`: timing a pattern fused and split (a runtime-layer
  module: it builds programs; it registers itself with score.py);
- `score.py`: the stitch planner's scores, measured where the library has them.

FUSIONSTITCH_TUNE (config.tune_level): `off` plans with the cost model alone; 0 (the
default) plans with the library's times where it has them and measures nothing (no
kernel is timed on the compile path); 1 also measures the fusions the planner chose that
the library lacks, once per key, then plans again with them. Planning is a function of
the graph and the library's contents: the plan cache's key holds the library's digest
(`plan_key_part`), so a library that changed re-plans, and one that did not is not read
again.
"""
from __future__ import annotations

from .. import config


def plan_key_part(target: str) -> str:
    """What the plan cache's key needs of the library: "" while there is nothing to use."""
    level = config.tune_level()
    if level < 0:
        return "tune off"
    from . import library
    stamp = library.snapshot(target).stamp
    if level == 0 and not stamp:
        return ""
    return f"tune {level} {stamp}"


def perf_score(graph, target: str, model):
    """The score the stitch planner uses: a `PerfScore` over `model`, or None when the
    library has nothing for this target and tuning is off (the model alone, at no cost)."""
    level = config.tune_level()
    if level < 0:
        return None
    from .library import snapshot
    from .score import PerfScore
    if level == 0 and not snapshot(target).times:
        return None
    return PerfScore(graph, target, model, level)
