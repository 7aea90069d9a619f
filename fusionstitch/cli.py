"""The `fusionstitch` command line.

    fusionstitch demo [--workloads a,b] [--size small|full] [--against inductor] [--out DIR]
        plan, time and check a few zoo workloads; print the table; write an HTML report
    fusionstitch explain TARGET --out DIR     plan one target: text, SVG, HTML report
    fusionstitch bench [--workloads ...]      eager / Inductor / fusionstitch side by side
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

# Quick to trace and to compile with Inductor, so that the demo stays under 3 minutes cold
# (and 30 s warm: README, "Demo run time")
DEMO_WORKLOADS = ("mlp", "layernorm_softmax_gelu", "transformer_encoder", "capsule_routing",
                  "adam", "softmax_chain")
# Timed runs per variant add up to at least this many seconds (and 5 rounds): about 25
# rounds of a 10 ms step, enough for a median; `fusionstitch bench` times for longer.
DEMO_MIN_TIME = 0.2


def _bench_module():
    """bench/ lives beside the package in the repository; make it importable."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from bench import workloads
    return workloads


def demo(workload_names: list[str], size: str, against: list[str], out_dir: str) -> int:
    """The main job: plan, time, check and report a few zoo workloads side by side."""
    import torch

    import fusionstitch
    from fusionstitch.report.explain import plan_report, sink_report
    from fusionstitch.report.html import write_report_dir
    _bench_module()
    from bench.plan_table import capture
    from bench.run import bench_workload, resolve_target
    target = resolve_target("auto")
    print(f"fusionstitch {fusionstitch.__version__} demo: torch {torch.__version__}, "
          f"size={size}, target={target}, {torch.get_num_threads()} threads", flush=True)
    rows, links = [], []
    for i, name in enumerate(workload_names, 1):
        index = f"{i}/{len(workload_names)}"
        # The report shows the graphs and plans of the timed fusionstitch run (its backend's
        # sink), so tracing happens once. Inductor and fusionstitch use their persistent
        # caches: the demo compares step times, and a second demo is warm for both (it
        # does not time a second, warm-start compile either; `fusionstitch bench` does).
        # One warm-up round is enough: every variant has run its first (compiling) step.
        sink: list = []
        timed = bench_workload(name, size, target, ["eager", *against, "fusionstitch"],
                               repeat=5, min_time=DEMO_MIN_TIME, warmup=1, index=index,
                               fresh_caches=False, sink=sink, measure_warm_start=False)
        print(f"[{index}] {name}: planning none / xla, writing the report", file=sys.stderr,
              flush=True)
        stitch = sink_report(sink, "stitch", target)
        if not any(g.plan is not None for g in stitch.graphs):
            stitch = plan_report(capture(name, size), "stitch", target)  # the run failed
        graphs = [g.plan.graph for g in stitch.graphs if g.plan is not None]
        reports = {s: plan_report(graphs, s, target) for s in ("none", "xla")}
        reports["stitch"] = stitch
        folder = os.path.join(out_dir, name)
        write_report_dir(stitch, folder, title=f"fusionstitch demo: {name} ({size})")
        links.append((name, f"{name}/report.html"))
        rows.append((name, reports, timed["variants"]))
    _print_demo_table(rows, against)
    index_path = os.path.join(out_dir, "index.html")
    setting = (f"fusionstitch {fusionstitch.__version__}, torch {torch.__version__}, "
               f"size={size}, target={target}, {torch.get_num_threads()} threads")
    with open(index_path, "w", encoding="utf-8") as f:
        f.write(_demo_index_html(rows, against, dict(links), setting))
    print(f"\nHTML report: {os.path.abspath(index_path)}")
    bad = [n for n, _, v in rows if not _matches(v.get("fusionstitch", {}), v.get("eager", {}))]
    if bad:
        print(f"differs from eager: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


def _matches(entry: dict, eager: dict) -> bool:
    """Within 1e-4 of eager, or no further from float64 than eager itself is."""
    from bench.run import matches_eager
    return "error" not in entry and matches_eager(entry, eager)


def _demo_index_html(rows, against, links: dict[str, str], setting: str) -> str:
    """The demo's index page: the printed table, each workload linked to its report."""
    from html import escape

    from fusionstitch.report.html import html_page

    def ms(entry):
        return f"{entry['median_s'] * 1e3:.2f}" if "median_s" in entry else "—"
    ind = "inductor" in against
    sub = (["none", "xla", "stitch"] + ["Inductor"] * ind + ["xla", "stitch", "eager"]
           + ["Inductor"] * ind + ["fusionstitch"])
    out = ['<div class="scroll"><table class="summary"><thead><tr>'
           '<th rowspan="2">workload</th><th rowspan="2">IR ops</th>'
           f'<th colspan="{3 + ind}">kernels per step</th><th colspan="2">modelled MB</th>'
           f'<th colspan="{2 + ind}">median step ms</th><th rowspan="2">max rel err<br>'
           'vs eager</th></tr><tr>' + "".join(f"<th>{h}</th>" for h in sub)
           + "</tr></thead><tbody>"]
    for name, reports, v in rows:
        fs, err = v.get("fusionstitch", {}), v.get("fusionstitch", {}).get("max_rel_err")
        cells = [reports["none"].num_ops, reports["none"].num_kernels,
                 reports["xla"].num_kernels, reports["stitch"].num_kernels]
        cells += [v.get("inductor", {}).get("kernels", "—")] * ind
        cells += [f"{reports['xla'].bytes_moved / 1e6:.2f}",
                  f"{reports['stitch'].bytes_moved / 1e6:.2f}", ms(v.get("eager", {}))]
        cells += [ms(v.get("inductor", {}))] * ind
        cells += [ms(fs), "—" if err is None else f"{err:.1e}"]
        out.append(f'<tr><td><a href="{escape(links[name])}">{escape(name)}</a></td>'
                   + "".join(f'<td class="num">{escape(str(c))}</td>' for c in cells)
                   + "</tr>")
    out.append("</tbody></table></div>")
    return html_page("fusionstitch demo", [
        "<h1>fusionstitch demo</h1>", f'<p class="lede">{escape(setting)}</p>', *out,
        f'<p class="note">{escape(TABLE_NOTE)} Each workload links to its report: the '
        "fused graph as a picture, the groups with their modelled cost, the generated "
        "source of every kernel and the reason for every fusion boundary.</p>"])


TABLE_NOTE = ("ops: IR ops (forward + backward); kernels: per step, planned by none / xla / "
              "stitch (Inductor: the kernels it generated); MB: modelled traffic; ms: median "
              "step time. fusionstitch runs generated kernels (C++ on cpu, Triton on GPUs); "
              "GEMMs and convolutions are library calls.")


def _print_demo_table(rows, against) -> None:
    head = (f"{'workload':24s} {'ops':>5s} {'k:none':>7s} {'k:xla':>6s} {'k:stitch':>8s}"
            + ("  k:inductor" if "inductor" in against else "")
            + f" {'MB xla':>8s} {'MB stitch':>9s} {'eager ms':>9s}"
            + (f" {'inductor ms':>11s}" if "inductor" in against else "")
            + f" {'fs ms':>8s} {'max err':>8s}")
    print(head)
    print("-" * len(head))

    def ms(entry):
        return f"{entry['median_s'] * 1e3:.2f}" if "median_s" in entry else "-"
    for name, reports, v in rows:
        fs, ind = v.get("fusionstitch", {}), v.get("inductor", {})
        line = (f"{name:24s} {reports['none'].num_ops:5d} {reports['none'].num_kernels:7d} "
                f"{reports['xla'].num_kernels:6d} {reports['stitch'].num_kernels:8d}")
        if "inductor" in against:
            line += f"  {ind.get('kernels', '-')!s:>10s}"
        line += (f" {reports['xla'].bytes_moved / 1e6:8.2f} "
                 f"{reports['stitch'].bytes_moved / 1e6:9.2f} {ms(v.get('eager', {})):>9s}")
        if "inductor" in against:
            line += f" {ms(ind):>11s}"
        err = fs.get("max_rel_err")
        line += f" {ms(fs):>8s} {'-' if err is None else format(err, '.1e'):>8s}"
        print(line)
    print("\nops: IR ops (forward + backward); k:X: kernels per step planned by X (Inductor: "
          "kernels it generated); MB: modelled traffic; ms: median step time. fusionstitch "
          "runs generated kernels (C++ on cpu, Triton on GPUs); GEMMs and convolutions "
          "are library calls.")


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
    """`fusionstitch bench`: time zoo workloads or models under eager, Inductor and
    fusionstitch."""
    _bench_module()  # puts the repository root (where bench/ lives) on sys.path
    from bench import run
    argv = []
    for opt in ("suite", "workloads", "size", "target", "against", "repeat", "min_time",
                "dtype", "cuda_graphs", "out"):
        value = getattr(args, opt)
        if value is not None:  # unset options take bench/run.py's defaults
            argv += ["--" + opt.replace("_", "-"), str(value)]
    if not args.warm_start:
        argv.append("--no-warm-start")
    return run.main(argv, prog="fusionstitch bench")


def parser() -> argparse.ArgumentParser:
    """The command line's parser; its target choices come from the target registry."""
    from fusionstitch import config
    from fusionstitch.targets import TARGETS
    top = argparse.ArgumentParser(prog="fusionstitch", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="compile a few zoo workloads and print what was fused")
    p.add_argument("--workloads", default=",".join(DEMO_WORKLOADS),
                   help="comma-separated zoo workload names (default: %(default)s)")
    p.add_argument("--size", default="full", choices=("small", "full"))
    p.add_argument("--against", default="inductor",
                   help="baselines timed beside eager and fusionstitch (default: inductor; "
                        "'' for none)")
    p.add_argument("--out", default="fusionstitch_demo", help="HTML report folder")
    p = sub.add_parser("explain", help="plan one target; write plan.txt, SVGs, report.html")
    p.add_argument("target_spec", metavar="TARGET",
                   help="zoo workload (NAME, NAME:small, NAME:full) or path/to/file.py:factory")
    p.add_argument("--out", required=True, help="output folder (created when missing)")
    p.add_argument("--strategy", default="stitch", choices=config.STRATEGIES)
    p.add_argument("--target", default=config.AUTO, choices=config.target_names())
    p = sub.add_parser("bench", help="time zoo workloads or real models: eager, Inductor, "
                                     "fusionstitch")
    p.add_argument("--suite", choices=("zoo", "models"),
                   help="zoo workloads (the default) or the transformers models")
    p.add_argument("--workloads", help="comma-separated workload names (default: the suite's)")
    p.add_argument("--size", choices=("small", "full"))
    # timed targets: those whose kernels' times mean something (not the interpreter)
    p.add_argument("--target", choices=(config.AUTO, *(n for n, t in TARGETS.items()
                                                       if t.selectable and t.tunable)))
    p.add_argument("--against", help="baselines beside fusionstitch: eager,inductor")
    p.add_argument("--repeat", type=int, help="at least this many timed runs per variant")
    p.add_argument("--min-time", type=float, help="time until the runs add up to this (s)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"))
    p.add_argument("--cuda-graphs", choices=("auto", "on", "off"))
    p.add_argument("--no-warm-start", dest="warm_start", action="store_false",
                   help="skip timing fusionstitch's warm starts")
    p.add_argument("--out", help="results folder (default: bench/results)")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "bench":
        return _bench_command(args)
    if args.command == "explain":
        return _explain_command(args)
    if args.command == "demo":
        names = [w for w in args.workloads.split(",") if w]
        return demo(names, args.size, [a for a in args.against.split(",") if a], args.out)
    return 2


if __name__ == "__main__":
    sys.exit(main())
