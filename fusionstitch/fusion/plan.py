"""FusionPlan: disjoint groups of nodes, each run as one kernel, library call, or for free.

A group's kind says how it runs:
- `kernel`: one generated kernel launch (whatever it composes);
- `library`: one call into torch / a vendor library (GEMM, convolution, fallbacks);
- `free`: views and tuple accesses that move no data (no launch).
Parameters and constants belong to no group: they are inputs of the plan.

A kernel group carries its schedule (`Group.schedule`, schedule/propagate.py): the plan's
maker decides it once, for the plan's final groups (`plan_none`, `plan_from_groups`,
code-generation legality's splits, a plan from the plan cache), and lowering reads it
(fusion/lowered.py) instead of deciding again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.graph import CONSTANT, GETITEM, PARAMETER, Graph, Node
from ..ir.ops import FREE, FUSIBLE_DOTS, KERNEL, LIBRARY, LOGICAL_RESHAPES, Category, lookup
from ..schedule.propagate import Inconsistent, Schedule, group_schedule

__all__ = ["KERNEL", "LIBRARY", "FREE", "FusionPlan", "Group", "node_kind", "plan_none",
           "plan_from_groups", "schedule_of"]


def node_kind(node: Node) -> str:
    """How a single node runs when it is alone in a group."""
    d = lookup(node.op)
    if d.is_library:
        return LIBRARY
    if d.view or d.category in (Category.TUPLE, Category.RESHAPE):
        return FREE
    return KERNEL


def is_input(node: Node) -> bool:
    return node.op in (PARAMETER, CONSTANT)


def schedule_of(graph: Graph, names) -> Schedule | None:
    """The schedule of kernel group `names` (`group_schedule`: the function lowering uses
    for a group without a plan), or None when no schedule covers it (lowering refuses
    such a group)."""
    try:
        return group_schedule(graph, names)
    except Inconsistent:
        return None


@dataclass(frozen=True)
class Group:
    """Nodes (in graph order) that run together; `composition` is set by planners.

    `schedule`: a kernel group's schedule as the plan decided it (`schedule_of`), which
    lowering reads; None for library and free groups and for a kernel group that no
    schedule covers."""

    id: int
    nodes: tuple[str, ...]
    kind: str
    composition: str = "single"
    schedule: Schedule | None = None


@dataclass(frozen=True)
class FusionPlan:
    graph: Graph
    groups: tuple[Group, ...]
    strategy: str
    stages: tuple[tuple[str, float], ...] = ()   # planning seconds per stage
    # the planning run's decisions (trace.PlanTrace); None for a plan from the plan cache
    trace: object = field(default=None, compare=False, repr=False)

    def with_stages(self, stages: dict[str, float]) -> "FusionPlan":
        from dataclasses import replace
        return replace(self, stages=tuple(stages.items()))

    @property
    def num_kernels(self) -> int:
        return sum(1 for g in self.groups if g.kind == KERNEL)

    @property
    def num_library_calls(self) -> int:
        return sum(1 for g in self.groups if g.kind == LIBRARY)

    @property
    def num_fallback_calls(self) -> int:
        """Library groups of ops outside the IR (a Program also counts, per target, the
        ops code generation left to torch: runtime/program.num_fallback_groups)."""
        return sum(1 for g in self.groups if g.kind == LIBRARY
                   and any(lookup(self.graph[n].op).fallback for n in g.nodes))

    def to_text(self) -> str:
        """Deterministic, readable text of the plan (dumps, golden tests)."""
        lines = [f"plan {self.strategy} for {self.graph.name}: {self.num_kernels} kernels, "
                 f"{self.num_library_calls} library calls"]
        for g in self.groups:
            space = ""
            if g.kind == KERNEL:   # the schedule the group carries ("?": none)
                space = f" {g.schedule}" if g.schedule is not None else " ?"
            ops = " ".join(f"%{n}={self.graph[n].op}" for n in g.nodes)
            lines.append(f"  #{g.id} {g.kind}/{g.composition}{space}: {ops}")
        return "\n".join(lines) + "\n"

    def group_of(self, name: str) -> Group | None:
        for g in self.groups:
            if name in g.nodes:
                return g
        return None

    def validate(self) -> None:
        """Disjoint, covering, groups in dependency order (so acyclic)."""
        seen: dict[str, int] = {}
        for g in self.groups:
            for n in g.nodes:
                if n in seen:
                    raise ValueError(f"plan: node %{n} is in groups {seen[n]} and {g.id}")
                seen[n] = g.id
        order = {g.id: i for i, g in enumerate(self.groups)}
        for node in self.graph.nodes:
            if is_input(node):
                continue
            if node.name not in seen:
                raise ValueError(f"plan: node %{node.name} ({node.op}) is in no group")
            for i in node.inputs:
                src = seen.get(i)
                if src is not None and order[src] > order[seen[node.name]]:
                    raise ValueError(f"plan: group {seen[node.name]} reads %{i} from the later "
                                     f"group {src}: the groups are not in dependency order")


def plan_none(graph: Graph) -> FusionPlan:
    """The unfused baseline: every op alone in its group."""
    groups = []
    for node in graph.nodes:
        if not is_input(node):
            kind = node_kind(node)
            schedule = schedule_of(graph, (node.name,)) if kind == KERNEL else None
            groups.append(Group(len(groups), (node.name,), kind, schedule=schedule))
    return FusionPlan(graph, tuple(groups), "none")


@dataclass(frozen=True)
class Quotient:
    """The fused graph: groups as units, edges between units that exchange values.

    `units[:k]` are the k given (non-empty) groups in the order given, then one
    singleton unit per remaining op; each unit lists its nodes in graph order.
    """

    units: list[list[str]]
    owner: dict[str, int]
    succ: list[set[int]]
    position: dict[str, int]


def topological_order(succ) -> list[int]:
    """Kahn's order of units 0..len(succ)-1 given their successor sets (a DAG)."""
    indeg = [0] * len(succ)
    for targets in succ:
        for v in targets:
            indeg[v] += 1
    order = [u for u in range(len(succ)) if indeg[u] == 0]
    for u in order:  # `order` grows while we walk it
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    return order


def quotient(graph: Graph, groups) -> Quotient:
    """Collapse disjoint groups of `graph` into units; raises ValueError on overlap."""
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    owner: dict[str, int] = {}
    units: list[list[str]] = []
    for g in groups:
        names = sorted(set(g), key=position.__getitem__)
        if not names:
            continue
        for n in names:
            if n in owner:
                raise ValueError(f"plan: %{n} is in two groups")
            owner[n] = len(units)
        units.append(names)
    for node in graph.nodes:
        if not is_input(node) and node.name not in owner:
            owner[node.name] = len(units)
            units.append([node.name])
    succ: list[set[int]] = [set() for _ in units]
    for node in graph.nodes:
        dst = owner.get(node.name)
        if dst is None:
            continue
        for i in node.inputs:
            src = owner.get(i)
            if src is not None and src != dst:
                succ[src].add(dst)
    return Quotient(units, owner, succ, position)


# a copy whose permuted view leaves its group as a view (detach_views)
LAYOUT_COPY = "clone.default"
PERMUTES = frozenset({"permute.default"})
# library ops whose result comes in its input's memory format (channels-last for a
# channels-last input): a permute of one is the order its memory is in (detach_views)
LAYOUT_FOLLOWING = frozenset({"convolution.default", "convolution_backward.default"})


def _follows_layout(graph: Graph, src: str, names: set) -> bool:
    """`src` is a result from outside the group (`names`) of an op whose result takes
    its input's memory format (a convolution, an element of a convolution's backward)."""
    node = graph[src]
    if node.op == GETITEM and node.inputs:
        node = graph[node.inputs[0]]
    elif src in names:
        return False
    return node.name not in names and node.op in LAYOUT_FOLLOWING


def detach_views(graph: Graph, names) -> frozenset:
    """`names` without the views (reshapes, aliases, expands) a kernel would only copy:

    - a reshape of a value from outside the group: it runs before the kernel, which
      reads the source's memory through it (else a kernel storing the reshape,
      `view(addmm)` saved for the backward, copies it). Only reshapes: they keep a
      contiguous source contiguous, which the kernels' dense versions expect;
    - likewise a permute of a convolution's result from outside the group (or of an
      element of a convolution's backward: the input gradient, and the getitem itself
      when only such views read it): torch returns it in its input's memory format,
      and passes/conv_layout.py permutes a channels-last one to NHWC, the order its
      memory is in. Taken out, the kernel's input is that contiguous NHWC tensor and it
      runs its dense version; inside, the kernel would read the channels-last memory as
      a strided NCHW tensor (the general version: index arithmetic per element, 3-13x
      slower on mobilenet_v2's kernels);
    - a view that only leaves the group while its source leaves it too: the kernel
      would store the same elements twice (AOTAutograd saves `alias(relu(x))` next
      to `relu(x)`); it runs after the kernel, a real view of the stored source.
      So too a permute of a copy (`clone`) made in the group: the copy is there to
      store its value in the permuted order (passes/conv_layout.py hands torch
      channels-last tensors so), which storing the permute would undo. And a permute
      that leaves the group (not a graph output) of a value computed in it: the kernel
      stores the value in its own order, the order it computes it in, and the permute's
      readers read that memory through the permute's strides (a convolution takes it as
      the channels-last tensor it wants: convnext's layer norm over the channels of an
      NHWC value, permuted back to NCHW, stored transposed for a convolution that wanted
      it channels-last).

    Alone, such a view is a free group: a view as eager gives, no data moved."""
    names = set(names)
    if len(names) < 2:
        return frozenset(names)
    outputs = graph.output_names
    changed = True
    while changed:
        changed = False
        for n in sorted(names):
            node = graph[n]
            if node_kind(node) != FREE or not node.inputs:
                continue
            src = node.inputs[0]
            if lookup(node.op).category == Category.TUPLE:
                # an element of a result from outside that only views taken out read
                if src not in names and not any(u in names for u in graph.users[n]) \
                        and n not in outputs:
                    names.discard(n)
                    changed = True
                continue
            if node.op in LOGICAL_RESHAPES and src not in names or (
                    node.op in PERMUTES and _follows_layout(graph, src, names)):
                names.discard(n)
                changed = True
                continue
            if any(u in names for u in graph.users[n]):
                continue
            if src in outputs or any(u not in names and u != n for u in graph.users[src]) \
                    or (graph[src].op == LAYOUT_COPY and node.op in PERMUTES) \
                    or (node.op in PERMUTES and n not in outputs
                        and not lookup(graph[src].op).view):
                names.discard(n)
                changed = True
    return frozenset(names)


def plan_from_groups(graph: Graph, groups, strategy: str, compose=None,
                     trace=None, scheduled: bool = True) -> FusionPlan:
    """A FusionPlan from disjoint node sets; uncovered ops become singleton groups.

    Groups are put in dependency order (ties broken by their first node's
    position, so plans are deterministic). Every kernel group gets its schedule
    (`schedule_of`), and `compose(graph, names, schedule)` labels the multi-op ones from it
    (schedule/compose.py's `composition`; default: "fused"). Raises ValueError on a
    cycle.
    Views a group would store next to their source are taken after it instead
    (`detach_views`), recorded in `trace` (a PlanTrace) when given. `scheduled=False`:
    no schedules and no labels, for a plan whose groups only are read (the stitch
    planner's xla baseline); such a plan is never lowered (lowering refuses a kernel
    group without a schedule).
    """
    kept = [detach_views(graph, g) for g in groups]
    if trace is not None:
        for g, k in zip(groups, kept):
            for n in sorted(set(g) - k):
                trace.record("views", g, f"%{n} ({graph[n].op}) is a view taken out of the "
                             f"kernel: it runs as a free view of its source, which the kernel "
                             f"reads or stores, instead of being copied by the kernel", n)
    groups = kept
    q = quotient(graph, groups)
    members, succ, position = q.units, q.succ, q.position
    # dependency order of groups (Kahn, smallest first position first)
    indeg = [0] * len(members)
    for targets in succ:
        for t in targets:
            indeg[t] += 1
    import heapq
    ready = [(position[m[0]], gi) for gi, m in enumerate(members) if indeg[gi] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, gi = heapq.heappop(ready)
        order.append(gi)
        for s in succ[gi]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, (position[members[s][0]], s))
    if len(order) != len(members):
        raise ValueError("plan: the groups form a cycle")
    out = []
    for gi in order:
        names = tuple(members[gi])
        kinds = {node_kind(graph[n]) for n in names}
        if LIBRARY in kinds and len(names) == 1:
            kind = LIBRARY
        elif LIBRARY in kinds and any(node_kind(graph[n]) == LIBRARY
                                      and graph[n].op not in FUSIBLE_DOTS for n in names):
            raise ValueError(f"plan: a library call is fused with other ops: {names}")
        elif kinds == {FREE}:
            kind = FREE
        else:
            kind = KERNEL
        comp, schedule = "single", None
        if kind == KERNEL and scheduled:
            schedule = schedule_of(graph, names)
            if len(names) > 1:
                comp = compose(graph, names, schedule) if compose else "fused"
        out.append(Group(len(out), names, kind, comp, schedule))
    return FusionPlan(graph, tuple(out), strategy, trace=trace)
