"""Persistent against looped row reductions: which variant of a reduce kernel is faster at
which row length (``targets/triton/printer.py``'s ``PERSISTENT_RNUMEL`` rule).

    python -m bench.reductions [--target cuda|interpret] [--lengths 256,512,...]
                               [--elements N] [--dtype float32|bfloat16] [--out DIR]

For each case (softmax, layer norm with weight and bias) and row length, over about
``--elements`` elements (default 2**24: 64 MiB of fp32, far past the L2 of a GPU), three
variants are timed side by side (``bench.timing.time_interleaved``):

* ``eager``: torch;
* ``persistent``: fusionstitch with every row that fits one block kept in registers
  (rows up to the largest block, 2048 on the GPU);
* ``looped``: fusionstitch with the persistent variant turned off (each loop re-reads
  the row).

Each fusionstitch variant is compiled afresh (in-memory caches cleared) under its own
limit, and checked against eager. Reported per row: medians, the bandwidth each achieved
(the row's input read once and its output written once, over the median), and
``looped / persistent`` (above 1: persistent is faster). Writes
``reductions_<target>_<date>.json`` into ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.timing import time_interleaved, versions  # noqa: E402

LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
CASES = ("softmax", "layer_norm")


def _case(name: str):
    import torch
    import torch.nn.functional as F
    if name == "softmax":
        return lambda x, w, b: torch.softmax(x * 2.0, -1)
    return lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b)


def _first_call(fn, args, target: str, limit: int):
    """``fn`` compiled afresh by fusionstitch (in-memory caches cleared) and called once
    with PERSISTENT_RNUMEL at ``limit``: the limit is read when a kernel's launch is first
    configured, which is then. Returns (the compiled function, its first result, the
    variant each reduce launch took: True for persistent)."""
    import torch

    import fusionstitch
    from fusionstitch.targets.triton import printer as T
    from fusionstitch.runtime.cache import clear_memory_caches
    torch._dynamo.reset()
    clear_memory_caches()
    chosen, real, old = [], T.persistent, T.PERSISTENT_RNUMEL
    T.persistent = lambda *a: chosen.append(real(*a)) or chosen[-1]
    T.PERSISTENT_RNUMEL = limit
    try:
        compiled = torch.compile(lambda *a: fn(*a), backend=fusionstitch.backend(target=target))
        return compiled, compiled(*args), chosen
    finally:
        T.persistent, T.PERSISTENT_RNUMEL = real, old


def bench_row(case: str, length: int, target: str, elements: int, dtype: str,
              repeat: int, min_time: float) -> dict:
    import torch

    from fusionstitch.targets.triton import printer as T
    device = "cuda" if target == "cuda" else "cpu"
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(length)
    rows = max(1, elements // length)
    x = torch.randn(rows, length, generator=g).to(device, dt)
    w = torch.randn(length, generator=g).to(device, dt)
    b = torch.randn(length, generator=g).to(device, dt)
    fn = _case(case)
    ref = fn(x, w, b)
    runs = {"eager": lambda: fn(x, w, b)}
    row = {"case": case, "length": length, "rows": rows, "variants": {}}
    for variant, limit in (("persistent", T.PERSISTENT_RNUMEL), ("looped", 0)):
        c, got, chosen = _first_call(fn, (x, w, b), target, limit)
        err = ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item()
        row["variants"][variant] = {"max_rel_err": err, "persistent_launches": sum(chosen),
                                    "reduce_launches": len(chosen)}
        runs[variant] = (lambda c=c: c(x, w, b))
    timed = time_interleaved(runs, warmup=3, repeat=repeat, min_time=min_time, device=device)
    nbytes = 2 * x.numel() * x.element_size()
    for variant, t in timed.items():
        e = row["variants"].setdefault(variant, {})
        e.update(t)
        e["achieved_gbs"] = nbytes / t["median_s"] / 1e9
    v = row["variants"]
    row["looped_over_persistent"] = v["looped"]["median_s"] / v["persistent"]["median_s"]
    return row


def table(rows: list[dict]) -> str:
    lines = ["| case | row length | rows | eager ms | persistent ms | looped ms | "
             "looped / persistent | GB/s persistent | GB/s looped |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        v = r["variants"]
        lines.append(
            f"| {r['case']} | {r['length']} | {r['rows']} | {v['eager']['median_s'] * 1e3:.3f} "
            f"| {v['persistent']['median_s'] * 1e3:.3f} | {v['looped']['median_s'] * 1e3:.3f} "
            f"| {r['looped_over_persistent']:.2f} | {v['persistent']['achieved_gbs']:.0f} "
            f"| {v['looped']['achieved_gbs']:.0f} |")
    return "\n".join(lines)


def run(target: str = "cuda", lengths=LENGTHS, elements: int = 1 << 24,
        dtype: str = "float32", repeat: int = 20, min_time: float = 0.2,
        out_dir: str | None = None) -> dict:
    from fusionstitch.targets.triton import printer as T
    if target not in ("cuda", "interpret"):
        raise ValueError(f"target must be cuda or interpret, not {target!r}")
    rows = [bench_row(case, n, target, elements, dtype, repeat, min_time)
            for case in CASES for n in lengths]
    vers = versions()
    result = {"meta": {"target": target, "dtype": dtype, "elements": elements,
                       "persistent_rnumel": T.PERSISTENT_RNUMEL, "versions": vers,
                       "date": vers["date"]}, "rows": rows}
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"reductions_{target}_{vers['date'][:10]}.json")
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        result["json_path"] = path
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.reductions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="cuda", choices=("cuda", "interpret"))
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    p.add_argument("--elements", type=int, default=1 << 24)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--out", default=None, help="folder for the JSON (default: none written)")
    args = p.parse_args(argv)
    result = run(args.target, [int(n) for n in args.lengths.split(",")], args.elements,
                 args.dtype, args.repeat, out_dir=args.out)
    print(table(result["rows"]))
    tol = 1e-4 if args.dtype == "float32" else 2e-2
    bad = [f"{r['case']}/{r['length']}/{v}" for r in result["rows"]
           for v, e in r["variants"].items() if e.get("max_rel_err", 0) > tol]
    if bad:
        print("differs from eager: " + ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
