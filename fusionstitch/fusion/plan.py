"""FusionPlan: disjoint groups of nodes, each run as one kernel, library call, or for free.

A group's kind says how it runs:
- `kernel`: one generated kernel launch (whatever it composes);
- `library`: one call into torch / a vendor library (GEMM, convolution, fallbacks);
- `free`: views and tuple accesses that move no data (no launch).
Parameters and constants belong to no group: they are inputs of the plan.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import CONSTANT, PARAMETER, Graph, Node
from ..ir.ops import Category, lookup

KERNEL, LIBRARY, FREE = "kernel", "library", "free"


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


@dataclass(frozen=True)
class Group:
    """Nodes (in graph order) that run together; `composition` is set by planners."""

    id: int
    nodes: tuple[str, ...]
    kind: str
    composition: str = "single"


@dataclass(frozen=True)
class FusionPlan:
    graph: Graph
    groups: tuple[Group, ...]
    strategy: str

    @property
    def num_kernels(self) -> int:
        return sum(1 for g in self.groups if g.kind == KERNEL)

    @property
    def num_library_calls(self) -> int:
        return sum(1 for g in self.groups if g.kind == LIBRARY)

    @property
    def num_fallback_calls(self) -> int:
        return sum(1 for g in self.groups if g.kind == LIBRARY
                   and any(lookup(self.graph[n].op).fallback for n in g.nodes))

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
            groups.append(Group(len(groups), (node.name,), node_kind(node)))
    return FusionPlan(graph, tuple(groups), "none")
