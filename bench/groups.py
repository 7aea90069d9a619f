"""Per-group A/B: every fusion group of a program, timed three ways, worst first.

    python -m bench.groups [--source zoo,models,corpus] [--workloads a,b] [--size small|full]
                           [--target cpu|cuda|interpret]
                           [--corpus-sizes 16k,4M] [--classes chain,sim] [--threads N]
                           [--repeat N] [--min-time S] [--top K] [--out DIR] [--no-inductor]

For every kernel group fusionstitch plans on the target (``--target``: ``cpu``, the
default; ``cuda`` on a GPU, every run bracketed by a device synchronisation; ``interpret``
runs the Triton kernels in Triton's interpreter, for checking the tool on a CPU only:
its times say nothing of a GPU) (bench/group_capture.py), in one process, interleaved (one
run of each per round; medians):

* ``fusionstitch``: our generated kernel, launched as a Program launches it (outputs
  allocated, syms bound: the per-kernel cost of the runtime is in the number);
* ``torch``: the same aten ops one by one, unfused (the group's FX graph run eagerly);
* ``inductor``: the same FX graph compiled by ``torch._inductor.compile`` alone (its
  compiled callable, without Dynamo's guards).

The inputs are those the group received in a real call of the program (same values,
sizes, strides and offsets). Each group's result is checked against the unfused run
(``max_rel_err``). The report lists the groups where we lose to Inductor (``ratio`` =
our median / Inductor's, above 1 is slower), worst first, with the group's IR, its
schedule, our C++ and Inductor's generated code; and a summary per group class (geomean
and worst ratio). Sources of programs:

* ``zoo``: bench/workloads.py (``--workloads``, ``--size``);
* ``models``: bench/models.py, the transformers suite, where present;
* ``corpus``: bench/corpus.py, generated programs (``--corpus-sizes``, ``--classes``).

Writes ``groups_<sources>_<date>.json``, ``.txt`` and ``.html`` into ``--out``
(default bench/results/), with the machine, versions, date and command. On a shared
machine compare ratios within one run only.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
import traceback
from unittest import mock

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.group_capture import GroupCase, capture  # noqa: E402
from bench.timing import time_interleaved, versions  # noqa: E402

VARIANTS = ("fusionstitch", "torch", "inductor")
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DEFAULT_ZOO = ("mlp", "resnet_bottleneck_train", "transformer_encoder", "capsule_routing",
               "cartpole", "adam", "layernorm_softmax_gelu", "softmax_chain", "logreg",
               "word2vec", "vae", "gru_residual", "resnet_bottleneck_infer")
# a group is "losing" when our median is this much above Inductor's (timing noise on a
# shared 2-core machine is ~5-10% between interleaved medians)
LOSS = 1.10


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def compare(got, ref) -> tuple[float, float]:
    """(largest |got - ref| / max |ref| over the outputs, fraction of elements further from
    ref than 1e-4 of that scale): a kernel that selects on computed values (`where(a > b)`)
    may flip a few elements where a and b differ by an ulp, as eager itself would against
    float64; a wrong kernel is off nearly everywhere."""
    worst, bad, total = 0.0, 0, 0
    for g, r in zip(got, ref):
        if g.shape != r.shape:
            return math.inf, 1.0
        if not r.numel():
            continue
        g, r = g.double(), r.double()
        fin = r.isfinite()
        same_inf = (g == r) | (g.isnan() & r.isnan())
        scale = r.abs()[fin].max().clamp_min(1e-12) if fin.any() else torch.tensor(1.0)
        off = torch.where(fin, (g - r).abs() > 1e-4 * scale, ~same_inf)
        bad += int(off.sum())
        total += r.numel()
        if fin.any():
            worst = max(worst, float(((g - r).abs()[fin].max() / scale)))
        if not bool((g.isfinite() == fin).all()):
            worst = math.inf
    return worst, bad / max(total, 1)


# --- programs ---------------------------------------------------------------------------
def zoo_programs(module: str, names, size: str, device: str = "cpu"):
    """(source, cls, run-maker) per workload of bench.workloads / bench.models."""
    import importlib
    mod = importlib.import_module(module)
    tag = module.rsplit(".", 1)[-1].replace("workloads", "zoo")
    for name in names:
        def make(name=name):
            from bench.run import lean_step
            inst = mod.make(name, size, device=device)
            return inst.fn, lambda fn: lean_step(inst, fn)
        yield f"{tag}:{name}", None, make


def corpus_programs(sizes, classes, seed: int, device: str = "cpu"):
    from bench.corpus import programs
    for p in programs(sizes, seed, classes):
        def make(p=p):
            fn, args = p.build()
            args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]

            def runner(compiled):
                def run():
                    with torch.no_grad():
                        compiled(*args)
                return run
            return fn, runner
        yield f"corpus:{p.name}", p.cls, make


# --- one group --------------------------------------------------------------------------
def inductor_compile(case: GroupCase):
    """(callable, generated code, compile seconds) of Inductor on the group's FX graph."""
    from torch._inductor.graph import GraphLowering
    codes: list[str] = []
    start = time.perf_counter()
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        fn = torch._inductor.compile(case.gm, list(case.inputs))
    return fn, "\n".join(codes), time.perf_counter() - start


def ab_case(case: GroupCase, repeat: int, min_time: float, inductor: bool,
            device=None) -> dict:
    """Time one group three ways; fills and returns `case.results`."""
    res = case.results
    inputs = list(case.inputs)
    with torch.no_grad():
        ref = [t.clone() for t in case.gm(*inputs)]       # before ours writes in place
        ours = case.run_ours()
        ours()
        res["max_rel_err"], res["mismatch_frac"] = compare(case.our_outputs(), ref)
        fns = {"fusionstitch": ours, "torch": lambda: case.gm(*inputs)}
        if inductor:
            try:
                ind, code, secs = inductor_compile(case)
                res["inductor_code"], res["inductor_compile_s"] = code, secs
                fns["inductor"] = lambda: ind(*inputs)
            except Exception as e:  # noqa: BLE001 - reported, the others still timed
                res["inductor_error"] = f"{type(e).__name__}: {e}"
        t = time_interleaved(fns, warmup=2, repeat=repeat, min_time=min_time, device=device)
    for k, v in t.items():
        res[f"{k}_s"] = v["median_s"]
    if "inductor_s" in res:
        res["ratio"] = res["fusionstitch_s"] / res["inductor_s"]
    res["vs_torch"] = res["fusionstitch_s"] / res["torch_s"]
    return res


def run_program(source: str, cls, make, args, log) -> list[GroupCase]:
    """Compile one program with fusionstitch (`args.target`), capture its groups, A/B
    each."""
    import fusionstitch
    torch._dynamo.reset()
    fn, runner = make()
    sink: list = []
    compiled = torch.compile(fn, backend=fusionstitch.backend(target=args.target,
                                                              _sink=sink))
    step = runner(compiled)
    step()
    cases = capture(step, sink, source, cls, target=args.target)
    device = "cuda" if args.target == "cuda" else None
    for i, case in enumerate(cases):
        try:
            ab_case(case, args.repeat, args.min_time, not args.no_inductor, device)
        except Exception as e:  # noqa: BLE001 - one broken group must not stop the run
            case.results["error"] = f"{type(e).__name__}: {e}"
            log(traceback.format_exc())
        r = case.results
        log(f"  {source} {case.graph} #{case.group_id} [{case.cls}] x{case.count}: "
            + "  ".join(f"{v} {r[v + '_s'] * 1e3:.3f} ms" for v in VARIANTS if v + "_s" in r)
            + (f"  ratio {r['ratio']:.2f}" if "ratio" in r else "")
            + (f"  ERROR {r.get('error') or r.get('inductor_error')}"
               if "error" in r or "inductor_error" in r else ""))
    return cases


# --- the report -------------------------------------------------------------------------
def row(case: GroupCase) -> dict:
    r = case.results
    out = {"source": case.source, "graph": case.graph, "group": case.group_id,
           "cls": case.cls, "ops": case.n_ops, "numel": case.numel, "count": case.count,
           "schedule": case.schedule}
    for k in ("fusionstitch_s", "torch_s", "inductor_s", "ratio", "vs_torch", "max_rel_err",
              "mismatch_frac",
              "inductor_compile_s", "error", "inductor_error"):
        if k in r:
            out[k] = r[k]
    return out


def class_summary(rows: list[dict]) -> list[dict]:
    """Per class: groups, geomean and worst ratio against Inductor, geomean against torch;
    worst geomean first."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["cls"], []).append(r)
    out = []
    for cls, rs in by.items():
        ratios = [r["ratio"] for r in rs if "ratio" in r]
        out.append({"cls": cls, "groups": len(rs), "geomean_ratio": geomean(ratios),
                    "worst_ratio": max(ratios) if ratios else float("nan"),
                    "geomean_vs_torch": geomean(r.get("vs_torch") for r in rs)})
    return sorted(out, key=lambda c: (math.isnan(c["geomean_ratio"]), -c["geomean_ratio"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.groups", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the module docstring (python -m pydoc bench.groups) for what is timed.")
    ap.add_argument("--source", default="corpus",
                    help="comma list of zoo, models, corpus (default: corpus)")
    ap.add_argument("--workloads", help="zoo / model workloads (comma list; default: a set "
                    "of zoo workloads, or every model)")
    ap.add_argument("--size", default="full", help="zoo / model size: small | full")
    ap.add_argument("--corpus-sizes", default=",".join(__import__(
        "bench.corpus", fromlist=["DEFAULT_SIZES"]).DEFAULT_SIZES),
        help="corpus sizes (1k,16k,256k,1M,4M,16M)")
    ap.add_argument("--classes", help="corpus classes to run (comma list of prefixes: "
                    "chain,sim,reduce,softmax,layernorm,bcast)")
    ap.add_argument("--seed", type=int, default=0, help="corpus seed")
    ap.add_argument("--target", default="cpu", choices=("cpu", "cuda", "interpret"),
                    help="fusionstitch's target (cuda: on a GPU; interpret: Triton's "
                         "interpreter, to check the tool without one)")
    ap.add_argument("--threads", type=int, help="torch (and OpenMP) threads; default: torch's")
    ap.add_argument("--repeat", type=int, default=7, help="timed rounds at least")
    ap.add_argument("--min-time", type=float, default=0.05,
                    help="seconds of timed runs per variant at least")
    ap.add_argument("--top", type=int, default=10, help="losing groups shown in detail")
    ap.add_argument("--out", default=DEFAULT_OUT, help="folder for the json/txt/html")
    ap.add_argument("--no-inductor", action="store_true", help="time ours and torch only")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sources = [s.strip() for s in args.source.split(",") if s.strip()]
    unknown = set(sources) - {"zoo", "models", "corpus"}
    if unknown:
        ap.error(f"unknown source(s) {sorted(unknown)}: use zoo, models, corpus")
    log = (lambda *_: None) if args.quiet else (lambda m: print(m, flush=True))
    device = "cuda" if args.target == "cuda" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        ap.error("--target cuda needs a GPU (torch.cuda.is_available() is False)")
    progs = []
    wl = [w for w in (args.workloads or "").split(",") if w]
    if "zoo" in sources:
        from bench import workloads
        names = [w for w in wl if w in workloads.WORKLOADS] if wl else list(DEFAULT_ZOO)
        progs += zoo_programs("bench.workloads", names, args.size, device)
    if "models" in sources:
        try:
            from bench import models
        except ImportError as e:
            ap.error(f"--source models needs bench/models.py ({e})")
        names = [w for w in wl if w in models.WORKLOADS] if wl else models.names()
        progs += zoo_programs("bench.models", names, args.size, device)
    if "corpus" in sources:
        progs += corpus_programs(args.corpus_sizes.split(","),
                                 args.classes.split(",") if args.classes else None,
                                 args.seed, device)
    cases: list[GroupCase] = []
    meta = {"command": "python -m bench.groups " + " ".join(map(shlex.quote, argv or
                                                                  sys.argv[1:])),
            **versions(), "torch_threads": torch.get_num_threads(), "target": args.target}
    from bench.group_report import write
    for source, cls, make in progs:
        log(f"{source}")
        try:
            cases += run_program(source, cls, make, args, log)
        except Exception as e:  # noqa: BLE001 - the others still run; said even if quiet
            print(f"bench.groups: {source} failed, its groups are not in the report: "
                  f"{type(e).__name__}: {e}", file=sys.stderr)
            log(traceback.format_exc())
            meta.setdefault("failed_programs", []).append(f"{source}: {type(e).__name__}: {e}")
        paths = write(cases, meta, args.out, "_".join(sources)
                      + ("" if args.target == "cpu" else f"_{args.target}"), args.top)
    if cases:
        summary = open(paths[1]).read()
        log("\n" + summary[:summary.find("\n## 1. ")])
        log(f"wrote {', '.join(paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
