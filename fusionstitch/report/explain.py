"""explain(): compile a function with a capturing backend and report what was planned.

It runs the function once (and, when an output needs grad, its backward via
torch.autograd.grad, which leaves every `.grad` untouched) so that forward and
backward graphs are both compiled, then sums the plans of every graph. The
process-wide stats() are restored afterwards: explaining is not running.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..analysis.cost import plan_bytes
from ..fusion.legality import gemms_fusible, staged_limit
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


@dataclass
class Report:
    strategy: str
    target: str
    graphs: list[GraphReport] = field(default_factory=list)
    # why_not_fused's reachability per graph, built once (a cache, not a result)
    _reach: dict = field(default_factory=dict, repr=False, compare=False)

    num_ops = property(lambda self: sum(g.num_ops for g in self.graphs))
    num_kernels = property(lambda self: sum(g.num_kernels for g in self.graphs))
    num_library_calls = property(lambda self: sum(g.num_library_calls for g in self.graphs))
    bytes_moved = property(lambda self: sum(g.bytes_moved for g in self.graphs))
    planning_seconds = property(lambda self: sum(g.planning_seconds for g in self.graphs))
    # fallbacks per step (a kernel build error is found by building: not counted here)
    num_fallbacks = property(lambda self: sum(len(g.fallbacks) for g in self.graphs))

    def why_not_fused(self, a: str, b: str) -> str:
        """Why IR nodes %a and %b (of one graph) are not in one kernel, in words."""
        from ..analysis.reach import Reachability
        from ..fusion.legality import check_group
        for g in self.graphs:
            plan = g.plan
            if plan is None or a not in plan.graph or b not in plan.graph:
                continue
            ga, gb = plan.group_of(a), plan.group_of(b)
            if ga is None or gb is None:
                return f"%{a} or %{b} is an input of the plan (parameter or constant)"
            if ga.id == gb.id:
                return f"%{a} and %{b} are fused: both in group #{ga.id} ({ga.composition})"
            reach = self._reach.get(g.name)
            if reach is None or reach.graph is not plan.graph:
                reach = self._reach[g.name] = Reachability(plan.graph)
            d = check_group(plan.graph, set(ga.nodes) | set(gb.nodes), reach,
                            batched_gemms=self.strategy == "stitch"
                            and gemms_fusible(self.target),
                            staged_bytes=staged_limit(self.target)
                            if self.strategy == "stitch" else 0)
            if not d:
                return f"%{a} (group #{ga.id}) and %{b} (group #{gb.id}) cannot fuse: {d.reason}"
            return (f"%{a} (group #{ga.id}) and %{b} (group #{gb.id}) could fuse, but the "
                    f"{self.strategy} planner chose other groups (a higher total score, or "
                    f"its rules do not merge them)")
        raise KeyError(f"no graph of this report has both %{a} and %{b}")

    def __str__(self) -> str:
        lines = [f"fusionstitch plan (strategy={self.strategy}, target={self.target}): "
                 f"{self.num_ops} ops -> {self.num_kernels} kernels + "
                 f"{self.num_library_calls} library calls, "
                 f"{self.bytes_moved / 1e6:.3f} MB moved, planned in "
                 f"{self.planning_seconds * 1e3:.1f} ms"]
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
                    tpl = _template(g.plan, grp, self.target)
                    lines.append(f"    {grp.kind:7s} #{grp.id} [{grp.composition}]{tpl} {ops}")
        return "\n".join(lines)


def _template(plan, group, target: str) -> str:
    """ ' grid x<N ...' for generated kernels (codegen targets), else ''."""
    from ..fusion import CODEGEN_TARGETS
    from ..fusion.plan import KERNEL
    if group.kind != KERNEL or target not in CODEGEN_TARGETS:
        return ""
    from ..codegen.kernel import template
    from ..codegen.lower import Unsupported, lower_cached
    try:
        k = lower_cached(plan.graph, group.nodes)
    except Unsupported:
        return ""
    from .source import persistent_rule
    return " " + template(k, persistent_rule(target))


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


def _leaves(fn, args) -> list[torch.Tensor]:
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad and a.is_leaf]
    if isinstance(fn, torch.nn.Module):
        leaves += [p for p in fn.parameters() if p.requires_grad]
    return leaves


def flat_tensors(out) -> list[torch.Tensor]:
    """Every tensor in a (nested) tuple / list / dict output, in order; others dropped."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat_tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flat_tensors(o)]
    return []  # None / python scalars carry nothing to compare


def explain(fn, *args, strategy: str = "stitch", target: str = "auto", **kwargs) -> Report:
    """Plan `fn(*args, **kwargs)` (forward and backward) and report kernels, bytes, time."""
    from ..config import Options
    from ..frontend.torch import backend
    opts = Options(strategy=strategy, target=target)
    sink: list = []
    compiled = torch.compile(fn, backend=backend(strategy, target, _sink=sink, _execute=False))
    saved = _stats.stats()
    try:
        out = compiled(*args, **kwargs)
        needs_grad = [t for t in flat_tensors(out) if t.requires_grad]
        leaves = _leaves(fn, args)
        if needs_grad and leaves and torch.is_grad_enabled():
            loss = sum(t.float().sum() for t in needs_grad)
            torch.autograd.grad(loss, leaves, allow_unused=True)
    finally:
        _stats.restore(saved)
    if not sink:
        raise RuntimeError("fusionstitch.explain: torch.compile produced no graph for this "
                           "function (it may have fallen back to eager, e.g. after too many "
                           "recompilations); try torch._dynamo.reset() first")
    # the target the graphs were planned for (`auto` resolves per graph from its inputs)
    target = next((spec.target for cg in sink for spec in cg.specialisations.values()
                   if hasattr(spec, "target")), opts.resolved_target())
    return sink_report(sink, strategy, target)


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
                fallbacks=fallback_reasons(spec.plan, target)))
    return report
