"""Process-wide counters behind `fusionstitch.stats()` (see DESIGN.md)."""
from __future__ import annotations

# cache_hits / kernels_compiled: kernels; plan_cache_hits / plan_cache_misses: fusion
# plans looked up in the plan cache (fusion/plan_cache.py; a bypassed look-up is neither);
# graph_cache_hits / graph_cache_misses: AOTAutograd graphs looked up in the graph cache
# (frontend/graph_cache.py; a graph it may not cache is neither); buffers_recycled: kernel
# outputs given the memory of a dead value instead of a fresh allocation (runtime/recycle.py);
# cuda_graph_captures / cuda_graph_replays: programs captured in and replayed from CUDA
# graphs (runtime/cudagraph.py; a replay also bumps kernels_launched and library_calls);
# precompile_records / precompile_loads: graphs handed to and rebuilt from torch's caching
# precompile (frontend/precompile.py); specialisations: programs built for a graph (FX -> IR
# -> plan -> kernels), one per input signature, or one per guard region of a graph of
# symbolic sizes, of which symbolic_programs counts those (frontend/dynamic.py);
# dynamic_refusals: graphs of symbolic sizes compiled per shape because they could not be
# compiled symbolically (each logged at INFO with its reason); tune_measurements: fusion
# patterns timed by the performance library's tuner (FUSIONSTITCH_TUNE=1, fusionstitch/tune;
# its own compiles and launches are not counted elsewhere), tune_hits: patterns the stitch
# planner scored from measured times instead of the cost model, tune_rejected: library files
# or rows ignored as untrusted (damaged, another format or schema, values that are not times);
# triton_blocks_shrunk: first launches of a `cuda` kernel configured again with halved blocks
# because the binary did not fit the device's shared memory (targets/triton/printer.py)
_KEYS = ("kernels_launched", "library_calls", "compiles", "cache_hits", "fallbacks",
         "kernels_compiled", "inplace_writes", "plan_cache_hits", "plan_cache_misses",
         "graph_cache_hits", "graph_cache_misses", "buffers_recycled", "cuda_graph_captures",
         "cuda_graph_replays", "precompile_records", "precompile_loads", "specialisations",
         "symbolic_programs", "dynamic_refusals", "tune_measurements", "tune_hits",
         "tune_rejected", "triton_blocks_shrunk")
_COUNTERS: dict[str, int] = dict.fromkeys(_KEYS, 0)


def stats() -> dict[str, int]:
    """A copy of the counters: kernels launched, library calls, compiles, cache hits, fallbacks."""
    return dict(_COUNTERS)


def reset_stats() -> None:
    for k in _KEYS:
        _COUNTERS[k] = 0


def bump(key: str, n: int = 1) -> None:
    _COUNTERS[key] += n


def bumper(increments: dict[str, int]):
    """A function that adds `increments` (key -> n) to the counters in one call (what a
    generated Program wrapper bumps per call: runtime/wrapper.py)."""
    items = tuple((k, n) for k, n in increments.items() if n)
    unknown = [k for k, _ in items if k not in _COUNTERS]
    if unknown:   # fail now, not at the first call
        raise KeyError(f"unknown counters {unknown}")

    def bump_all() -> None:
        for k, n in items:
            _COUNTERS[k] += n
    return bump_all


def restore(saved: dict[str, int]) -> None:
    _COUNTERS.update(saved)
