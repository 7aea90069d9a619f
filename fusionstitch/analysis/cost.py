"""Cost model, part one: modelled device-memory traffic of a plan.

A kernel or library call reads each distinct value it takes from outside its
group once and writes each value that leaves its group once (read by another
group or returned). Free groups (views, tuple access) move nothing.
"""
from __future__ import annotations

from ..fusion.plan import FREE, FusionPlan
from ..ir.graph import Graph, TensorType, TupleType


def _bytes(t) -> int:
    if isinstance(t, TensorType):
        return t.nbytes
    if isinstance(t, TupleType):
        return t.nbytes
    return 0


def group_bytes(graph: Graph, nodes: tuple[str, ...]) -> int:
    inside = set(nodes)
    outputs = {r.name for r in graph.output_refs}
    read = {i for n in nodes for i in graph[n].inputs if i not in inside}
    written = {n for n in nodes
               if n in outputs or any(u not in inside for u in graph.users[n])}
    return sum(_bytes(graph[i].type) for i in read) + sum(_bytes(graph[n].type) for n in written)


def plan_bytes(plan: FusionPlan) -> int:
    """Modelled bytes moved by every kernel and library call of the plan."""
    return sum(group_bytes(plan.graph, g.nodes) for g in plan.groups if g.kind != FREE)
