"""Kernel counts and modelled bytes of every zoo workload under none / xla / stitch.

    python -m bench.plan_table [--size full] [--target cuda] [--out bench/results]

Each workload's forward and backward graphs are captured once (through
fusionstitch.explain with strategy none), then planned by every strategy.
Writes plan_counts_<target>_<size>.json and .md with device, versions, date
and the command; prints the table. Planning needs no GPU: target only picks
the cost-model entry.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import sys
import time

STRATEGIES = ("none", "xla", "stitch")


def capture(name: str, size: str, **overrides):
    """The canonicalised graphs of one training/inference step of a zoo workload."""
    import torch

    import fusionstitch
    from bench import workloads as W
    torch._dynamo.reset()
    inst = W.make(name, size, **overrides)
    grad = torch.no_grad() if inst.workload.mode == "inference" else contextlib.nullcontext()
    with grad:
        rep = fusionstitch.explain(inst.fn, *inst.args, strategy="none")
    return [g.plan.graph for g in rep.graphs if g.plan is not None]


def plan_all(graphs, target: str) -> dict:
    from fusionstitch.analysis.cost import plan_bytes
    from fusionstitch.fusion import make_plan
    from fusionstitch.report.explain import count_ops
    row = {"ops": sum(count_ops(g) for g in graphs)}
    for strategy in STRATEGIES:
        k = lib = nbytes = 0
        start = time.perf_counter()
        for g in graphs:
            plan = make_plan(g, strategy, target)
            k += plan.num_kernels
            lib += plan.num_library_calls
            nbytes += plan_bytes(plan)
        row[strategy] = {"kernels": k, "library_calls": lib, "bytes": nbytes,
                         "planning_s": round(time.perf_counter() - start, 4)}
    return row


def geomean(xs) -> float:
    xs = [max(x, 1e-12) for x in xs]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summarise(rows: dict) -> dict:
    ratio = [r["stitch"]["kernels"] / max(r["xla"]["kernels"], 1) for r in rows.values()]
    launches = [(r["stitch"]["kernels"] + r["stitch"]["library_calls"])
                / max(r["xla"]["kernels"] + r["xla"]["library_calls"], 1) for r in rows.values()]
    return {
        "geomean_stitch_over_xla_kernels": round(geomean(ratio), 4),
        "geomean_stitch_over_xla_launches": round(geomean(launches), 4),
        "stitch_bytes_never_above_xla": all(r["stitch"]["bytes"] <= r["xla"]["bytes"]
                                            for r in rows.values()),
        "xla_fewer_kernels_than_none_everywhere": all(
            r["xla"]["kernels"] < r["none"]["kernels"] for r in rows.values()),
    }


def markdown(meta: dict, rows: dict, summary: dict) -> str:
    out = [f"# Plan table: target {meta['target']}, size {meta['size']}", "",
           f"- date: {meta['date']}", f"- command: `{meta['command']}`",
           f"- machine: {meta['machine']}", f"- versions: {meta['versions']}", "",
           "| workload | ops | none k | xla k | stitch k | stitch/xla | xla k+lib | stitch k+lib "
           "| xla MB | stitch MB | stitch plan s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        out.append(f"| {name} | {r['ops']} | {r['none']['kernels']} | {r['xla']['kernels']} | "
                   f"{r['stitch']['kernels']} | "
                   f"{r['stitch']['kernels'] / max(r['xla']['kernels'], 1):.2f} | "
                   f"{r['xla']['kernels'] + r['xla']['library_calls']} | "
                   f"{r['stitch']['kernels'] + r['stitch']['library_calls']} | "
                   f"{r['xla']['bytes'] / 1e6:.2f} | {r['stitch']['bytes'] / 1e6:.2f} | "
                   f"{r['stitch']['planning_s']:.2f} |")
    out += ["", f"- geomean stitch/xla kernels: **{summary['geomean_stitch_over_xla_kernels']}**"
            " (target <= 0.5)",
            f"- geomean stitch/xla launches (kernels + library calls): "
            f"**{summary['geomean_stitch_over_xla_launches']}**",
            f"- stitch never moves more modelled bytes than xla: "
            f"**{summary['stitch_bytes_never_above_xla']}**",
            f"- xla uses fewer kernels than none everywhere: "
            f"**{summary['xla_fewer_kernels_than_none_everywhere']}**", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="full", choices=("small", "full"))
    p.add_argument("--target", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--workloads", default="")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = p.parse_args(argv)
    import torch

    import fusionstitch
    from bench import workloads as W
    names = [w for w in args.workloads.split(",") if w] or W.names()
    rows = {}
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name}", file=sys.stderr, flush=True)
        rows[name] = plan_all(capture(name, args.size), args.target)
    meta = {"target": args.target, "size": args.size,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python -m bench.plan_table " + " ".join(argv or sys.argv[1:]),
            "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
            "versions": {"fusionstitch": fusionstitch.__version__, "torch": torch.__version__,
                         "python": platform.python_version()}}
    summary = summarise(rows)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"plan_counts_{args.target}_{args.size}")
    with open(stem + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows, "summary": summary}, f, indent=1)
    text = markdown(meta, rows, summary)
    with open(stem + ".md", "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
