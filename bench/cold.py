"""Cold compile: the first step of a fresh process with empty caches, per backend.

    python -m bench.cold gpt2_infer,bert_train [--backends fusionstitch,inductor]
                         [--size small] [--json OUT]

Each (workload, backend) runs in a new Python process of its own, with new empty
fusionstitch and Inductor cache folders and one torch thread: it builds the workload
(the zoo's or a model of bench/models.py), compiles it as ``bench.ab`` does and times
the first step, which traces, plans, generates and compiles everything. Two clocks:
CPU seconds of the process and of the children it waited for (g++; `resource`), which
a shared machine's load changes least, and wall seconds. Inductor compiles in the
process (``TORCHINDUCTOR_COMPILE_THREADS=1``): its compile workers would otherwise run
in a pool whose CPU time no clock of ours sees. Prints one line per workload with
``fs/ind`` (our CPU seconds over Inductor's: at or below 0.5 is issue 19's bar) and the
geomean; ``--json`` writes the rows with the machine and versions.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from bench.child import run_json
from bench.summary import geomean

_CHILD = "--one"


def _one(workload: str, backend: str, size: str) -> dict:
    """In the fresh process: build, compile, time the first step."""
    import resource
    import time

    import torch
    torch.set_num_threads(1)
    from bench.run import _compile
    from bench.workloads import make, step

    def cpu() -> float:
        s = resource.getrusage(resource.RUSAGE_SELF)
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    inst = make(workload, size)
    fn = _compile(backend, inst.fn, "cpu")
    c0, w0 = cpu(), time.perf_counter()
    step(inst, fn)
    return {"workload": workload, "backend": backend, "size": size,
            "cpu_s": cpu() - c0, "wall_s": time.perf_counter() - w0}


def cold(workload: str, backend: str, size: str = "small", timeout: float = 1800) -> dict:
    """One cold first step in a new process with empty caches (the module doc)."""
    with tempfile.TemporaryDirectory(prefix="fs-cold-") as tmp:
        env = {**os.environ,
               "FUSIONSTITCH_CACHE_DIR": os.path.join(tmp, "fusionstitch"),
               "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"),
               "TRITON_CACHE_DIR": os.path.join(tmp, "triton"),
               "TORCHINDUCTOR_COMPILE_THREADS": "1", "OMP_NUM_THREADS": "1"}
        row, proc = run_json("bench.cold", [_CHILD, workload, backend, size], timeout, env)
    if row is None:
        raise RuntimeError(f"cold compile of {workload} with {backend} failed "
                           f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return row


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [_CHILD]:
        print(json.dumps(_one(*argv[1:4])))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.cold", description=__doc__.split("\n")[0])
    p.add_argument("workloads", help="comma-separated zoo or model workloads")
    p.add_argument("--backends", default="fusionstitch,inductor")
    p.add_argument("--size", default="small", choices=("small", "full"))
    p.add_argument("--json", help="write the rows (and the machine) to this file")
    a = p.parse_args(argv)
    from bench.timing import versions
    backends = a.backends.split(",")
    rows, ratios = [], []
    for w in a.workloads.split(","):
        got = {}
        for b in backends:
            print(f"{w}: {b} ...", file=sys.stderr, flush=True)
            got[b] = cold(w, b, a.size)
            rows.append(got[b])
        line = "  ".join(f"{b} {r['cpu_s']:.1f} cpu s ({r['wall_s']:.1f} wall)"
                         for b, r in got.items())
        if {"fusionstitch", "inductor"} <= set(got):
            ratios.append(got["fusionstitch"]["cpu_s"] / got["inductor"]["cpu_s"])
            line += f"  fs/ind {ratios[-1]:.2f}"
        print(f"{w}: {line}", flush=True)
    if ratios:
        print(f"geomean fs/ind (cpu s) over {len(ratios)}: {geomean(ratios):.2f}; "
              f"worst {max(ratios):.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": versions(), "command": "python -m bench.cold "
                       + " ".join(argv), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
