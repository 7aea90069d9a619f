"""explain(): compile a function with a capturing backend and report what was planned.

It runs the function once (and, when an output needs grad, its backward via
torch.autograd.grad with respect to the leaves its autograd graph reaches, which
leaves every `.grad` untouched) so that forward and backward graphs are both
compiled, then sums the plans of every graph. The process-wide stats() are restored
afterwards: explaining is not running; so is Dynamo's state (report/dynamo_state.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..analysis.cost import plan_bytes
from ..fusion.plan import FREE
from ..ir.graph import CONSTANT, GETITEM, PARAMETER, Graph
from ..runtime import counters as _stats

_STRUCTURAL = (PARAMETER, CONSTANT, GETITEM)


def count_ops(graph: Graph) -> int:
    """IR ops of a graph: every node but parameters, constants and tuple accesses."""
    return sum(1 for n in graph.nodes if n.op not in _STRUCTURAL)


@dataclass
class GraphReport:
    name: str
    kind: str                 # forward | backward | inference
    num_ops: int
    num_kernels: int
    num_library_calls: int
    bytes_moved: int
    planning_seconds: float
    plan: object = None       # FusionPlan, or None when the graph fell back to torch
    fallback_reason: str | None = None
    stages: dict = field(default_factory=dict)   # planning seconds per stage
    # what runs through torch on each call and why, one line per fallback (the parts of
    # the plan, or the whole graph): what `stats()["fallbacks"]` counts per call
    fallbacks: list[str] = field(default_factory=list)
    # the driver's lowered plan (fusion/lowered.py: the kernels that ran), when the graph
    # was compiled; a report made from plans alone lowers the groups it shows
    lowered: object = None

    def kernel(self, group: int, target: str):
        """The lowered kernel of group `group` for `target`, or None (not lowered)."""
        if self.lowered is None or self.lowered.target.name != target:
            return None
        return self.lowered.kernels.get(group)


@dataclass
class Report:
    strategy: str
    target: str
    graphs: list[GraphReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # what explain could not do, and why
    # why_not_fused's plan traces per graph (re-planned for cached plans; a cache)
    _traces: dict = field(default_factory=dict, repr=False, compare=False)

    num_ops = property(lambda self: sum(g.num_ops for g in self.graphs))
    num_kernels = property(lambda self: sum(g.num_kernels for g in self.graphs))
    num_library_calls = property(lambda self: sum(g.num_library_calls for g in self.graphs))
    bytes_moved = property(lambda self: sum(g.bytes_moved for g in self.graphs))
    planning_seconds = property(lambda self: sum(g.planning_seconds for g in self.graphs))
    # fallbacks per step (a kernel build error is found by building: not counted here)
    num_fallbacks = property(lambda self: sum(len(g.fallbacks) for g in self.graphs))

    def why_not_fused(self, a: str, b: str) -> str:
        """Why IR nodes %a and %b (of one graph) are not in one kernel, in words: the
        decision the planner recorded (its plan trace, fusion/trace.py), not a new one."""
        for g in self.graphs:
            plan = g.plan
            if plan is None or a not in plan.graph or b not in plan.graph:
                continue
            ga, gb = plan.group_of(a), plan.group_of(b)
            if ga is None or gb is None:
                return f"%{a} or %{b} is an input of the plan (parameter or constant)"
            if ga.id == gb.id:
                return f"%{a} and %{b} are fused: both in group #{ga.id} ({ga.composition})"
            v = self.decision(a, b)
            if v is None:
                return (f"%{a} (group #{ga.id}) and %{b} (group #{gb.id}) are apart; the plan "
                        f"came from the plan cache and planning it again gave other groups, "
                        f"so the reason is not known")
            return (f"%{a} (group #{ga.id}) and %{b} (group #{gb.id}) are apart "
                    f"[{v.stage}]: {v.reason}")
        raise KeyError(f"no graph of this report has both %{a} and %{b}")

    def decision(self, a: str, b: str):
        """The planner's recorded decision (a trace.Verdict) that put %a and %b in
        different groups; None when neither the plan nor a re-planning has a trace."""
        from ..fusion.trace import planned_trace
        for g in self.graphs:
            plan = g.plan
            if plan is None or a not in plan.graph or b not in plan.graph:
                continue
            key = (g.name, id(plan))
            if key not in self._traces:
                self._traces[key] = planned_trace(plan, self.target)
            trace = self._traces[key]
            return None if trace is None else trace.why_apart(a, b)
        raise KeyError(f"no graph of this report has both %{a} and %{b}")

    def __str__(self) -> str:
        lines = [f"fusionstitch plan (strategy={self.strategy}, target={self.target}): "
                 f"{self.num_ops} ops -> {self.num_kernels} kernels + "
                 f"{self.num_library_calls} library calls, "
                 f"{self.bytes_moved / 1e6:.3f} MB moved, planned in "
                 f"{self.planning_seconds * 1e3:.1f} ms"]
        lines += [f"  note: {n}" for n in self.notes]
        for g in self.graphs:
            head = (f"  {g.name} ({g.kind}): {g.num_ops} ops -> {g.num_kernels} kernels + "
                    f"{g.num_library_calls} library calls, {g.bytes_moved / 1e6:.3f} MB")
            if g.fallback_reason:
                head += f"  [runs through torch: {g.fallback_reason}]"
            elif g.fallbacks:
                head += f"  [{len(g.fallbacks)} fallback(s): {'; '.join(g.fallbacks)}]"
            if g.stages:
                head += "  [planning: " + ", ".join(f"{k} {v * 1e3:.1f} ms"
                                                    for k, v in g.stages.items()) + "]"
            lines.append(head)
            if g.plan is not None:
                for grp in g.plan.groups:
                    if grp.kind == FREE:
                        continue
                    ops = " ".join(g.plan.graph[n].op for n in grp.nodes)
                    tpl = _template(g, grp, self.target)
                    lines.append(f"    {grp.kind:7s} #{grp.id} [{grp.composition}]{tpl} {ops}")
        return "\n".join(lines)


def _template(g: GraphReport, group, target: str) -> str:
    """ ' grid x<N ...' for generated kernels (targets that generate them), else ''."""
    from ..fusion.plan import KERNEL
    from ..targets import resolve
    t = resolve(target)
    if group.kind != KERNEL or not t.generates_kernels:
        return ""
    from ..codegen.kernel import template
    from ..codegen.lower import Unsupported
    k = g.kernel(group.id, target)
    if k is None:
        try:
            k = t.lower(g.plan.graph, group.nodes, group.schedule)
        except Unsupported:
            return ""
    return " " + template(k, t.persistent_rule())


def plan_report(graphs: list[Graph], strategy: str, target: str) -> Report:
    """A Report for already captured (canonicalised) graphs, planned with `strategy`."""
    import time

    from ..fusion import make_plan
    from ..runtime.program import fallback_reasons
    report = Report(strategy, target)
    for g in graphs:
        start = time.perf_counter()
        plan = make_plan(g, strategy, target)
        report.graphs.append(GraphReport(
            g.name, g.name.rsplit("_", 1)[0], count_ops(g), plan.num_kernels,
            plan.num_library_calls, plan_bytes(plan), time.perf_counter() - start, plan,
            stages=dict(plan.stages), fallbacks=fallback_reasons(plan, target)))
    return report


def flat_tensors(out) -> list[torch.Tensor]:
    """Every tensor in a (nested) tuple / list / dict output, in order; others dropped."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat_tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flat_tensors(o)]
    return []  # None / python scalars carry nothing to compare


def graph_leaves(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The leaf tensors (inputs, parameters, closed-over tensors) that `outs` were
    computed from and that need their gradient, found by walking their autograd graph."""
    leaves: dict[int, torch.Tensor] = {}
    seen: set = set()
    stack = []
    for t in outs:
        if t.grad_fn is None:
            leaves.setdefault(id(t), t)   # an output that is itself a leaf
        else:
            stack.append(t.grad_fn)
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        var = getattr(node, "variable", None)   # AccumulateGrad: the leaf it feeds
        if isinstance(var, torch.Tensor):
            leaves.setdefault(id(var), var)
            continue
        stack.extend(n for n, _ in node.next_functions)
    return list(leaves.values())


# torch's refusals of a second backward: the function consumed its own autograd graph
# (torch.autograd.grad without retain_graph), or differentiating the result would go
# through a compiled backward (torch.compile serves no double backward)
_CONSUMED = ("Trying to backward through the graph a second time",
             "does not currently support double backward")


def _probe_backward(out) -> str | None:
    """Run the backward of `out` (the sum of its outputs that need grad) with
    torch.autograd.grad, so that every backward graph is compiled and no `.grad` changes;
    a note when torch refuses it, None otherwise."""
    needs_grad = [t for t in flat_tensors(out) if t.requires_grad]
    if not needs_grad or not torch.is_grad_enabled():
        return None
    leaves = graph_leaves(needs_grad)
    if not leaves:
        return None
    loss = sum((t.real if t.is_complex() else t).float().sum() for t in needs_grad)
    try:
        torch.autograd.grad(loss, leaves, allow_unused=True)
    except RuntimeError as e:
        why = next((m for m in _CONSUMED if m in str(e)), None)
        if why is None:
            raise
        return (f"no backward of the outputs was run: torch refused it ({why!r}); the "
                f"backward graphs are those the function ran itself")
    return None


def explain(fn, *args, strategy: str = "stitch", target: str = "auto", **kwargs) -> Report:
    """Plan `fn(*args, **kwargs)` (forward and backward) and report kernels, bytes, time.

    Works on whatever torch.compile accepts, also a function that differentiates itself
    or returns detached values or non-tensors; it leaves `.grad`, stats() and Dynamo's
    caches as they were (report/dynamo_state.py), also when it fails."""
    from ..config import Options
    from ..frontend.torch import backend
    from .dynamo_state import fresh_entry, isolated
    opts = Options(strategy=strategy, target=target)
    sink: list = []
    compile_fn = backend(strategy, target, _sink=sink, _execute=False)
    saved = _stats.stats()
    with isolated(compile_fn):
        try:
            out = torch.compile(fresh_entry(fn), backend=compile_fn)(*args, **kwargs)
            note = _probe_backward(out)
        finally:
            _stats.restore(saved)
    if not sink:
        raise RuntimeError("fusionstitch.explain: torch.compile produced no graph for this "
                           "function: Dynamo ran it eagerly (TORCH_LOGS=graph_breaks says "
                           "why, e.g. an nn.LSTM, which Dynamo does not capture)")
    # the target the graphs were planned for (`auto` resolves per graph from its inputs)
    target = next((spec.target for cg in sink for spec in cg.specialisations.values()
                   if hasattr(spec, "target")), opts.resolved_target())
    report = sink_report(sink, strategy, target)
    if note:
        report.notes.append(note)
    return report


def sink_report(sink: list, strategy: str, target: str) -> Report:
    """A Report of the graphs a fusionstitch backend compiled (its `_sink` list), with the
    plans it made: explain()'s, or those of a timed run (the demo reports what it ran)."""
    from ..runtime.program import fallback_reasons
    report = Report(strategy, target)
    for cg in sink:
        if not cg.specialisations:
            continue
        for spec in cg.specialisations.values():
            if not hasattr(spec, "plan"):
                report.graphs.append(GraphReport(
                    cg.name, cg.kind, 0, 0, 0, 0, 0.0, fallback_reason=cg.fallback_reason,
                    fallbacks=[f"the graph: {cg.fallback_reason}"]))
                continue
            report.graphs.append(GraphReport(
                cg.name, cg.kind, count_ops(spec.graph), spec.plan.num_kernels,
                spec.plan.num_library_calls, plan_bytes(spec.plan), spec.planning_seconds,
                spec.plan, stages=dict(spec.plan.stages),
                fallbacks=fallback_reasons(spec.plan, target),
                lowered=getattr(spec, "lowered", None)))
    return report
