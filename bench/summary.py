"""What a benchmark run reports: which variants it compares, whether each matches eager,
speed-ups, the summary over workloads, the markdown table and the picture.

Used by ``bench/run.py`` (which re-exports these names); pure functions of the rows a
run collected, so they can be checked on made-up rows.
"""
from __future__ import annotations

import math

VARIANTS = ("eager", "inductor", "inductor_cudagraphs", "fusionstitch", "fusionstitch_cudagraphs")
BASELINES = ("eager", "inductor", "inductor_cudagraphs")
# the CUDA-graph variants: Inductor's mode="reduce-overhead", fusionstitch's cuda_graphs=True
CUDA_GRAPH_VARIANTS = ("inductor_cudagraphs", "fusionstitch_cudagraphs")

# A variant "matches" eager when its first step is within this relative error of eager's
# in the same dtype (fp32: the tolerance the zoo's numerics tests use), or is no further
# from the float64 result than eager itself is, times SLACK (then the difference is
# rounding: in bf16 each side rounds its intermediates at other places).
MAX_REL_ERR = 1e-4
TOLERANCE = {"float32": (MAX_REL_ERR, 1.0), "bfloat16": (2e-2, 2.0)}   # (rel err, slack)


# bench/judge.py's rules per dtype (rtol norm-wise, slack against float64): what a run
# records as ``tensors_off`` where it has both references, eager's and float64's
JUDGE = {"float32": (1e-4, 3.0), "bfloat16": (2e-2, 3.0)}


def matches_eager(entry: dict, eager: dict, dtype: str = "float32") -> bool:
    """bench/judge.py's verdict where the run recorded one (``tensors_off``: 0), else
    the element-wise errors: within TOLERANCE of eager, or as close to float64."""
    if "tensors_off" in entry:
        return entry["tensors_off"] == 0
    tol, slack = TOLERANCE[dtype]
    err, mine, theirs = (entry.get("max_rel_err"), entry.get("max_rel_err_f64"),
                         eager.get("max_rel_err_f64"))
    return err is not None and (err <= tol or None not in (mine, theirs)
                                and mine <= max(theirs * slack, tol))


def speedups(med: dict) -> dict:
    """``{"<v>_vs_<base>": med[base] / med[v]}`` (above 1: ``v`` is faster) for each
    variant against eager, fusionstitch against Inductor like for like (with and without
    CUDA graphs), and the faster of each compiler's variants against the other's
    (``fusionstitch_best_vs_inductor_best``), where both have a median."""
    pairs = [(v, "eager") for v in VARIANTS[1:]] + [
        ("fusionstitch", "inductor"), ("fusionstitch_cudagraphs", "inductor_cudagraphs")]
    always = ("inductor_vs_eager", "fusionstitch_vs_eager", "fusionstitch_vs_inductor")
    out = {f"{v}_vs_{base}": med[base] / med[v] if med.get(v) and med.get(base) else None
           for v, base in pairs if f"{v}_vs_{base}" in always or v in med and base in med}
    if any(v in med for v in CUDA_GRAPH_VARIANTS):
        best = {c: min((m for v, m in med.items() if v.startswith(c) and m), default=None)
                for c in ("inductor", "fusionstitch")}
        out["fusionstitch_best_vs_inductor_best"] = (
            best["inductor"] / best["fusionstitch"] if None not in best.values() else None)
    return out


def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarise(rows: list[dict], dtype: str = "float32") -> dict:
    """Geomean speed-ups, the worst ratio against Inductor, fusionstitch's errors and
    mismatches, torch.profiler's kernel counts against Inductor's, failed variants."""
    out = {}
    keys = dict.fromkeys(k for r in rows for k in r["speedup"])
    for key in keys:
        vals = [r["speedup"][key] for r in rows if r["speedup"].get(key)]
        if vals:
            out[f"geomean_speedup_{key}"] = geomean(vals)
            if "_vs_inductor" in key:
                out[f"min_speedup_{key}"] = min(vals)
    fs_variants = [v for v in ("fusionstitch", "fusionstitch_cudagraphs")
                   if any(v in r["variants"] for r in rows)]
    fs = [r["variants"][v] for r in rows for v in fs_variants
          if "max_rel_err" in r["variants"].get(v, {})]
    out["fusionstitch_max_rel_err"] = max((e["max_rel_err"] for e in fs), default=None)
    out["fusionstitch_mismatches"] = [
        r["workload"] + ("" if v == "fusionstitch" else f"/{v}") for r in rows
        for v in fs_variants if v == "fusionstitch" or v in r["variants"]
        if not matches_eager(r["variants"].get(v, {}), r["variants"].get("eager", {}), dtype)]
    out["fusionstitch_matches_eager"] = bool(fs) and not out["fusionstitch_mismatches"]
    for fs_v, ind_v in (("fusionstitch", "inductor"),
                        ("fusionstitch_cudagraphs", "inductor_cudagraphs")):
        pairs = [(r["variants"][fs_v]["prof_kernels"], r["variants"][ind_v]["prof_kernels"])
                 for r in rows if "prof_kernels" in r["variants"].get(fs_v, {})
                 and r["variants"].get(ind_v, {}).get("prof_kernels")]
        if pairs:   # launched kernels, fusionstitch's over Inductor's: total and worst
            out[f"prof_kernels_{fs_v}_over_{ind_v}"] = (sum(a for a, _ in pairs)
                                                        / sum(b for _, b in pairs))
            out[f"prof_kernels_{fs_v}_over_{ind_v}_max"] = max(a / b for a, b in pairs)
    out["failed"] = [f"{r['workload']}/{v}" for r in rows for v, e in r["variants"].items()
                     if "error" in e]
    return out


def _fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


SHORT = {"eager": "eager", "inductor": "ind", "inductor_cudagraphs": "ind+cg",
         "fusionstitch": "fs", "fusionstitch_cudagraphs": "fs+cg"}


def table(rows: list[dict], variants) -> str:
    """A markdown table: medians (ms), compile times, speed-ups, kernel counts, errors;
    with CUDA graphs, profiler kernel counts or bandwidths in the rows, those too."""
    ind = "inductor" in variants
    cols = [(f"{v} ms", v, "median_s", ".3f") for v in variants] + [
        ("compile s ind", "inductor", "first_call_s", ".1f"),
        ("compile s fs", "fusionstitch", "first_call_s", ".1f"),
        ("warm start s fs", "fusionstitch", "warm_start_s", ".2f"),
        ("precompiled s fs", "fusionstitch", "warm_start_precompiled_s", ".2f"),
        ("fs/eager", "speedup", "fusionstitch_vs_eager", ".2f"),
        ("fs/ind", "speedup", "fusionstitch_vs_inductor", ".2f"),
        ("ind/eager", "speedup", "inductor_vs_eager", ".2f"),
        ("eager ops", "eager", "ops", "d"), ("ind kernels", "inductor", "kernels", "d"),
        ("fs kernels", "fusionstitch", "kernels", "d"),
        ("fs libcalls", "fusionstitch", "library_calls", "d"),
        ("fs fallbacks", "fusionstitch", "fallbacks", "d"),
        ("graph breaks", "fusionstitch", "graph_breaks", "d"),
        ("fs err", "fusionstitch", "max_rel_err", ".1e"),
        ("fs err f64", "fusionstitch", "max_rel_err_f64", ".1e"),
        ("eager err f64", "eager", "max_rel_err_f64", ".1e"),
        ("fs off", "fusionstitch", "tensors_off", "d"),
        ("ind off", "inductor", "tensors_off", "d")]
    cols = [c for c in cols if ind or "ind" not in c[0]]
    if "fusionstitch_cudagraphs" in variants and ind:
        cols[cols.index(("fs/ind", "speedup", "fusionstitch_vs_inductor", ".2f")) + 1:0] = [
            ("fs+cg/ind+cg", "speedup", "fusionstitch_cudagraphs_vs_inductor_cudagraphs", ".2f"),
            ("best fs/best ind", "speedup", "fusionstitch_best_vs_inductor_best", ".2f")]
    if any("prof_kernels" in e for r in rows for e in r["variants"].values()):
        cols += [(f"prof kernels {SHORT[v]}", v, "prof_kernels", "d") for v in variants]
    if any("achieved_gbs" in e for r in rows for e in r["variants"].values()):
        cols += [(f"GB/s {SHORT[v]}", v, "achieved_gbs", ".1f") for v in variants]
        cols += [(f"% copy {SHORT[v]}", v, "copy_fraction", ".0%") for v in variants
                 if v.startswith("fusionstitch")]
    lines = ["| workload | " + " | ".join(c[0] for c in cols) + " |",
             "|---" * (len(cols) + 1) + "|"]
    for r in rows:
        cells = []
        for _, where, key, spec in cols:
            d = r["speedup"] if where == "speedup" else r["variants"].get(where, {})
            x = d.get(key)
            x = x * 1e3 if key == "median_s" and x is not None else x
            cells.append("fail" if "error" in d else _fmt(x, spec))
        lines.append(f"| {r['workload']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    """The run as a markdown page: what ran where (device, versions, date, command), the
    summary, the table."""
    meta, s = result["meta"], result["summary"]
    v = meta["versions"]
    lines = [f"# fusionstitch bench: suite {meta.get('suite', 'zoo')}, target {meta['target']}, "
             f"size {meta['size']}, {meta['dtype']}", "",
             f"- device: {meta['device']}, {v.get('cpu_count')} cores, "
             f"{v.get('torch_threads')} torch threads" + (f", GPU {v['gpu']}" if v.get("gpu")
                                                          else ""),
             f"- versions: torch {v.get('torch')}, triton {v.get('triton')}, python "
             f"{v.get('python')}, fusionstitch {v.get('fusionstitch')}, {v.get('platform')}",
             f"- date: {meta['date']}" + ("" if meta.get("complete", True) else
                                         " (incomplete: stopped before the last workload)"),
             f"- command: `{meta['command']}`",
             f"- timing: {meta['timing']}; Inductor: {meta['inductor_cache']}", ""]
    lines += [f"- geomean speed-up {k.removeprefix('geomean_speedup_').replace('_', ' ')}: "
              f"{x:.2f}x" for k, x in s.items() if k.startswith("geomean_speedup_") and x]
    mism = s.get("fusionstitch_mismatches") or []
    lines += ["- fusionstitch matches eager (bench/judge.py): "
              + ("yes, every workload" if not mism else f"no: {', '.join(mism)}"),
              f"- failed variants: {', '.join(s['failed']) if s.get('failed') else 'none'}",
              "", "Columns: medians in ms; speed-ups are eager's median over the variant's "
              "(fs = fusionstitch, ind = Inductor); compile s: the first (cold) step; "
              "kernels per step; err: largest per-tensor max|x - ref| / max|ref| of the "
              "first step (noise on gradients that are zero in exact arithmetic); off: "
              "tensors breaking bench/judge.py's rules.", "",
              table(result["rows"], meta["variants"]), ""]
    return "\n".join(lines)


def plot(rows: list[dict], path: str, title: str) -> None:
    """Two panels: speed-up over eager per workload (bars per variant, log scale) and
    kernels per step (eager ops, Inductor kernels, fusionstitch kernels + library calls)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    names = [r["workload"] for r in rows]
    x = list(range(len(names)))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8.0, 1.1 * len(names) + 3), 8.5),
                                   constrained_layout=True)
    colours = {"eager": "#9e9e9e", "inductor": "#1f77b4", "inductor_cudagraphs": "#17becf",
               "fusionstitch": "#d62728", "fusionstitch_cudagraphs": "#ff7f0e",
               "fusionstitch libcalls": "#f4a6a6"}

    speed = [(v, [r["speedup"].get(f"{v}_vs_eager") for r in rows])
             for v in VARIANTS[1:] if any(v in r["variants"] for r in rows)]
    width = 0.8 / max(len(speed), 1)
    for k, (v, vals) in enumerate(speed):
        xs = [i - 0.4 + width * (k + 0.5) for i in x]
        # bars grow from the 1x line: up when faster than eager, down when slower
        ax1.bar(xs, [(s or 1) - 1 for s in vals], width, bottom=1, color=colours[v],
                label=f"{v} (geomean {_fmt(geomean(vals), '.2f')}×)")
        for xi, s in zip(xs, vals):
            ax1.annotate("fail" if s is None else f"{s:.2f}", (xi, s or 1), ha="center",
                         va="bottom" if (s or 1) >= 1 else "top", fontsize=7,
                         xytext=(0, 2 if (s or 1) >= 1 else -2), textcoords="offset points")
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_yscale("log", base=2)
    ax1.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}×"))
    ax1.margins(y=0.15)
    ax1.set_ylabel("speed-up over eager (×, log)\nabove 1 = faster")
    fig.suptitle(title, fontsize=10)

    def count(var, key):
        return [r["variants"].get(var, {}).get(key) for r in rows]

    profiled = any("prof_kernels" in e for r in rows for e in r["variants"].values())
    if profiled:   # on CUDA: torch.profiler's count of every variant's launches
        series = [(v, v, count(v, "prof_kernels")) for v in VARIANTS]
        libcalls = []
    else:
        series = [("eager", "eager ops", count("eager", "ops")),
                  ("inductor", "inductor kernels", count("inductor", "kernels")),
                  ("fusionstitch", "fusionstitch kernels", count("fusionstitch", "kernels"))]
        libcalls = [c or 0 for c in count("fusionstitch", "library_calls")]
    series = [s for s in series if any(c is not None for c in s[2])]
    width = 0.8 / max(len(series), 1)
    for k, (var, label, vals) in enumerate(series):
        xs = [i - 0.4 + width * (k + 0.5) for i in x]
        ax2.bar(xs, [c or 0 for c in vals], width, label=label, color=colours[var])
        if var == "fusionstitch" and libcalls:  # library calls on top of the kernels
            ax2.bar(xs, libcalls, width, bottom=[c or 0 for c in vals],
                    label="fusionstitch library calls", color=colours["fusionstitch libcalls"])
        for xi, c in zip(xs, vals):
            if c is not None:
                ax2.annotate(str(c), (xi, max(c, 1)), ha="center", va="bottom", fontsize=7,
                             xytext=(0, 2), textcoords="offset points")
    ax2.set_yscale("log")
    ax2.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax2.set_ylim(0.5, 3 * ax2.get_ylim()[1])  # a count of 1 still shows; room for labels
    ax2.set_ylabel("kernels per step (log)")
    ax2.set_title("device kernels launched per step, counted by torch.profiler (copies apart)"
                  if profiled else "eager: non-view aten ops; Inductor: generated kernels; "
                  "fusionstitch: kernels launched (+ library calls)", fontsize=9)
    for ax in (ax1, ax2):
        ax.set_xticks(x, names, rotation=25, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)
