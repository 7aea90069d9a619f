"""Composition of a group (FusionStitching 2019 §5.1): how its ops share one kernel.

- packing: independent components in one launch, each in its own block range
- thread:  elementwise chains, broadcasts and views fused in registers
- warp:    a row reduction short enough for one warp (softmax, layernorm rows)
- block:   longer rows, column or scalar reductions, small batched GEMMs, with
           intermediates in shared memory
"""
from __future__ import annotations

from ..ir.graph import Graph
from .propagate import Schedule, group_schedule

# A warp of 32 threads keeps up to 32 values per thread in registers: rows up to
# 1024 elements reduce inside one warp; longer rows need a block.
WARP_ROW_MAX = 1024


def composition(graph: Graph, names, schedule: Schedule | None = None) -> str:
    """The composition of group `names` from its schedule (`schedule`, when the caller
    has it; else decided here: `group_schedule`, raising Inconsistent)."""
    if schedule is None:
        schedule = group_schedule(graph, names)
    return composition_of(schedule)


def composition_of(schedule: Schedule) -> str:
    spaces = schedule.spaces
    if len(spaces) > 1:
        return "packing"
    s = spaces[0]
    if s.kind == "flat":
        return "thread"
    if s.kind == "row" and s.row <= WARP_ROW_MAX:
        return "warp"
    return "block"
