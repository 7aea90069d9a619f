"""Legality of fusion decisions, each with its reason: the one place it is decided.

A `Legality` is made for one graph and one target (and the planner's settings); every
stage of a planning run that asks whether something may be fused asks it:

- `op(name)`: can this op be part of a generated kernel on the target: it is an op
  (not an input), it has a lowering, draws no random numbers, scatters to no
  data-dependent place (a scatter with a kernel rule, codegen/scatter.py, may be a
  kernel alone, never fused), is no library call (small GEMMs excepted where the target
  composes them) and no composite reduction (`fusible`), and the target's code
  generator has a rule for it;
- `group(names)`: can these nodes be one kernel: every op can, no cycle (no path leaves
  the set and re-enters it), one consistent schedule (or, where the target allows, one
  program running it in stages within a byte bound), and the target's code generator
  makes one kernel of them (`lowers`);
- `lowers(names)`: that last question alone (`Target.can_lower`): code-generation
  legality (codegen_legal.py) asks it of the groups a planner chose;
- `kernel(names)`: the kernel IR the code generator makes of a group, for the
  profitability rules that read it (profit.py).

Who asks: the stitch planner's candidate generators, packing and merging (through
`stitch.StitchChecks`, which applies profit.py's rules after legality), the xla
baseline (with no target: XLA's rules do not depend on it; code-generation legality
is asked after planning, by `legalize`), and `legalize`. No other module lowers a
group tentatively or asks `Target.can_lower` (tests/design/test_legality_seam.py).

Every refusal is a `Decision` naming its rule and its reason. Verdicts are remembered in
the object (per op, per node set, and by structure through `structure.StructuralMemo`),
so a planner makes one per planning run. Legality says only whether a group *can* be one
kernel; whether it pays is profit.py's (the recompute limit) and the cost model's, and
choosing among groups the planner's.
"""
from __future__ import annotations

import logging
from functools import cached_property

from ..analysis.reach import Reachability
from ..codegen.lower import Unsupported, lower_group
from ..codegen.lowerings import SUPPORTED_OPS
from ..codegen.scatter import is_scatter_kernel
from ..config import elide_half_casts
from ..ir.graph import CONSTANT, PARAMETER, Graph, Node
from ..ir.ops import (FUSIBLE_DOTS, SCATTER_OPS, SIMPLE_REDUCTIONS, Category, lookup,
                      one_write_scatter)
from ..runtime.cache import register_memory_cache
from ..schedule.propagate import Inconsistent, components, dot_dims, group_spaces
from ..targets import resolve
from .decision import ALLOW, Decision
from .structure import StructuralMemo

__all__ = ["Decision", "Legality", "fusible", "small_gemm", "staged_limit",
           "tentative_lower", "MAX_FUSED_GEMM_DIM"]

log = logging.getLogger("fusionstitch.fusion")

# Largest GEMM tile (m, n and k, per batch entry) fused with block composition: a tile
# of this size (3 x 64 x 64 fp32 = 48 KiB) fits one block's shared memory on the GPU,
# where a vendor GEMM would be launch-bound anyway. Larger GEMMs stay library calls
# (the 2019 paper's "large gemm" partition ops).
MAX_FUSED_GEMM_DIM = 64

CYCLE = Decision.forbid("grouping would create a cycle (a path leaves the group and "
                        "re-enters it)", "cycle")


class Legality:
    """The legality verdicts of one graph on one target (see the module doc).

    `target`: a Target or its name; None for the target-free rules alone (ops, cycle,
    schedule: the xla baseline's). `gemms`: small GEMMs may be inside a kernel (default:
    the target's `gemm_fusing`). `staged_bytes`: bytes one program may move when a group
    has no one schedule (default: the target's `staged_bytes`; 0: never). `trace`: a
    trace.PlanTrace where refused ops and groups are recorded. `by_structure`: remember
    the schedule verdict by structure too (False where a set is rarely asked again in
    any shape, as xla's groups growing join by join: making the key costs more than it
    saves)."""

    def __init__(self, graph: Graph, target=None, *, gemms: bool | None = None,
                 staged_bytes: int | None = None, trace=None, by_structure: bool = True):
        if target is not None:
            target = resolve(target)
        self.graph = graph
        self.target = target
        self.gemms = bool(target.gemm_fusing if gemms is None and target is not None
                          else gemms)
        self.staged_bytes = (target.staged_bytes if staged_bytes is None and target is not None
                             else staged_bytes or 0)
        # the target's code generator is asked only where it makes kernels
        self.lowering = target is not None and target.generates_kernels
        self.trace = trace
        self.by_structure = by_structure
        self.position = {n.name: i for i, n in enumerate(graph.nodes)}
        # the one memo: verdicts per op, per node set, and by structure (`structural`:
        # the repeated layers of a graph ask each structural question once)
        self._ops: dict[str, Decision] = {}
        self._groups: dict[frozenset, Decision] = {}
        if trace is not None:
            self.fusible   # refused ops are recorded as the run starts

    @cached_property
    def structural(self) -> StructuralMemo:
        return StructuralMemo(self.graph, self.position)

    @cached_property
    def reach(self) -> Reachability:
        return Reachability(self.graph)

    @cached_property
    def fusible(self) -> set[str]:
        """The ops that `op` allows (inputs are not ops)."""
        out = set()
        for n in self.graph.nodes:
            if n.op in (PARAMETER, CONSTANT):
                continue
            d = self.op(n.name)
            if d:
                out.add(n.name)
            elif self.trace is not None:
                self.trace.op(n.name, d.reason)
        return out

    # -- the questions ---------------------------------------------------------------
    def op(self, name: str) -> Decision:
        """Can op %name be part of a generated kernel on this target?"""
        d = self._ops.get(name)
        if d is None:
            node = self.graph[name]
            d = fusible(self.graph, node, batched_gemms=self.gemms)
            if d and self.lowering and node.op not in SUPPORTED_OPS \
                    and not is_scatter_kernel(self.graph, node):
                d = Decision.forbid(f"the {self.target} code generator has no code "
                                    f"generation rule for {node.op}", "op")
            self._ops[name] = d
        return d

    def group(self, names, *, acyclic: bool = False) -> Decision:
        """Can the nodes `names` be one kernel on this target? `acyclic`: the caller
        knows that no path leaves the set and re-enters it (one span layer), so that
        check is skipped. A single op is judged by `op`: whether it lowers alone is
        code-generation legality's question (it runs through torch if not)."""
        key = names if type(names) is frozenset else frozenset(names)
        d = self._groups.get(key)
        if d is None:
            d = self._decide(names, key, acyclic)
            self._groups[key] = d
            if not d:
                if self.trace is not None:
                    self.trace.rejected[key] = d.reason
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("rejected group of %d ops (%s): %s", len(key),
                              " ".join(sorted(key)[:6]), d.reason)
        return d

    def lowers(self, names) -> Decision:
        """Does the target's code generator make one kernel of `names`
        (`Target.can_lower`, with planning's remembered lowering)? Remembered by
        structure."""
        memo = self.structural
        return memo.verdict(memo.key(names), "can_lower", lambda: self._can_lower(names))

    def kernel(self, names):
        """(verdict, kernel IR): the code generator's kernel of the group `names` (in
        graph order; lowering is target-neutral and remembered per graph), or its
        refusal and None."""
        try:
            return ALLOW, tentative_lower(self.graph, self._ordered(names))
        except Unsupported as e:
            return self._cannot(e), None

    # -- how they are decided ----------------------------------------------------------
    def _decide(self, names, key: frozenset, acyclic: bool) -> Decision:
        fusible_ = self.fusible
        outside = next((n for n in names if n not in fusible_), None)
        if outside is not None:
            return self.op(outside)
        if len(key) > 1:
            alone = next((n for n in names if is_scatter_kernel(self.graph, self.graph[n])),
                         None)
            if alone is not None:
                return Decision.forbid(f"%{alone} ({self.graph[alone].op}) scatters to "
                                       "data-dependent positions: a kernel of its own", "op")
        if not acyclic and self.reach.creates_cycle(list(names)):
            return CYCLE
        if self.by_structure:
            memo = self.structural
            d = memo.verdict(memo.key(key), "schedule", lambda: schedule_verdict(
                self.graph, list(names), self.staged_bytes))
        else:
            d = schedule_verdict(self.graph, list(names), self.staged_bytes)
        if d and self.lowering and len(key) > 1:
            d = self._lowers_planned(key)
        return d

    def _lowers_planned(self, key: frozenset) -> Decision:
        """`lowers` as planning asks it, without lowering where the answer is known:
        pointwise groups of ops with a rule (`op`) lower; independent components lower
        independently (each its own part of the kernel), so each is asked on its own."""
        graph = self.graph
        if not any(graph[n].op in SIMPLE_REDUCTIONS or graph[n].op in FUSIBLE_DOTS
                   for n in key):
            return ALLOW
        comps = components(graph, key)
        if len(comps) > 1:
            for comp in comps:
                d = self.group(comp)
                if not d:
                    return d
            return ALLOW
        return self.lowers(key)

    def _can_lower(self, names) -> Decision:
        why = self.target.can_lower(self.graph, self._ordered(names), tentative_lower)
        return self._cannot(why) if why else ALLOW

    def _cannot(self, why) -> Decision:
        return Decision.forbid(f"the {self.target} code generator cannot lower it: {why}",
                               "lower")

    def _ordered(self, names) -> list[str]:
        return sorted(names, key=self.position.__getitem__)


def fusible(graph: Graph, node: Node, *, batched_gemms: bool = False) -> Decision:
    """Can this op be part of a generated kernel at all (on any target)? The target-free
    part of `Legality.op`."""
    if node.op in (PARAMETER, CONSTANT):
        return Decision.forbid(f"%{node.name} is an input of the plan, not an op", "op")
    d = lookup(node.op)
    if d.fallback:
        return Decision.forbid(f"{node.op} has no lowering; it runs through torch", "op")
    if d.random:
        return Decision.forbid(f"{node.op} draws random numbers; it runs through torch to "
                               "keep eager's RNG stream", "op")
    if node.op in SCATTER_OPS and not one_write_scatter(graph, node) \
            and not is_scatter_kernel(graph, node):   # (those: kernels of their own)
        return Decision.forbid(f"{node.op} scatters to data-dependent positions", "op")
    if d.category == Category.DOT:
        if batched_gemms and node.op in FUSIBLE_DOTS and small_gemm(graph, node):
            return ALLOW
        return Decision.forbid(f"{node.op} is a library call (GEMM); never fused into a "
                               "generated kernel", "op")
    if d.category == Category.LIBRARY:
        return Decision.forbid(f"{node.op} is a library call; never fused", "op")
    if d.category == Category.REDUCE and node.op not in SIMPLE_REDUCTIONS:
        return Decision.forbid(f"{node.op} is a composite reduction kept whole", "op")
    return ALLOW


def small_gemm(graph: Graph, node: Node) -> bool:
    _, m, n, k = dot_dims(graph, node)
    return max(m, n, k) <= MAX_FUSED_GEMM_DIM


def schedule_verdict(graph: Graph, names, staged_bytes: int = 0) -> Decision:
    """One consistent schedule for `names`, or (`staged_bytes` > 0) a staged program
    moving at most that many bytes: the structural part of `Legality.group`."""
    try:
        spaces = group_spaces(graph, names, staged=staged_bytes > 0)
    except Inconsistent as e:
        return Decision.forbid(f"no consistent schedule: {e}", "schedule")
    if any(s.staged for s in spaces):
        from ..analysis.cost import group_bytes
        moved = group_bytes(graph, tuple(names))
        if moved > staged_bytes:
            return Decision.forbid(f"no consistent schedule, and one program running it in "
                                   f"stages would move {moved} bytes, over {staged_bytes}",
                                   "schedule")
    return ALLOW


def staged_limit(target) -> int:
    """Bytes one program may move in a staged kernel on `target` (a Target or its name):
    `Target.staged_bytes`."""
    return resolve(target).staged_bytes


# Planning lowers groups tentatively (the stitch planner's checks, then code-generation
# legality): the same group is tried by both, so the outcome is remembered per (graph
# object, nodes). Private to planning: the kernels that run come from the driver's
# `lower` stage (fusion/lowered.py), never from here.
_TRIED: dict[tuple, tuple] = {}
register_memory_cache(_TRIED.clear)
_TRIED_MAX = 50_000


def tentative_lower(graph, names):
    """The kernel IR of group `names` (lowering is target-neutral), remembered for the
    planning of `graph` (failures re-raised with the same message)."""
    # the knob changes what a conversion to a half type lowers to (lowerings._converted)
    key = (id(graph), tuple(names), elide_half_casts())
    hit = _TRIED.get(key)
    if hit is not None and hit[0] is graph:
        if isinstance(hit[1], Unsupported):
            raise Unsupported(str(hit[1]))
        return hit[1]
    if len(_TRIED) > _TRIED_MAX:
        _TRIED.clear()
    try:
        k = lower_group(graph, tuple(names), "kernel", choose_orders=False)
    except Unsupported as e:
        _TRIED[key] = (graph, e)
        raise
    _TRIED[key] = (graph, k)
    return k
