"""Wall-clock timing of one benchmark step, and the versions a result depends on.

    from bench.timing import time_step, versions
    t = time_step(lambda: step(inst, fn), repeat=10, min_time=0.5)
    t["median_s"], t["p10_s"], t["p90_s"], t["runs"]
    ts = time_interleaved({"eager": run_a, "compiled": run_b}, repeat=10)  # side by side

Results are reported as medians (robust to the odd slow run from the OS or the
allocator); p10/p90 show the spread. On CPU the torch thread count is left as
it is and recorded by :func:`versions`; on CUDA every run is bracketed by
``torch.cuda.synchronize()`` so the time covers the kernels, not just their
launches.
"""
from __future__ import annotations

import datetime
import gc
import os
import platform
import sys
import time
from contextlib import contextmanager
from typing import Callable

__all__ = ["time_step", "time_interleaved", "percentile", "versions"]


def percentile(xs: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``xs``, linear interpolation (numpy's default)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _synchronizer(device) -> Callable[[], None]:
    """A function that waits for the device's queued work (a no-op on CPU)."""
    if device is None or str(device).split(":")[0] != "cuda":
        return lambda: None
    import torch
    return torch.cuda.synchronize


def time_step(step_fn: Callable[[], object], *, warmup: int = 3, repeat: int = 10,
              min_time: float = 0.0, max_runs: int = 1000, device=None) -> dict:
    """Time ``step_fn()``: ``warmup`` untimed calls, then at least ``repeat`` timed runs,
    more (up to ``max_runs``) until the timed runs add up to ``min_time`` seconds.

    Returns ``{"median_s", "p10_s", "p90_s", "min_s", "runs"}``.
    """
    return time_interleaved({"step": step_fn}, warmup=warmup, repeat=repeat,
                            min_time=min_time, max_runs=max_runs, device=device)["step"]


def time_interleaved(step_fns: dict[str, Callable[[], object]], *, warmup: int = 3,
                     repeat: int = 10, min_time: float = 0.0, max_runs: int = 1000,
                     device=None, settle: int = 1,
                     clock: Callable[[], float] = time.perf_counter) -> dict[str, dict]:
    """Time several step functions side by side, one timed run of each per round.

    Interleaving makes a slow spell of a shared machine (another process, a noisy
    neighbour, frequency changes) hit every variant alike instead of whichever was
    being timed then. Each timed run follows ``settle`` untimed runs of the same
    function, so that every variant is timed in its steady state (caches holding its
    own code and data, as in a training loop), not right after another variant: timed
    right after eager's step, a sub-millisecond compiled step read 40-70 us slower than
    right after itself (thread time, this 2-core VM), which biased every ratio against
    the variant that followed eager. The order also rotates from round to round.
    Rounds go on until there are ``repeat`` of them and the timed runs add up to
    ``min_time`` seconds per function (at most ``max_runs`` rounds). The garbage
    collector is paused during the timed runs (as ``timeit`` does). ``clock``: wall time
    by default; ``time.thread_time`` counts this thread's CPU time alone (bench/ab.py).
    Returns ``{name: {"median_s", "p10_s", "p90_s", "min_s", "runs"}}``.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, not {repeat}")
    sync = _synchronizer(device)
    for _ in range(warmup):
        for fn in step_fns.values():
            fn()
    sync()
    times: dict[str, list[float]] = {name: [] for name in step_fns}
    names = list(step_fns)
    if len(names) == 1:
        settle = 0      # (its last run is its own)
    total = 0.0
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        rounds = 0
        while rounds < repeat or (total < min_time * len(step_fns) and rounds < max_runs):
            k = rounds % len(names)
            for name in names[k:] + names[:k]:
                fn = step_fns[name]
                for _ in range(settle):
                    fn()
                sync()
                start = clock()
                fn()
                sync()
                times[name].append(clock() - start)
                total += times[name][-1]
            rounds += 1
    finally:
        if was_enabled:
            gc.enable()
    return {name: {"median_s": percentile(ts, 50), "p10_s": percentile(ts, 10),
                   "p90_s": percentile(ts, 90), "min_s": min(ts), "runs": len(ts)}
            for name, ts in times.items()}


def _cpu_model() -> str:
    from fusionstitch.tune.key import cpu_model
    return cpu_model()


def versions() -> dict:
    """Software and machine a benchmark ran on: torch, triton, python, fusionstitch, CPU,
    torch threads, GPU (if any) and the UTC date."""
    import torch

    import fusionstitch
    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # not installed, or fails to import without a GPU driver
        triton_version = None
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "torch": torch.__version__,
        "triton": triton_version,
        "python": sys.version.split()[0],
        "fusionstitch": fusionstitch.__version__,
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": gpu,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


@contextmanager
def environment(**values):
    """Environment variables set for the block (a value None leaves its variable as it
    is), and restored after it: a knob read when a program is built, for one variant."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
