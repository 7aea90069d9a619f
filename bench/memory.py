"""Peak memory of eager, Inductor and fusionstitch on the zoo workloads.

    python -m bench.memory [--workloads a,b] [--size small|full] [--variants ...]
                           [--steps N] [--device cpu|cuda] [--out DIR]

Each (workload, variant) runs in a fresh Python process, so that one variant's
allocations, caches and compiled code never count against another. In the child:
imports (torch, fusionstitch and Inductor for every variant, so the baseline is the
same), the workload built (``bench.workloads.make``), then

* ``baseline``: resident memory before anything is compiled;
* compile and two warm-up steps (a step as in bench/run.py: inference under
  ``no_grad``, training with ``.backward()`` of the output), outputs dropped;
* ``steps``: the peak while ``--steps`` more steps run (on CPU the kernel's
  high-water mark ``VmHWM``, reset just before through ``/proc/self/clear_refs``, after
  glibc's free heap memory was given back with ``malloc_trim``: else what compiling
  freed but the heap kept, which varies by tens of MiB with the heap's history, would
  hide or fake the steps' needs; on CUDA ``torch.cuda.max_memory_allocated`` after
  ``reset_peak_memory_stats``);
* ``held``: resident (CPU) or allocated (CUDA) memory after the steps, every output
  dropped: what the variant keeps between calls;
* ``process_peak`` (CPU): the process's peak resident memory, compile included
  (``ru_maxrss``).

Before the measured child of a compiled variant, one throwaway child runs it, so that
every measured compile finds its caches warm (Inductor's FX graph cache, our plan and
kernel caches): a cold compile leaves more behind in the process (planning, loading
the compiler), and whichever variant ran first would pay for it.

The table reports each variant's step peak (what the process needs, compiled code
included), the rise during the steps (peak minus the memory just before them: what
running adds) and held memory, in MiB, absolute: every child has the same imports and
inputs, and the baseline itself varies by ~15 MiB from process to process (lazily
started threads, allocator state), more than the differences measured; and
fusionstitch's step peak minus Inductor's (the issue's target: not above 0).
Variants: ``eager``, ``inductor``, ``fusionstitch`` and ``fusionstitch_norecycle``
(``FUSIONSTITCH_RECYCLE=0``: what buffer recycling adds). Writes
``memory_<device>_<size>_<date>.json`` and ``.md`` (the table, versions, command).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shlex
import subprocess
import sys

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.child import ROOT, run_json  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "bench", "results")
VARIANTS = ("eager", "inductor", "fusionstitch", "fusionstitch_norecycle")
MIB = 2 ** 20


# --- the child: one variant of one workload -----------------------------------------------
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset the kernel's high-water mark of resident memory to the current value."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _trim() -> bool:
    """Give glibc's free heap memory back to the system (malloc_trim): what compiling and
    the warm-up steps freed but the heap kept, which varies with the heap's history by
    tens of MiB; False where there is no glibc."""
    import ctypes
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def _compiled(inst, variant: str):
    import torch
    if variant == "eager":
        return inst.fn
    if variant == "inductor":
        return torch.compile(inst.fn)
    import fusionstitch
    return torch.compile(inst.fn, backend=fusionstitch.backend(
        target="cuda" if inst.args and _device(inst) == "cuda" else "cpu"))


def _device(inst) -> str:
    import torch
    for a in inst.args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


def child(name: str, variant: str, size: str, steps: int, device: str) -> dict:
    if variant == "fusionstitch_norecycle":
        os.environ["FUSIONSTITCH_RECYCLE"] = "0"
    import torch
    import torch._inductor.compile_fx  # noqa: F401  (the same imports for every variant)

    import fusionstitch  # noqa: F401
    from bench import workloads as W
    from bench.run import lean_step

    inst = W.make(name, size, device=device)
    cuda = device == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
    else:
        base = _status_kib("VmRSS") * 1024
    run = lean_step(inst, _compiled(inst, variant))
    for _ in range(2):
        run()
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        trimmed = _trim()
        if not _reset_peak():
            raise RuntimeError("cannot reset the resident high-water mark (/proc/self/clear_refs)")
        before = _status_kib("VmRSS") * 1024
    for _ in range(steps):
        run()
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        peak, held = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
        process_peak = None
    else:
        peak, held = _status_kib("VmHWM") * 1024, _status_kib("VmRSS") * 1024
        process_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"workload": name, "variant": variant, "baseline": base, "before_steps": before,
            "steps_peak": peak, "held": held, "process_peak": process_peak,
            "trimmed": None if cuda else trimmed}


# --- the parent -------------------------------------------------------------------------
def _run_child(name: str, variant: str, size: str, steps: int, device: str,
               timeout: float) -> dict:
    try:
        row, proc = run_json("bench.memory", ["--child", name, variant, "--size", size,
                                              "--steps", str(steps), "--device", device],
                             timeout)
    except subprocess.TimeoutExpired:
        return {"workload": name, "variant": variant, "error": f"timed out after {timeout} s"}
    if row is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"workload": name, "variant": variant,
                "error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return row


def _mib(row: dict, key: str) -> float | None:
    if "error" in row or row.get(key) is None:
        return None
    return row[key] / MIB


def _rise(row: dict) -> float | None:
    if "error" in row:
        return None
    return (row["steps_peak"] - row["before_steps"]) / MIB


def table(rows: list[dict], variants: list[str]) -> str:
    """Per variant: the step peak, the rise during the steps and what is held after them
    (MiB, absolute: every process has the same imports and inputs); fusionstitch's step
    peak minus Inductor's."""
    by = {(r["workload"], r["variant"]): r for r in rows}
    names = list(dict.fromkeys(r["workload"] for r in rows))
    head = ["workload"] + [f"{v} peak" for v in variants] + \
        [f"{v} rise" for v in variants] + [f"{v} held" for v in variants]
    diff = "fusionstitch" in variants and "inductor" in variants
    if diff:
        head.append("fusionstitch - inductor peak")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    def cell(value):
        return "error" if value is None else f"{value:.1f}"
    for n in names:
        got = {v: by.get((n, v), {"error": "not run"}) for v in variants}
        cells = [n]
        cells += [cell(_mib(got[v], "steps_peak")) for v in variants]
        cells += [cell(_rise(got[v])) for v in variants]
        cells += [cell(_mib(got[v], "held")) for v in variants]
        if diff:
            f, i = _mib(got["fusionstitch"], "steps_peak"), _mib(got["inductor"], "steps_peak")
            cells.append("-" if f is None or i is None else f"{f - i:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(rows: list[dict], meta: dict, out: str) -> str:
    """The JSON (rows, table, meta) and a Markdown page with the table; their stem."""
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    text = table(rows, variants)
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f"memory_{meta['device']}_{meta['size']}_{meta['date'][:10]}")
    with open(stem + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows, "table": text}, f, indent=1)
    unit = "resident memory (VmHWM / VmRSS)" if meta["device"] == "cpu" else \
        "allocated CUDA memory"
    with open(stem + ".md", "w") as f:
        f.write(f"# Peak memory, {meta['device']}, {meta['size']} size\n\n"
                f"MiB of {unit}, each (workload, variant) in a fresh process with the same "
                f"imports and inputs (caches warmed by a throwaway run). `peak`: the most "
                f"while {meta['steps']} steps ran after two warm-up steps (on CPU from a "
                f"heap trimmed with malloc_trim); `rise`: that peak "
                f"minus the memory just before the steps; `held`: after them, every output "
                f"dropped (a training step's `.grad`s stay).\n\n{text}\n\n```\n"
                f"{json.dumps(meta, indent=1)}\n```\n")
    return stem


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="")
    p.add_argument("--size", default="small", choices=("small", "full"))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per child")
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--table-from", metavar="JSON",
                   help="write the table and page again from a result file (its rows and meta)")
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "VARIANT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.size, args.steps, args.device)))
        return 0
    if args.table_from:
        with open(args.table_from) as f:
            saved = json.load(f)
        print(f"wrote {write(saved['rows'], saved['meta'], args.out)}.md")
        return 0
    from bench import workloads as W
    from bench.timing import versions
    names = [n for n in args.workloads.split(",") if n] or W.names()
    variants = [v for v in args.variants.split(",") if v]
    rows = []
    for n in names:
        for v in variants:
            if v != "eager" and not v.endswith("_norecycle"):   # warm the caches first
                _run_child(n, v, args.size, 1, args.device, args.timeout)
            rows.append(_run_child(n, v, args.size, args.steps, args.device, args.timeout))
            r = rows[-1]
            print(f"{n} {v}: " + (r["error"] if "error" in r else
                                  f"peak {_mib(r, 'steps_peak'):.1f} MiB, "
                                  f"held {_mib(r, 'held'):.1f} MiB"), flush=True)
    meta = {**versions(), "command": "python -m bench.memory " + " ".join(map(shlex.quote, argv)),
            "size": args.size, "steps": args.steps, "device": args.device}
    stem = write(rows, meta, args.out)
    print(table(rows, variants))
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
