"""Dynamic shapes: compiles, planning, kernels compiled and step time over many input sizes.

    python -m bench.dynamic [--models transformer,cnn] [--target cpu]
                            [--variants eager,inductor,fusionstitch,fusionstitch_per_shape]
                            [--batches 1-64] [--seqs 8,16,...,512] [--hws 8,12,16,24,32]
                            [--repeat N] [--min-time S] [--out DIR]

Two blocks, each a training step (forward and backward):

* ``transformer``: the zoo's post-LN encoder layer (``bench.workloads.EncoderLayer``,
  d_model 64, 4 heads, ffn 256) on [batch, seq, 64] inputs with a padding mask; swept
  over the batch (seq 32) and over the sequence (batch 4);
* ``cnn``: the zoo's ResNet bottleneck (``bench.workloads.Bottleneck``, 32 channels,
  BatchNorm in training mode) on [batch, 32, hw, hw]; swept over the batch (hw 16) and
  the image size (batch 4).

Variants, all compiled with ``dynamic=True`` (sizes symbolic from the first call):
eager (the reference), Inductor, fusionstitch (one symbolic program per graph,
frontend/dynamic.py) and ``fusionstitch_per_shape`` (``FUSIONSTITCH_DYNAMIC=0``: a
program per shape, what fusionstitch did before). Per sweep and variant: Dynamo graphs,
backend compiles (Inductor: FX graphs compiled; fusionstitch: programs built), planning
seconds (fusionstitch), plan-cache misses, kernels compiled (Inductor: generated
kernels), compile seconds (the first call at each size less that size's step time,
summed), and per size the median step time and the relative error against eager. Every
compiler starts from empty caches (a fresh folder each). Writes
``dynamic_<target>_<date>.json`` and ``.md`` into ``--out``.

``bench/results/dynamic_cpu_2026-11-26.md`` ran with ``OMP_NUM_THREADS=1`` (the command
is in the file; about 10 minutes on two shared cores, most of it Inductor's compiles):
on a machine shared with other jobs, two OpenMP threads on two cores stall whenever one
is descheduled, and step times then varied a hundredfold between neighbouring sizes.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import shlex
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.run import DEFAULT_OUT, max_rel_err  # noqa: E402
from bench.timing import environment, time_interleaved, versions  # noqa: E402

VARIANTS = ("eager", "inductor", "fusionstitch", "fusionstitch_per_shape")
D_MODEL, HEADS, FFN = 64, 4, 256
PLANES = 8   # bottleneck channels: 4 * PLANES in and out


def _ranges(text: str) -> list[int]:
    """'1-4,8,16' -> [1, 2, 3, 4, 8, 16]."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out += range(int(lo), int(hi) + 1)
        elif part:
            out.append(int(part))
    return out


# --- the blocks ---------------------------------------------------------------------
def transformer_model():
    import torch

    from bench.workloads import EncoderLayer
    torch.manual_seed(0)
    return EncoderLayer(D_MODEL, HEADS, FFN).train()


def transformer_inputs(batch: int, seq: int):
    import torch
    g = torch.Generator().manual_seed(batch * 1000 + seq)
    x = torch.randn(batch, seq, D_MODEL, generator=g)
    lengths = torch.randint(seq // 2 + 1, seq + 1, (batch,), generator=g)
    lengths[0] = seq
    pad = torch.arange(seq)[None, :] >= lengths[:, None]
    return x, pad


def cnn_model():
    import torch

    from bench.workloads import Bottleneck
    torch.manual_seed(0)
    return Bottleneck(PLANES).train()


def cnn_inputs(batch: int, hw: int):
    import torch
    g = torch.Generator().manual_seed(batch * 1000 + hw)
    return (torch.randn(batch, 4 * PLANES, hw, hw, generator=g),)


# model -> (build, inputs(a, b), sweeps: (name, the size swept, the other one fixed))
MODELS = {
    "transformer": (transformer_model, transformer_inputs,
                    (("batch", "batches", 32), ("seq", "seqs", 4))),
    "cnn": (cnn_model, cnn_inputs, (("batch", "batches", 16), ("hw", "hws", 4))),
}

# parameters whose gradient is zero in exact arithmetic, left out of the error: the key
# projection's bias adds q.b to a whole row of scores, which the softmax ignores, so its
# gradient is rounding noise (relative error ~1 against eager for every compiler)
ZERO_GRADIENTS = {"transformer": ("k.bias",), "cnn": ()}


def _weights(shape):
    """Fixed weights of the loss (sum(out * w)): a plain sum of a layer-normalised output
    has gradients of rounding noise only, whose relative error means nothing."""
    import torch
    return torch.randn(shape, generator=torch.Generator().manual_seed(len(shape) + sum(shape)))


def _step(model, fn, args, w, skip=()):
    """One training step: forward, loss = sum(out * w), backward. Returns the output and
    the parameters' gradients but those named in `skip` (for the comparison with eager)."""
    for p in model.parameters():
        p.grad = None
    out = fn(*args)
    (out * w).sum().backward()
    return [out.detach()] + [p.grad.detach() for n, p in model.named_parameters()
                             if n not in skip]


# --- counting -----------------------------------------------------------------------
def _counts(variant: str, sink: list) -> dict:
    import torch._inductor.metrics as inductor_metrics
    from torch._dynamo.utils import counters

    import fusionstitch
    out = {"dynamo_graphs": counters["stats"]["unique_graphs"]}
    if variant == "inductor":
        out["compiles"] = (counters["inductor"]["fxgraph_cache_miss"] +
                           counters["inductor"]["fxgraph_cache_hit"])
        out["kernels_compiled"] = inductor_metrics.generated_kernel_count
    elif variant.startswith("fusionstitch"):
        s = fusionstitch.stats()
        out["compiles"] = s["specialisations"]
        out["symbolic_programs"] = s["symbolic_programs"]
        out["kernels_compiled"] = s["kernels_compiled"]
        out["plan_cache_misses"] = s["plan_cache_misses"]
        specs = {id(p): p for cg in sink for p in cg.specialisations.values()
                 if hasattr(p, "planning_seconds")}
        out["planning_s"] = sum(p.planning_seconds for p in specs.values())
    return out


def _delta(after: dict, before: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items()}


class _Variant:
    """One compiled variant of a block: its own copy of the model, backend and caches."""

    def __init__(self, name: str, base, target: str, cache: str):
        import torch

        import fusionstitch
        self.name, self.cache = name, cache
        self.model = copy.deepcopy(base)
        self.sink: list = []
        if name == "eager":
            self.fn = self.model
        elif name == "inductor":
            self.fn = torch.compile(self.model, dynamic=True)
        else:
            self.fn = torch.compile(self.model, dynamic=True, backend=fusionstitch.backend(
                target=target, _sink=self.sink))
        self.totals: dict = {}

    @contextlib.contextmanager
    def compiling(self):
        """Around a call that may compile: this variant's cache folder and knobs."""
        from fusionstitch.runtime.cache import clear_memory_caches
        if self.name == "inductor":
            with environment(TORCHINDUCTOR_CACHE_DIR=self.cache):
                yield
            return
        knobs = {"FUSIONSTITCH_CACHE_DIR": self.cache}
        if self.name == "fusionstitch_per_shape":
            knobs["FUSIONSTITCH_DYNAMIC"] = "0"
        with environment(**knobs):
            if self.name != "eager":
                clear_memory_caches()   # the other variant's kernels and plans are not ours
            yield


def sweep(model_name: str, axis: str, sizes: list[int], fixed: int, variants, target: str,
          repeat: int, min_time: float) -> dict:
    """One sweep of one block: every variant at every size."""
    import torch
    build, inputs, _ = MODELS[model_name]
    skip = ZERO_GRADIENTS[model_name]
    torch._dynamo.reset()
    base = build()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fusionstitch-dynamic-bench-") as root:
        vs = []
        for v in variants:
            os.makedirs(os.path.join(root, v))
            vs.append(_Variant(v, base, target, os.path.join(root, v)))
        for size in sizes:
            a, b = (size, fixed) if axis == "batch" else (fixed, size)
            args = inputs(a, b)
            w = _weights(base(*args).shape)
            row = {axis: size, "variants": {}}
            ref = None
            runs = {}
            for v in vs:
                before = _counts(v.name, v.sink)
                with v.compiling():
                    start = time.perf_counter()
                    out = _step(v.model, v.fn, args, w, skip)
                    first = time.perf_counter() - start
                work = _delta(_counts(v.name, v.sink), before)
                if v.name == "eager":
                    ref = out
                entry = {"first_call_s": first, **work}
                if ref is not None:
                    entry["max_rel_err"] = max_rel_err(out, ref)
                row["variants"][v.name] = entry
                runs[v.name] = (lambda v=v: _step(v.model, v.fn, args, w, skip))
            times = time_interleaved(runs, warmup=1, repeat=repeat, min_time=min_time)
            for v in vs:
                e = row["variants"][v.name]
                e["step_s"] = times[v.name]["median_s"]
                e["compile_s"] = max(0.0, e["first_call_s"] - e["step_s"])
                for k, x in e.items():
                    if k not in ("first_call_s", "step_s", "max_rel_err"):
                        v.totals[k] = v.totals.get(k, 0) + x
            rows.append(row)
            print(f"  {model_name} {axis}={size}: " + ", ".join(
                f"{n} {e['step_s'] * 1e3:.2f} ms" + (f" (+{e['compile_s']:.1f} s)"
                                                     if e["compile_s"] > 0.05 else "")
                for n, e in row["variants"].items()), flush=True)
    totals = {v.name: v.totals for v in vs}
    for name, t in totals.items():
        t["max_rel_err"] = max(r["variants"][name].get("max_rel_err", 0.0) for r in rows)
        t["step_s_geomean"] = math.exp(sum(math.log(r["variants"][name]["step_s"])
                                           for r in rows) / len(rows))
    return {"model": model_name, "axis": axis, "sizes": sizes,
            "fixed": {"transformer": {"batch": "seq", "seq": "batch"},
                      "cnn": {"batch": "hw", "hw": "batch"}}[model_name][axis] + f"={fixed}",
            "totals": totals, "rows": rows}


# --- the report ---------------------------------------------------------------------
_COLUMNS = (("dynamo_graphs", "Dynamo graphs", "{:d}"), ("compiles", "backend compiles", "{:d}"),
            ("symbolic_programs", "symbolic programs", "{:d}"),
            ("plan_cache_misses", "plan-cache misses", "{:d}"),
            ("planning_s", "planning s", "{:.2f}"),
            ("kernels_compiled", "kernels compiled", "{:d}"),
            ("compile_s", "compile s", "{:.1f}"), ("step_s_geomean", "step ms (geomean)", "ms"),
            ("max_rel_err", "max rel err", "{:.1e}"))


def markdown(result: dict) -> str:
    meta = result["meta"]
    lines = [f"# Dynamic shapes ({meta['target']}, {meta['versions']['date']})", "",
             f"`{meta['command']}`", "",
             f"torch {meta['versions']['torch']}, triton {meta['versions']['triton']}, "
             f"fusionstitch {meta['versions']['fusionstitch']}, {meta['versions']['cpu']} "
             f"({meta['versions']['torch_threads']} threads), GPU: {meta['versions']['gpu']}",
             ""]
    if meta.get("note"):
        lines += [meta["note"], ""]
    for s in result["sweeps"]:
        sizes = s["sizes"]
        lines += [f"## {s['model']}: {s['axis']} {sizes[0]}..{sizes[-1]} ({len(sizes)} sizes, "
                  f"{s['fixed']})", "",
                  "| variant | " + " | ".join(c[1] for c in _COLUMNS) + " |",
                  "|---" * (len(_COLUMNS) + 1) + "|"]
        for name, t in s["totals"].items():
            cells = []
            for key, _, fmt in _COLUMNS:
                if key not in t:
                    cells.append("")
                elif fmt == "ms":
                    cells.append(f"{t[key] * 1e3:.2f}")
                else:
                    cells.append(fmt.format(int(t[key]) if "d" in fmt else t[key]))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += ["", "Step time (ms) per size:", "",
                  f"| {s['axis']} | " + " | ".join(s["totals"]) + " |",
                  "|---" * (len(s["totals"]) + 1) + "|"]
        for r in s["rows"]:
            lines.append(f"| {r[s['axis']]} | " + " | ".join(
                f"{e['step_s'] * 1e3:.2f}" for e in r["variants"].values()) + " |")
        lines.append("")
    return "\n".join(lines)


def run(models, variants, target: str, batches, seqs, hws, repeat: int, min_time: float,
        command: str) -> dict:
    import torch
    # every variant keeps its Dynamo entries (sizes 0/1 and the symbolic graph each)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    if hasattr(torch._dynamo.config, "accumulated_cache_size_limit"):
        torch._dynamo.config.accumulated_cache_size_limit = 1024
    sizes = {"batches": batches, "seqs": seqs, "hws": hws}
    sweeps = []
    for m in models:
        for axis, which, fixed in MODELS[m][2]:
            if sizes[which]:
                print(f"{m}: {axis} sweep", flush=True)
                sweeps.append(sweep(m, axis, sizes[which], fixed, variants, target, repeat,
                                    min_time))
    return {"meta": {"target": target, "variants": list(variants), "repeat": repeat,
                     "min_time_s": min_time, "versions": versions(), "command": command,
                     "blocks": {"transformer": f"EncoderLayer(d_model={D_MODEL}, heads={HEADS}, "
                                               f"ffn={FFN}), training step",
                                "cnn": f"Bottleneck(planes={PLANES}), training step"},
                     "timing": "variants interleaved per size, medians"},
            "sweeps": sweeps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="transformer,cnn")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--target", default="cpu", choices=("cpu", "cuda", "interpret"))
    p.add_argument("--batches", default="1-64")
    p.add_argument("--seqs", default="8,12,16,24,32,48,64,96,128,192,256,384,512")
    p.add_argument("--hws", default="8,12,16,20,24,32")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.1)
    p.add_argument("--out", default=DEFAULT_OUT)
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    variants = [v for v in a.variants.split(",") if v]
    unknown = [m for m in models if m not in MODELS] + [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown model or variant: {', '.join(unknown)}")
    if "eager" not in variants:
        variants.insert(0, "eager")
    command = "python -m bench.dynamic " + " ".join(shlex.quote(x) for x in (
        argv if argv is not None else sys.argv[1:]))
    if os.environ.get("OMP_NUM_THREADS"):   # the threads of torch and of our C++ kernels
        command = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} {command}"
    result = run(models, variants, a.target, _ranges(a.batches), _ranges(a.seqs),
                 _ranges(a.hws), a.repeat, a.min_time, command)
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, f"dynamic_{a.target}_{result['meta']['versions']['date'][:10]}")
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(markdown(result))
    print(markdown(result))
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
