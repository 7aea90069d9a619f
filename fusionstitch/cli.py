"""The `fusionstitch` command line.

    fusionstitch demo [--workloads a,b] [--size small|full]
        compile a few zoo workloads, check them against eager, print ops -> kernels
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

DEMO_WORKLOADS = ("mlp", "layernorm_softmax_gelu", "lstm", "transformer_encoder", "adam",
                  "cartpole")


def _bench_module():
    """bench/ lives beside the package in the repository; make it importable."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from bench import workloads
    return workloads


def _max_rel_err(got, ref) -> float:
    worst = 0.0
    for g, r in zip(got, ref):
        if r.numel():
            diff = (g.double() - r.double()).abs().max().item()
            worst = max(worst, diff / max(r.double().abs().max().item(), 1e-12))
    return worst


def demo(workload_names: list[str], size: str, strategies: list[str]) -> int:
    import torch

    import fusionstitch
    W = _bench_module()
    header = (f"{'workload':26s} {'mode':9s} {'ops':>6s} "
              + " ".join(f"{'k:' + s:>9s}" for s in strategies)
              + f" {'libcalls':>8s} {'MB moved':>9s} {'max rel err':>11s} {'compile s':>9s}")
    print(f"fusionstitch {fusionstitch.__version__} demo: torch {torch.__version__}, "
          f"size={size}, target={fusionstitch.backend().options.resolved_target()}")
    print(header)
    print("-" * len(header))
    failures = 0
    for i, name in enumerate(workload_names, 1):
        print(f"[{i}/{len(workload_names)}] {name} ...", end="\r", flush=True, file=sys.stderr)
        torch._dynamo.reset()
        kernels, rep = {}, None
        start = time.perf_counter()
        for strategy in strategies:
            inst = W.make(name, size)
            grad = contextlib.nullcontext() if inst.workload.mode == "train" else torch.no_grad()
            with grad:
                r = fusionstitch.explain(inst.fn, *inst.args, strategy=strategy)
            kernels[strategy] = r.num_kernels
            rep = r
        compile_s = time.perf_counter() - start
        eager, ours = W.make(name, size), W.make(name, size)
        ref = W.step(eager)
        got = W.step(ours, torch.compile(ours.fn, backend="fusionstitch"))
        err = _max_rel_err(got, ref)
        failures += err > 1e-4
        print("\r\033[K", end="", flush=True, file=sys.stderr)  # clear the progress line
        print(f"{name:26s} {eager.workload.mode:9s} {rep.num_ops:6d} "
              + " ".join(f"{kernels[s]:9d}" for s in strategies)
              + f" {rep.num_library_calls:8d} {rep.bytes_moved / 1e6:9.2f} {err:11.1e}"
              f" {compile_s:9.2f}")
    print("\nops: IR ops after canonicalisation (forward + backward); k:STRATEGY: generated "
          "kernels per step; libcalls: GEMMs/convolutions run by torch.")
    if failures:
        print(f"{failures} workload(s) differ from eager by more than 1e-4", file=sys.stderr)
    return 1 if failures else 0


def _explain_command(args) -> int:
    """`fusionstitch explain TARGET --out DIR`: plan, picture and report one target."""
    import torch

    import fusionstitch
    from fusionstitch.report.factory import TargetError, load_target
    from fusionstitch.report.html import write_report_dir
    try:
        fn, fargs, mode = load_target(args.target_spec)
    except TargetError as e:
        print(f"fusionstitch explain: {e}", file=sys.stderr)
        return 2
    torch._dynamo.reset()
    grad = torch.no_grad() if mode == "inference" else contextlib.nullcontext()
    with grad:
        rep = fusionstitch.explain(fn, *fargs, strategy=args.strategy, target=args.target)
    for path in write_report_dir(rep, args.out, title=f"fusionstitch explain {args.target_spec}"):
        print(path)
    return 0


# --- fusionstitch bench: options here, the benchmark itself in bench/run.py --------------
def _bench_command(args) -> int:
    """`fusionstitch bench`: time zoo workloads under eager, Inductor and fusionstitch."""
    _bench_module()  # puts the repository root (where bench/ lives) on sys.path
    from bench import run
    argv = []
    for opt in ("workloads", "size", "target", "against", "repeat", "min_time", "out"):
        value = getattr(args, opt)
        if value is not None:  # unset options take bench/run.py's defaults
            argv += ["--" + opt.replace("_", "-"), str(value)]
    return run.main(argv, prog="fusionstitch bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fusionstitch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="compile a few zoo workloads and print what was fused")
    p.add_argument("--workloads", default=",".join(DEMO_WORKLOADS),
                   help="comma-separated zoo workload names (default: %(default)s)")
    p.add_argument("--size", default="full", choices=("small", "full"))
    p.add_argument("--strategies", default="none,xla,stitch")
    p = sub.add_parser("explain", help="plan one target; write plan.txt, SVGs, report.html")
    p.add_argument("target_spec", metavar="TARGET",
                   help="zoo workload (NAME, NAME:small, NAME:full) or path/to/file.py:factory")
    p.add_argument("--out", required=True, help="output folder (created when missing)")
    p.add_argument("--strategy", default="stitch", choices=("none", "xla", "stitch"))
    p.add_argument("--target", default="auto", choices=("auto", "cuda", "cpu", "interpret"))
    p = sub.add_parser("bench", help="time zoo workloads: eager, Inductor, fusionstitch")
    p.add_argument("--workloads", help="comma-separated zoo workload names")
    p.add_argument("--size", choices=("small", "full"))
    p.add_argument("--target", choices=("auto", "cpu", "cuda"))
    p.add_argument("--against", help="baselines beside fusionstitch: eager,inductor")
    p.add_argument("--repeat", type=int, help="at least this many timed runs per variant")
    p.add_argument("--min-time", type=float, help="time until the runs add up to this (s)")
    p.add_argument("--out", help="results folder (default: bench/results)")
    args = parser.parse_args(argv)
    if args.command == "bench":
        return _bench_command(args)
    if args.command == "explain":
        return _explain_command(args)
    if args.command == "demo":
        names = [w for w in args.workloads.split(",") if w]
        return demo(names, args.size, [s for s in args.strategies.split(",") if s])
    return 2


if __name__ == "__main__":
    sys.exit(main())
