"""Host time fusionstitch's runtime spends per call and per kernel launch.

    python -m bench.overhead [--workloads empty,logreg_step,mlp_step] [--calls N]
    python -m bench.overhead --workloads bert_infer,resnet_train   # zoo and models, small
                             [--threads N] [--json PATH]

Each workload is compiled with `fusionstitch.backend(target="cpu")` and run a few
steps; every aten graph it made (forward, backward, inference) is then called on
the arguments of its last call, alone, in four ways:

* ``graph``: the `CompiledGraph` as AOTAutograd calls it (frontend key or static
  fast path, then the Program): what a step pays for the graph;
* ``kernels``: the time inside the generated kernels' native calls (timed one by one);
* ``host``: ``graph - kernels``: the runtime's own cost plus library calls (GEMMs and
  ops run through torch), and ``host/launch`` that divided by the launches and library
  calls of the call;
* ``interpreted``: ``graph`` with the Program interpreting its plan at every call
  (`Program.use_generated(False)`, FUSIONSTITCH_WRAPPER=0) instead of running its
  generated per-call code (runtime/wrapper.py);
* ``eager``: the same aten graph run op by op through torch (`gm(*args)`).

Then the whole step, interleaved: eager, fusionstitch, and the step's time outside
fusionstitch's graphs (``step - sum(graph)``: Dynamo, AOTAutograd and the autograd
engine). Medians of interleaved batches, microseconds of this thread's CPU time (so
that other processes on a shared machine do not count; with --threads above 1 the
kernels' other threads do not count either); the whole step is wall time. The numbers
are for one machine; compare them within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.timing import time_interleaved, versions  # noqa: E402


class Empty:
    """An almost empty graph: one small elementwise kernel (inference)."""

    def __init__(self):
        self.x = torch.randn(16)

    def state(self):
        return [self.x]

    def inner(self, x):
        return (x + 1,)


class Suite:
    """A workload of the zoo or the model suite (`bench.workloads`, `bench.models`), size
    small: `inner` is its function, and a call of it is one step of the benchmark
    (`bench.workloads.step`: inference without gradients, training with its backward)."""

    def __init__(self, name: str):
        from bench.models import WORKLOADS as MODELS
        from bench.models import make as make_model
        from bench.workloads import WORKLOADS, make
        self.inst = (make_model if name in MODELS else make)(name, size="small")
        if name not in MODELS and name not in WORKLOADS:
            raise KeyError(name)
        self.inner = self.inst.fn

    def state(self):
        return list(self.inst.args)

    def drive(self, fn, *args):
        from bench.workloads import Instance, step
        step(Instance(self.inst.workload, fn, tuple(args), self.inst.grad_params,
                      self.inst.mutated, self.inst.params))


def _workloads():
    from bench.autograd_inside import LogReg, MLPStep
    fixed = {"empty": Empty, "logreg_step": LogReg, "mlp_step": MLPStep}

    class Table(dict):
        def __missing__(self, name):
            return lambda: Suite(name)
    return Table(fixed)


def _drive(work, fn, *args):
    """One step of `work` through `fn` (its compiled or eager function)."""
    if hasattr(work, "drive"):
        return work.drive(fn, *args)
    return fn(*args)


def _clock() -> float:
    """This thread's CPU seconds (with one torch thread, every kernel runs on it): what a
    call costs, without the time other processes of a shared machine took the core."""
    return time.thread_time()


@contextmanager
def _recording(graphs_args: dict):
    """Record the arguments of each CompiledGraph's last call (a copy of the list: the
    boxed convention lets a callee clear it)."""
    from fusionstitch.frontend.torch import CompiledGraph
    call = CompiledGraph.__call__

    def recorded(self, *args):
        a = args[0] if len(args) == 1 and isinstance(args[0], list) else args
        graphs_args[self] = list(a)
        return call(self, *args)
    CompiledGraph.__call__ = recorded
    try:
        yield
    finally:
        CompiledGraph.__call__ = call


@contextmanager
def _timed_kernels(graph, spent: list):
    """Every generated kernel of `graph`'s programs timed: the seconds inside the native
    calls add up in `spent[0]` (the host cost is the rest of the call)."""
    steps = [s for spec in _specs(graph) for s in spec.program.kernel_steps.values()]
    runs = [s.run for s in steps]
    clock = _clock

    def timed(run):
        def call(buffers, syms):
            t = clock()
            run(buffers, syms)
            spent[0] += clock() - t
        return call
    for s in steps:
        s.run = timed(s.run)
    try:
        yield
    finally:
        for s, r in zip(steps, runs):
            s.run = r


def _specs(graph) -> list:
    return [s for s in graph.specialisations.values() if hasattr(s, "program")]


def _medians_us(fns: dict, calls: int, batch: int = 20) -> dict[str, float]:
    """Median microseconds per call of each function, timed in interleaved batches (a slow
    spell of a shared machine hits all alike). A function may be a (setup, fn, teardown)
    triple, run around each of its batches."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    wrapped = {k: f if isinstance(f, tuple) else (None, f, None) for k, f in fns.items()}
    for setup, fn, teardown in wrapped.values():
        if setup:
            setup()
        for _ in range(3):
            fn()
        if teardown:
            teardown()
    for _ in range(max(calls // batch, 1)):
        for k, (setup, fn, teardown) in wrapped.items():
            if setup:
                setup()
            t = _clock()
            for _ in range(batch):
                fn()
            times[k].append((_clock() - t) / batch)
            if teardown:
                teardown()
    return {k: sorted(v)[len(v) // 2] * 1e6 for k, v in times.items()}


def measure(name: str, calls: int) -> dict:
    import fusionstitch
    torch._dynamo.reset()
    work = _workloads()[name]()
    graphs: list = []
    fn = torch.compile(work.inner, backend=fusionstitch.backend(target="cpu", _sink=graphs))
    state = work.state()
    last: dict = {}
    with _recording(last):
        for _ in range(3):
            _drive(work, fn, *state)
    before = fusionstitch.stats()
    _drive(work, fn, *state)
    after = fusionstitch.stats()
    per_step = {k: after[k] - before[k] for k in ("kernels_launched", "library_calls",
                                                   "fallbacks")}
    rows = []
    total_graph = 0.0
    for g in graphs:
        args = last.get(g)
        if args is None:
            continue
        specs = _specs(g)
        launches = sum(s.program.num_kernels + s.program.num_library_calls for s in specs)
        spent = [0.0]
        n = max(calls // 2, 20)
        with _timed_kernels(g, spent):
            t = _clock()
            for _ in range(n):
                g(list(args))
            timed = (_clock() - t) / n * 1e6
        kernels = spent[0] / n * 1e6

        def generated(on: bool) -> None:
            for s in specs:
                s.program.use_generated(on)
        with torch.no_grad():
            us = _medians_us({"graph": lambda: g(list(args)),
                              "interpreted": (lambda: generated(False), lambda: g(list(args)),
                                              lambda: generated(True)),
                              "eager": lambda: g.gm(*args)}, calls)
        full, interp, eager = us["graph"], us["interpreted"], us["eager"]
        host = timed - kernels
        total_graph += full
        rows.append({"graph": g.name, "launches": launches, "graph_us": full, "host_us": host,
                     "host_per_launch_us": host / max(launches, 1),
                     "kernels_us": kernels, "eager_us": eager,
                     "interpreted_us": interp})
    work.state()
    steps = time_interleaved({"eager": lambda: _drive(work, work.inner, *work.state()),
                              "fusionstitch": lambda: _drive(work, fn, *work.state())},
                             warmup=3, repeat=max(calls // 10, 5), min_time=0.3)
    work.state()
    step = {k: v["median_s"] * 1e6 for k, v in steps.items()}
    return {"workload": name, "per_step": per_step, "graphs": rows, "step_us": step,
            "outside_graphs_us": step["fusionstitch"] - total_graph}


def table(results: list[dict]) -> str:
    lines = ["| workload | graph | launches | graph us | host us | host us/launch | "
             "kernels us | interpreted us | eager aten us |", "|" + " --- |" * 9]
    for r in results:
        for g in r["graphs"]:
            lines.append(f"| {r['workload']} | {g['graph']} | {g['launches']} | "
                         f"{g['graph_us']:.1f} | {g['host_us']:.1f} | "
                         f"{g['host_per_launch_us']:.2f} | {g['kernels_us']:.1f} | "
                         f"{g['interpreted_us']:.1f} | {g['eager_us']:.1f} |")
    lines += ["", "| workload | eager step us | fusionstitch step us | outside our graphs us |"
              " launches/step | fallbacks/step |", "|" + " --- |" * 6]
    for r in results:
        s = r["step_us"]
        lines.append(f"| {r['workload']} | {s['eager']:.1f} | {s['fusionstitch']:.1f} | "
                     f"{r['outside_graphs_us']:.1f} | "
                     f"{r['per_step']['kernels_launched'] + r['per_step']['library_calls']} | "
                     f"{r['per_step']['fallbacks']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="empty,logreg_step,mlp_step")
    p.add_argument("--calls", type=int, default=2000, help="timed calls per measurement")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None, help="also write the numbers here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = [measure(w, args.calls) for w in args.workloads.split(",") if w]
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": versions(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
