"""Timing benchmark: zoo workloads or real models under eager, Inductor and fusionstitch.

    python -m bench.run [--suite zoo|models] [--workloads a,b] [--size small|full]
                        [--target auto|cpu|cuda]
                        [--against eager,inductor] [--repeat N] [--out DIR]
                        [--dtype float32|bfloat16] [--cuda-graphs auto|on|off]
                        [--no-warm-start]
    fusionstitch bench ...        (the same options)

Variants: eager (always: the reference), the baselines of ``--against``, fusionstitch;
with CUDA graphs (``--cuda-graphs``; auto: on the cuda target) also
``inductor_cudagraphs`` (Inductor's ``mode="reduce-overhead"``) and
``fusionstitch_cudagraphs`` (``cuda_graphs=True``). Per workload, in one process, each
variant on a fresh ``bench.workloads.make`` instance (optimizer state and in-place
updates do not leak between variants):

* ``first_call_s``: the first step, cold (Dynamo, AOTAutograd, the backend's compile
  of forward and backward, one step); Inductor and fusionstitch compile into fresh
  cache folders (``fusionstitch demo`` lets them use their persistent caches instead);
* ``warm_start_s`` (fusionstitch): the first step of a new compile after the cold one,
  with the in-memory caches cleared: kernels come from the disk cache, as in a new
  process (less Python's imports; not measured by the demo);
* ``warm_start_precompiled_s`` (fusionstitch): the same with torch's caching precompile
  (``TORCH_CACHING_PRECOMPILE=1``): Dynamo's bytecode, guards and our inference graphs
  saved by one compile and loaded by the next, so nothing is traced
  (``warm_start_precompiled_loads``: graphs loaded; 0 for training graphs, traced again);
* the step time: median, p10, p90 over the timed runs, after warm-up;
* ``graphs`` and ``graph_breaks`` (compiled variants): the graphs Dynamo made of the
  first step and the breaks between them;
* kernels: fusionstitch's ``stats()`` delta over one step (kernels launched, library
  calls; ``fallbacks`` over the first step); Inductor's ``torch._inductor.metrics.generated_kernel_count`` over its
  compile; eager's non-view aten ops per step (about one kernel each);
* ``max_rel_err`` of the first step against eager's, ``max_rel_err_f64`` against eager
  in float64 (eager's own fp32 rounding can exceed 1e-4: BatchNorm backward, big batch);
  ``tensors_off``: how many of the step's tensors break bench/judge.py's rules (norm-wise
  against eager, a gradient zero in exact arithmetic against the step's largest; within
  3x eager's distance to float64), ``off`` the first of them: what "matches eager" means;
* on CUDA, ``prof_kernels`` / ``prof_memcpy``: torch.profiler's count of the kernels
  and copies one timed step launched (``bench/device_metrics.py``), an independent count;
* for a memory-bound workload (``Workload.memory_bound``), ``compulsory_bytes`` (inputs
  read and results written once) and per variant ``achieved_gbs`` and ``copy_fraction``
  of the device's copy bandwidth (``meta["copy_bandwidth_gbs"]``).

Speed-ups are ``eager median / variant median`` (above 1 is faster), and fusionstitch's
against Inductor's like for like (see :func:`speedups`). Writes
``bench[_models]_<target>_<size>[_bf16]_<date>.json``, a ``.md`` (versions, command,
summary, the table) and a ``.png`` beside it into ``--out``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import sys
import traceback

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.judge import judge_step  # noqa: E402
from bench.summary import (BASELINES, CUDA_GRAPH_VARIANTS, JUDGE, MAX_REL_ERR,  # noqa: E402,F401
                           SHORT, TOLERANCE, VARIANTS, geomean, markdown, matches_eager, plot,
                           speedups, summarise, table, _fmt)
from bench.timing import time_interleaved, versions  # noqa: E402

DTYPES = ("float32", "bfloat16")
# CPU, full size, 2 cores: about 3 minutes with Inductor (cartpole's compile alone ~40 s;
# lstm's ~90 s and birnn's are longer, hence left out).
DEFAULT_WORKLOADS = ("mlp", "resnet_bottleneck_train", "transformer_encoder", "capsule_routing",
                     "cartpole", "adam", "layernorm_softmax_gelu", "softmax_chain")
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# --- One step, counting, comparing ---------------------------------------------------
def lean_step(inst, fn):
    """A step function for timing: ``bench.workloads.step`` without its result clones
    (they would add the same copy time to every variant and hide differences)."""
    import torch

    from bench.workloads import loss_of
    if inst.workload.mode == "inference":
        def run():
            with torch.no_grad():
                fn(*inst.args)
        return run

    def run():
        for p in inst.grad_params:
            p.grad = None
        loss_of(inst.workload, fn(*inst.args)).backward()
    return run


def max_rel_err(got: list, ref: list) -> float:
    """Largest per-tensor ``max|got - ref| / max|ref|``; inf on a shape or NaN mismatch."""
    if len(got) != len(ref):
        return math.inf
    worst = 0.0
    for g, r in zip(got, ref):
        if g.shape != r.shape:
            return math.inf
        if not r.numel():
            continue
        g, r = g.detach().double().cpu(), r.detach().double().cpu()
        if bool(r.isfinite().all()):  # the usual case: no masks, no gathered copies
            if not bool(g.isfinite().all()):
                return math.inf
            diff, scale = (g - r).abs().max().item(), r.abs().max().item()
            worst = max(worst, diff / max(scale, 1e-12))
            continue
        same = (g == r) | (g.isnan() & r.isnan()) | (g.isfinite() & r.isfinite())
        if not bool(same.all()):
            return math.inf  # NaN or inf where the reference has none (or vice versa)
        finite = r.isfinite()
        if not finite.any():
            continue
        diff = (g[finite] - r[finite]).abs().max().item()
        worst = max(worst, diff / max(r[finite].abs().max().item(), 1e-12))
    return worst


def eager_ops(run) -> int:
    """Non-view aten ops dispatched by one call of ``run`` (eager: about one kernel each)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view:
                self.n += 1
            return func(*args, **(kwargs or {}))

    with _Count() as counter:
        run()
    return counter.n


def _device(target: str) -> str:
    return "cuda" if target == "cuda" else "cpu"


def resolve_target(target: str) -> str:
    import torch
    if target == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if target not in ("cpu", "cuda"):
        raise ValueError(f"target must be auto, cpu or cuda, not {target!r}")
    return target


def inductor_error() -> str | None:
    """None when Inductor compiles and runs a tiny function here (on CPU it needs a C++
    compiler), else why not. Compiles in a fresh cache folder, away from other processes."""
    import torch
    from torch._inductor.utils import fresh_cache
    try:
        torch._dynamo.reset()
        x = torch.randn(4)
        with fresh_cache():
            ok = torch.allclose(torch.compile(lambda t: t.sin() + 1)(x), x.sin() + 1)
        return None if ok else "wrong result"
    except Exception as e:  # noqa: BLE001 - any failure means "unavailable", with its reason
        return f"{type(e).__name__}: {e}".splitlines()[0][:300]


# --- The floor: a step whose graphs cost nothing ---------------------------------------
def _replay(graph, boxed: bool = False):
    """``graph``'s outputs of its first call, returned again at every later call;
    ``boxed``: called with one list (AOTAutograd's convention), else with the arguments."""
    first = []

    def replay(*args):
        if not first:
            first.append(graph(*(args[0] if boxed else args)))
        return first[0]
    replay._boxed_call = boxed
    return replay


def floor_backend(gm, example_inputs):
    """A torch.compile backend whose graphs cost (almost) nothing: each returns the
    outputs of its first call again, whatever its inputs (wrong values from the second
    step on: for timing only). A step compiled with it pays only what no backend can
    avoid: Dynamo's guards and frame, AOTAutograd's runtime and the autograd engine
    where the graph needs gradients (forward and backward graphs replayed alike), the
    step's own Python. ``step(floor) / step(backend)`` is the most any backend could
    gain; ``step(backend) - step(floor)`` is the time a backend's graphs cost."""
    import torch
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)
    if not needs_grad:
        return _replay(gm)
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=lambda g, _: _replay(g, boxed=True),
                        bw_compiler=lambda g, _: _replay(g, boxed=True))(gm, example_inputs)


# --- One variant of one workload -----------------------------------------------------
def _own_frame(fn):
    """A function calling ``fn`` whose code object is its own. Dynamo keeps its compiled
    entries on the code object of the frame it compiles, newest first, and tries each
    entry's guards in turn (the backend is compared after the guards pass): variants
    compiled from one step function in one process would each check the entries of the
    variants compiled after them at every call. Measured on qwen2_train (one thread):
    fusionstitch's step 0.676 -> 0.699 ms once Inductor's entry came first. With a frame
    of its own per variant, each call checks its own entry alone, as a user's single
    `torch.compile` does. (Frames after a graph break inside ``fn`` are still shared.)"""
    import types

    def step_frame(*args, **kwargs):
        return fn(*args, **kwargs)
    code = step_frame.__code__.replace()     # a new code object: no entries of others
    return types.FunctionType(code, step_frame.__globals__, step_frame.__name__,
                              step_frame.__defaults__, step_frame.__closure__)


def _compile(variant: str, fn, target: str, sink: list | None = None):
    import torch

    import fusionstitch
    if variant == "eager":
        return fn
    fn = _own_frame(fn)
    if variant == "inductor":
        return torch.compile(fn)
    if variant == "inductor_cudagraphs":
        return torch.compile(fn, mode="reduce-overhead")
    if variant == "floor":
        return torch.compile(fn, backend=floor_backend)
    if variant in ("dynamo_eager", "aot_eager"):   # torch's debug backends: the graphs
        # run eagerly, after Dynamo (and AOTAutograd): a floor where replaying fails
        return torch.compile(fn, backend=variant.replace("dynamo_", ""))
    return torch.compile(fn, backend=fusionstitch.backend(
        strategy="stitch", target=target, cuda_graphs=variant == "fusionstitch_cudagraphs",
        _sink=sink))


def _torch_dtype(dtype: str):
    import torch
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return getattr(torch, dtype)


def prepare_variant(name: str, size: str, variant: str, target: str,
                    references: dict, sink: list | None = None,
                    dtype: str = "float32") -> tuple[dict, list, object]:
    """Build a fresh instance, compile, run the first (cold) step and count kernels.

    Returns (result entry, first-step outputs, a step function for timing).
    ``references`` maps ``"eager"`` (fp32 eager's first step, absent while eager itself
    runs) and ``"float64"`` (eager in float64) to outputs to compare against. ``sink``
    collects the graphs fusionstitch compiles (``explain``'s capture, for reports).
    ``dtype``: the workload's floating dtype (``"float32"`` or ``"bfloat16"``)."""
    import time

    import torch
    import torch._inductor.metrics as inductor_metrics
    from torch._dynamo.utils import counters as dynamo_counters

    import fusionstitch
    from bench import workloads as W
    inductor_metrics.reset()
    fusionstitch.reset_stats()
    inst = W.make(name, size, device=_device(target), dtype=_torch_dtype(dtype))
    fn = _compile(variant, inst.fn, target, sink)
    dynamo_counters.clear()
    start = time.perf_counter()
    outs = W.step(inst, fn)  # the first step: compiles forward and backward
    if target == "cuda":
        torch.cuda.synchronize()
    entry = {"first_call_s": time.perf_counter() - start}
    if variant != "eager":   # what Dynamo made of it: graphs, and the breaks between them
        entry["graphs"] = dynamo_counters["stats"]["unique_graphs"]
        entry["graph_breaks"] = sum(dynamo_counters["graph_break"].values())
    run = lean_step(inst, fn)
    if variant == "inductor":   # (reduce-overhead finds them in the FX graph cache)
        entry["kernels"] = inductor_metrics.generated_kernel_count
    elif variant.startswith("fusionstitch"):
        entry["fallbacks"] = fusionstitch.stats()["fallbacks"]
        run()  # the counts of a step that compiles nothing
        fusionstitch.reset_stats()
        run()
        s = fusionstitch.stats()
        entry["kernels"], entry["library_calls"] = s["kernels_launched"], s["library_calls"]
    elif variant == "eager":
        entry["ops"] = eager_ops(run)
    for ref, key in (("eager", "max_rel_err"), ("float64", "max_rel_err_f64")):
        if ref in references:
            entry[key] = max_rel_err(outs, references[ref])
    if "eager" in references and "float64" in references:
        rtol, slack = JUDGE[dtype]
        off = judge_step(outs, references["eager"], references["float64"],
                         len(inst.grad_params), len(inst.mutated), rtol, slack)
        entry["tensors_off"] = len(off)
        if off:
            entry["off"] = off[:5]
    return entry, outs, run


@contextlib.contextmanager
def _fresh_fusionstitch_cache():
    """FUSIONSTITCH_CACHE_DIR set to a new empty folder for the block (then restored), and
    this process's in-memory caches emptied: a cold compile finds nothing lowered,
    planned or loaded by earlier compiles (whose entries the warm start would not see)."""
    import tempfile

    from fusionstitch.runtime.cache import clear_memory_caches
    old = os.environ.get("FUSIONSTITCH_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="fusionstitch-bench-") as d:
        os.environ["FUSIONSTITCH_CACHE_DIR"] = d
        clear_memory_caches()
        try:
            yield d
        finally:
            if old is None:
                os.environ.pop("FUSIONSTITCH_CACHE_DIR", None)
            else:
                os.environ["FUSIONSTITCH_CACHE_DIR"] = old


def warm_start(name: str, size: str, target: str, dtype: str = "float32") -> tuple[float, dict]:
    """Seconds to the end of the first step of a fresh fusionstitch compile that finds its
    kernels in the disk cache (filled by the cold compile) and nothing in memory: what a
    new process pays, less Python's imports; and what it found there (kernels compiled,
    plan and graph cache hits during that step)."""
    import time

    import torch

    from bench import workloads as W
    from fusionstitch.runtime.cache import clear_memory_caches
    torch._dynamo.reset()
    clear_memory_caches()
    from fusionstitch.runtime.counters import stats
    inst = W.make(name, size, device=_device(target), dtype=_torch_dtype(dtype))
    fn = _compile("fusionstitch", inst.fn, target)
    before = stats()
    start = time.perf_counter()
    W.step(inst, fn)
    if target == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    after = stats()
    return seconds, {k: after.get(k, 0) - before.get(k, 0) for k in (
        "kernels_compiled", "plan_cache_hits", "graph_cache_hits")}


def warm_start_precompiled(name: str, size: str, target: str,
                           dtype: str = "float32") -> tuple[float, dict]:
    """Like :func:`warm_start`, with torch's caching precompile on: a compile saves
    Dynamo's bytecode and guards and our graphs (``torch.compiler.save_cache_artifacts``,
    into a temporary Dynamo cache folder), then a fresh compile loads them instead of
    tracing; seconds to the end of its first step, and how many graphs it loaded (0: a
    training graph, which precompile cannot carry yet, traced again)."""
    import logging
    import tempfile
    import time

    import torch
    from torch._C._dynamo.eval_frame import _reset_precompile_entries
    from torch._dynamo.precompile_context import PrecompileContext

    from bench import workloads as W
    from fusionstitch.runtime.cache import clear_memory_caches
    from fusionstitch.runtime.counters import stats

    def fresh():
        torch._dynamo.reset()
        clear_memory_caches()
        PrecompileContext.clear()

    old_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    guards_log = logging.getLogger("torch._dynamo.guards")   # a warning per dropped guard
    old_level = guards_log.level
    codes = set()
    with tempfile.TemporaryDirectory(prefix="fusionstitch-bench-dynamo-") as d, \
            torch._dynamo.config.patch(caching_precompile=True):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = d
        guards_log.setLevel(logging.ERROR)
        try:
            fresh()
            inst = W.make(name, size, device=_device(target), dtype=_torch_dtype(dtype))
            codes.add(getattr(inst.fn, "forward", inst.fn).__code__)
            W.step(inst, _compile("fusionstitch", inst.fn, target))
            torch.compiler.save_cache_artifacts()
            fresh()
            inst = W.make(name, size, device=_device(target), dtype=_torch_dtype(dtype))
            before = stats()["precompile_loads"]
            start = time.perf_counter()   # torch.compile itself loads: time it too
            W.step(inst, _compile("fusionstitch", inst.fn, target))
            if target == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            return seconds, {"loads": stats()["precompile_loads"] - before}
        finally:
            for code in codes:   # torch._dynamo.reset() leaves what a load installed
                _reset_precompile_entries(code)
            fresh()
            guards_log.setLevel(old_level)
            if old_dir is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = old_dir


def _error(e: Exception) -> dict:
    traceback.print_exc(file=sys.stderr)
    return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:500]}


def bench_workload(name: str, size: str, target: str, variants, *, repeat: int, min_time: float,
                   index: str = "", fresh_caches: bool = True, sink: list | None = None,
                   measure_warm_start: bool = True, warmup: int = 3,
                   dtype: str = "float32", copy_gbs: float | None = None) -> dict:
    """All variants of one workload: compiled one after the other (eager first: it is
    the reference), then timed side by side (:func:`bench.timing.time_interleaved`).

    ``fresh_caches``: Inductor and fusionstitch compile into fresh cache folders (cold
    compiles); ``False`` lets them use their persistent caches, as the demo does, so that
    a second demo is warm for both compilers. ``sink``: see :func:`prepare_variant`.
    ``measure_warm_start``: time a second fusionstitch compile (``warm_start_s``).
    ``warmup``: untimed rounds before the timed ones. ``dtype``: the workload's floating
    dtype. ``copy_gbs``: the device's copy bandwidth; with it, a memory-bound workload's
    row gets its compulsory bytes and each variant the bandwidth it achieved
    (``achieved_gbs``, and ``copy_fraction`` of the copy's).

    On CUDA each variant also gets torch.profiler's count of the kernels (``prof_kernels``)
    and copies (``prof_memcpy``) one timed step launched, after the timing."""
    import torch
    from torch._inductor.utils import fresh_cache

    from bench import workloads as W
    row = {"workload": name, "mode": W.workload(name).mode, "variants": {}}
    entries, runs, references = row["variants"], {}, {}
    torch._dynamo.reset()
    # Inductor and fusionstitch compile into fresh cache folders: cold compiles
    cold = fresh_caches and "inductor" in variants
    with fresh_cache() if cold else contextlib.nullcontext(), \
            _fresh_fusionstitch_cache() if fresh_caches else contextlib.nullcontext():
        try:  # eager in float64: tells eager's own fp32 rounding from a real difference
            references["float64"] = W.step(W.make(name, size, device=_device(target),
                                                  dtype=torch.float64))
        except Exception as e:
            print(f"[{index}] {name}: no float64 reference ({e})", file=sys.stderr)
        for variant in variants:
            try:
                entries[variant], outs, runs[variant] = prepare_variant(
                    name, size, variant, target, references, sink, dtype)
                if variant == "eager":
                    references["eager"] = outs
            except Exception as e:  # one broken variant must not lose the whole run
                entries[variant] = _error(e)
            _progress(index, name, variant, entries[variant])
        try:
            timed = time_interleaved(runs, warmup=warmup, repeat=repeat,
                                     min_time=min_time, device=_device(target))
            for variant, t in timed.items():
                entries[variant].update(t)
        except Exception as e:
            for variant in runs:
                entries[variant] = _error(e)
        _device_counts(name, size, target, dtype, runs, entries, references, row, copy_gbs)
        # inside the fresh folders: the warm start reads what the cold compile wrote there
        if "fusionstitch" in runs and measure_warm_start:
            try:
                seconds, found = warm_start(name, size, target, dtype)
                entries["fusionstitch"]["warm_start_s"] = seconds
                entries["fusionstitch"].update({f"warm_start_{k}": v for k, v in found.items()})
            except Exception as e:
                entries["fusionstitch"]["warm_start_error"] = _error(e)["error"]
            try:
                seconds, found = warm_start_precompiled(name, size, target, dtype)
                entries["fusionstitch"]["warm_start_precompiled_s"] = seconds
                entries["fusionstitch"]["warm_start_precompiled_loads"] = found["loads"]
            except Exception as e:
                entries["fusionstitch"]["warm_start_precompiled_error"] = _error(e)["error"]
    print(f"[{index}] {name}: median " + ", ".join(
        f"{v} {e['median_s'] * 1e3:.3f} ms" for v, e in entries.items() if "median_s" in e)
        + f" ({max((e.get('runs', 0) for e in entries.values()), default=0)} rounds)",
        file=sys.stderr, flush=True)
    row["speedup"] = speedups({v: e.get("median_s") for v, e in entries.items()})
    return row


def _device_counts(name, size, target, dtype, runs, entries, references, row, copy_gbs):
    """torch.profiler's kernel counts per variant (CUDA) and, for a memory-bound workload
    when the copy bandwidth is known, the bandwidth each variant achieved."""
    from bench import workloads as W
    from bench.device_metrics import compulsory_bytes, profiler_kernels
    for variant, run in runs.items():
        if "error" in entries[variant]:
            continue
        try:
            counts = profiler_kernels(run, _device(target))
        except Exception as e:
            entries[variant]["prof_error"] = _error(e)["error"]
            continue
        if counts is not None:
            entries[variant]["prof_kernels"] = counts["kernels"]
            entries[variant]["prof_memcpy"] = counts["memcpy"]
    if not (copy_gbs and W.workload(name).memory_bound and "eager" in references):
        return
    inst = W.make(name, size, device=_device(target), dtype=_torch_dtype(dtype))
    row["compulsory_bytes"] = nbytes = compulsory_bytes(inst, references["eager"])
    for e in entries.values():
        if e.get("median_s"):
            e["achieved_gbs"] = nbytes / e["median_s"] / 1e9
            e["copy_fraction"] = e["achieved_gbs"] / copy_gbs


def _progress(index: str, name: str, variant: str, e: dict) -> None:
    msg = f"FAILED: {e['error']}" if "error" in e else (
        f"first call {e['first_call_s']:.2f} s"
        + (f", kernels {e['kernels']}" if "kernels" in e else "")
        + (f", max rel err {e['max_rel_err']:.1e}" if "max_rel_err" in e else "")
        + (f" (vs float64 {e['max_rel_err_f64']:.1e})" if "max_rel_err_f64" in e else ""))
    print(f"[{index}] {name} {variant}: {msg}", file=sys.stderr, flush=True)


# --- Entry points --------------------------------------------------------------------
def bench_variants(target: str, against, cuda_graphs: str = "auto") -> list[str]:
    """The variants a run times, in :data:`VARIANTS` order: eager (always: the reference),
    the baselines in ``against``, fusionstitch; with ``cuda_graphs`` ``"on"`` (or
    ``"auto"`` on the cuda target) also fusionstitch with CUDA graphs, and Inductor's
    ``reduce-overhead`` mode when Inductor runs."""
    bad = [a for a in against if a not in BASELINES]
    if bad:
        raise ValueError(f"--against takes {', '.join(BASELINES)}, not {bad}")
    if cuda_graphs not in ("auto", "on", "off"):
        raise ValueError(f"cuda_graphs must be auto, on or off, not {cuda_graphs!r}")
    graphs = cuda_graphs == "on" or cuda_graphs == "auto" and target == "cuda"
    chosen = {"eager", "fusionstitch", *against}
    if graphs:
        chosen.add("fusionstitch_cudagraphs")
        if "inductor" in against:
            chosen.add("inductor_cudagraphs")
    if target != "cuda" and chosen & set(CUDA_GRAPH_VARIANTS):
        raise ValueError("CUDA graphs (--cuda-graphs on, --against inductor_cudagraphs) "
                         f"need the cuda target, not {target!r}")
    return [v for v in VARIANTS if v in chosen]


def run(workloads, size: str = "full", target: str = "auto", against=("eager", "inductor"),
        repeat: int = 10, out_dir: str = DEFAULT_OUT, *, min_time: float = 0.5,
        command: str | None = None, dtype: str = "float32", cuda_graphs: str = "auto",
        warm_start: bool = True, suite: str = "zoo") -> dict:
    """Benchmark ``workloads``; writes the JSON and PNG into ``out_dir``; returns the JSON dict
    (plus ``"json_path"``/``"png_path"``, not written into the file).

    ``dtype``: the workloads' floating dtype (``"float32"``, ``"bfloat16"``; a bf16 run's
    files are named ``..._bf16_<date>``). ``cuda_graphs``: see :func:`bench_variants`.
    ``warm_start``: also time fusionstitch's warm starts (two more compiles a workload).
    ``suite``: ``"models"`` names the files ``bench_models_...`` (the real models of
    bench/models.py; any workload of either suite runs in either)."""
    import torch

    from bench import models as M
    from bench import workloads as W
    from bench.device_metrics import copy_bandwidth
    unknown = [w for w in workloads if w not in W.registry(w)]
    if unknown:
        raise KeyError(f"unknown workload(s) {unknown}; known: {', '.join(W.names())} and "
                       f"the models: {', '.join(M.names())}")
    _torch_dtype(dtype)
    target = resolve_target(target)
    variants = bench_variants(target, against, cuda_graphs)
    vers = versions()
    command = command or _command(workloads, size, target, against, repeat, out_dir, min_time,
                                  dtype=dtype, cuda_graphs=cuda_graphs, warm_start=warm_start,
                                  suite=suite)
    copy_gbs = (copy_bandwidth(_device(target))
                if any(W.workload(w).memory_bound for w in workloads) else None)
    meta = {"device": torch.cuda.get_device_name(0) if target == "cuda" else vers["cpu"],
            "suite": suite, "target": target, "size": size, "dtype": dtype, "repeat": repeat,
            "min_time_s": min_time, "variants": variants, "fusionstitch_strategy": "stitch",
            "timing": "variants interleaved, one run of each per round; medians",
            "inductor_cache": "fresh folder per workload (cold compile)",
            "copy_bandwidth_gbs": copy_gbs,
            "versions": vers, "command": command, "date": vers["date"]}
    os.makedirs(out_dir, exist_ok=True)
    day = meta["date"][:10]
    stem = os.path.join(out_dir, "bench_" + ("models_" if suite == "models" else "")
                        + f"{target}_{size}_"
                        + ("" if dtype == "float32" else "bf16_") + day)
    rows: list[dict] = []
    result = {"meta": {**meta, "complete": True}, "summary": summarise(rows, dtype),
              "rows": rows}
    for i, name in enumerate(workloads, 1):
        rows.append(bench_workload(name, size, target, variants, repeat=repeat,
                                   min_time=min_time, index=f"{i}/{len(workloads)}",
                                   dtype=dtype, copy_gbs=copy_gbs,
                                   measure_warm_start=warm_start))
        # written after every workload: a run stopped by a time limit keeps what it did
        result = {"meta": {**meta, "complete": i == len(workloads)},
                  "summary": summarise(rows, dtype), "rows": rows}
        with open(stem + ".json", "w") as f:
            json.dump(_finite(result), f, indent=1, allow_nan=False)
            f.write("\n")
        with open(stem + ".md", "w") as f:
            f.write(markdown(result))
    title = (f"fusionstitch (stitch, target {target}) vs "
             f"{' / '.join(v for v in variants if v in BASELINES)}, size {size}, {dtype}\n"
             f"{meta['device']}, {meta['versions']['torch_threads']} threads, "
             f"torch {meta['versions']['torch']}, {day}")
    plot(rows, stem + ".png", title)
    return {**result, "json_path": stem + ".json", "png_path": stem + ".png",
            "md_path": stem + ".md"}


def _command(workloads, size, target, against, repeat, out_dir, min_time,
             prog="python -m bench.run", *, dtype="float32", cuda_graphs="auto",
             warm_start=True, suite="zoo") -> str:
    """The command line that repeats this run (every option spelt out)."""
    out = os.path.relpath(out_dir) if os.path.abspath(out_dir).startswith(os.getcwd()) else out_dir
    return prog + " " + shlex.join(
        (["--suite", suite] if suite != "zoo" else [])
        + ["--workloads", ",".join(workloads), "--size", size, "--target", target, "--against",
         ",".join(against), "--repeat", str(repeat), "--min-time", str(min_time),
         "--dtype", dtype, "--cuda-graphs", cuda_graphs]
        + ([] if warm_start else ["--no-warm-start"]) + ["--out", out])


def _finite(obj):
    """JSON has no inf/NaN: write them as the strings "inf", "-inf", "nan"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def main(argv: list[str] | None = None, prog: str = "python -m bench.run") -> int:
    """Parse the options, run, print the table and summary; 1 when fusionstitch differs
    from eager (see :func:`matches_eager`) or a variant failed."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="zoo", choices=("zoo", "models"),
                   help="zoo: the fusion workloads of bench/workloads.py; models: the real "
                        "transformers models of bench/models.py, each <arch>_infer and "
                        "<arch>_train (default: %(default)s)")
    p.add_argument("--workloads", default=None,
                   help="comma-separated workload names (default: the suite's, for the zoo "
                        f"{','.join(DEFAULT_WORKLOADS)}; for the models all of them)")
    p.add_argument("--size", default="full", choices=("small", "full"))
    p.add_argument("--target", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--against", default="eager,inductor",
                   help="baselines to run beside fusionstitch: eager, inductor, "
                        "inductor_cudagraphs (eager always runs as the reference; "
                        "default: %(default)s)")
    p.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="the workloads' floating dtype (default: %(default)s)")
    p.add_argument("--cuda-graphs", default="auto", choices=("auto", "on", "off"),
                   help="also time fusionstitch with CUDA graphs, and Inductor's "
                        "reduce-overhead mode when Inductor runs; auto: on the cuda target "
                        "(default: %(default)s)")
    p.add_argument("--no-warm-start", dest="warm_start", action="store_false",
                   help="skip timing fusionstitch's warm starts (two compiles a workload)")
    p.add_argument("--repeat", type=int, default=10,
                   help="at least this many timed runs per variant (default: %(default)s)")
    p.add_argument("--min-time", type=float, default=0.5,
                   help="keep timing until the runs add up to this many seconds "
                        "(default: %(default)s)")
    p.add_argument("--out", default=DEFAULT_OUT, help="results folder (default: bench/results)")
    args = p.parse_args(argv)
    if args.workloads is None:
        from bench import models
        names = list(DEFAULT_WORKLOADS) if args.suite == "zoo" else models.names()
    else:
        names = [w for w in args.workloads.split(",") if w]
    against = [a for a in args.against.split(",") if a]
    try:   # a wrong combination is a usage error, before anything runs
        bench_variants(resolve_target(args.target), against, args.cuda_graphs)
    except ValueError as e:
        p.error(str(e))
    command = _command(names, args.size, args.target, against, args.repeat, args.out,
                       args.min_time, prog, dtype=args.dtype, cuda_graphs=args.cuda_graphs,
                       warm_start=args.warm_start, suite=args.suite)
    result = run(names, args.size, args.target, against, args.repeat, args.out,
                 min_time=args.min_time, command=command, dtype=args.dtype,
                 cuda_graphs=args.cuda_graphs, warm_start=args.warm_start, suite=args.suite)
    print(table(result["rows"], result["meta"]["variants"]))
    s = result["summary"]
    print("\ngeomean speed-up: " + ", ".join(
        f"{k.removeprefix('geomean_speedup_')} {v:.2f}x" for k, v in s.items()
        if k.startswith("geomean_speedup_")))
    worst = [f"{k.removeprefix('min_speedup_')} {v:.2f}x" for k, v in s.items()
             if k.startswith("min_speedup_")]
    if worst:
        print("lowest speed-up against Inductor: " + ", ".join(worst))
    prof = [f"{k.removeprefix('prof_kernels_')} {v:.2f}" for k, v in s.items()
            if k.startswith("prof_kernels_")]
    if prof:
        print("launched kernels (torch.profiler), fusionstitch over Inductor: " + ", ".join(prof))
    print(f"fusionstitch max rel err vs eager: {_fmt(s['fusionstitch_max_rel_err'], '.1e')}"
          + (f"; differs from eager on {', '.join(s['fusionstitch_mismatches'])}"
             if s["fusionstitch_mismatches"] else ""))
    if s["failed"]:
        print(f"failed: {', '.join(s['failed'])}")
    print(f"wrote {result['json_path']} and {result['png_path']}")
    return 0 if s["fusionstitch_matches_eager"] and not s["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
