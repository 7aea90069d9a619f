"""Side-by-side A/B of backends on one workload, interleaved, by thread CPU time.

    python -m bench.ab resnet_infer [--variants eager,fusionstitch,inductor] [--rounds 30]
                       [--size small] [--threads 1] [--json OUT]

Builds the workload (the zoo's or a model of bench/models.py), compiles it once per
variant, runs ``--warmup`` steps of each, then ``--rounds`` rounds of one step of each
variant (each after one untimed step of its own: its steady state; the order rotates
every round), timing every step with ``time.thread_time()``: this thread's CPU time,
which other processes on a shared machine do not inflate (they still slow it through
caches and frequency, so compare the variants of one run, not runs). Prints the medians,
each variant's speed-up over the first, and ``fs/ind`` (Inductor's median over
fusionstitch's: below 1, we are slower).

With more than one torch thread the other threads' time is not counted: keep
``--threads 1`` (the default) for thread-time numbers.

The variant ``floor`` (`bench.run.floor_backend`) compiles the step with graphs that
replay their first outputs: what is left is what no backend avoids (Dynamo's guards,
AOTAutograd's runtime, the autograd engine, the step's Python). With it, ``graphs``
prints each backend's step less the floor (the time its graphs cost) and ``best
possible``: Inductor's step over the floor, the most any backend could gain over it.
Where replaying cannot work (a graph whose output sizes depend on the data, as in
mixtral's expert loop), ``dynamo_eager`` and ``aot_eager`` (torch's debug backends:
Dynamo's graphs, or AOTAutograd's, run eagerly) show what Dynamo's graph breaks and
guards cost on their own.

A variant may carry environment settings for its compilation and warm-up steps (what a
knob read when a program is built decides): ``fusionstitch:FUSIONSTITCH_CHAIN=0`` against
``fusionstitch`` times the same backend with and without kernel chains, side by side.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def _split(variant: str) -> tuple[str, dict]:
    """"fusionstitch:A=1,B=2" -> ("fusionstitch", {"A": "1", "B": "2"})."""
    name, _, rest = variant.partition(":")
    return name, dict(kv.split("=", 1) for kv in rest.split(",") if kv)


def parse_variants(text: str) -> tuple[str, ...]:
    """"eager,fusionstitch:A=1,B=2,inductor" -> ("eager", "fusionstitch:A=1,B=2",
    "inductor"): a comma item holding "=" is one more setting of the variant before it."""
    variants: list[str] = []
    for item in text.split(","):
        if "=" in item and ":" not in item and variants and ":" in variants[-1]:
            variants[-1] += "," + item
        elif item:
            variants.append(item)
    return tuple(variants)


def ab(workload: str, variants=("eager", "fusionstitch", "inductor"), rounds: int = 30,
       warmup: int = 3, size: str = "small", target: str = "cpu") -> dict:
    """Median thread time (ms) per variant of ``workload``, interleaved; see the module doc."""
    import torch

    from bench.run import _compile
    from bench.timing import environment, time_interleaved
    from bench.workloads import make, step
    # the models share one step function: without a reset, Dynamo's recompile limit
    # runs every model after the eighth compile eagerly
    torch._dynamo.reset()
    inst = make(workload, size)
    compiled = {}
    for v in variants:
        name, settings = _split(v)
        with environment(**settings):
            compiled[v] = _compile(name, inst.fn, target)
            for _ in range(warmup):
                step(inst, compiled[v])
    # each timed step after an untimed one of its own, the order rotating per round
    timed = time_interleaved({v: (lambda fn=fn: step(inst, fn)) for v, fn in compiled.items()},
                             warmup=0, repeat=rounds, clock=time.thread_time)
    med = {v: t["median_s"] * 1e3 for v, t in timed.items()}
    out = {"workload": workload, "size": size, "rounds": rounds, "median_ms": med}
    if "fusionstitch" in med and "inductor" in med:
        out["fs_over_inductor"] = med["inductor"] / med["fusionstitch"]
        if "floor" in med:   # the graphs' own time: the step's less what no backend avoids
            own = {v: med[v] - med["floor"] for v in ("fusionstitch", "inductor")}
            out["graphs_ms"] = own
            if own["fusionstitch"] > 0 and own["inductor"] > 0:
                out["fs_over_inductor_graphs"] = own["inductor"] / own["fusionstitch"]
            out["best_possible_over_inductor"] = med["inductor"] / med["floor"]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    p.add_argument("workloads", help="comma-separated workload or model names")
    p.add_argument("--variants", default="eager,fusionstitch,inductor")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--size", default="small")
    p.add_argument("--target", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="append one JSON line per workload to this file")
    a = p.parse_args(argv)
    import torch
    torch.set_num_threads(a.threads)
    variants = parse_variants(a.variants)
    for w in a.workloads.split(","):
        r = ab(w, variants, a.rounds, a.warmup, a.size, a.target)
        base = r["median_ms"][variants[0]]
        cols = "  ".join(f"{v} {ms:.3f} ms ({base / ms:.2f}x)" for v, ms in r["median_ms"].items())
        extra = f"  fs/ind {r['fs_over_inductor']:.2f}" if "fs_over_inductor" in r else ""
        if "graphs_ms" in r:
            g = r["graphs_ms"]
            extra += (f"  graphs fs {g['fusionstitch']:.3f} / ind {g['inductor']:.3f} ms"
                      f"  best possible {r['best_possible_over_inductor']:.2f}x ind")
        print(f"{w}: {cols}{extra}", flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
