"""Work/span layering (FusionStitching 2018, §3).

The span of a node is its distance to the graph's end: a node no one reads
(a root) has span 0, every other node max(span of its users) + 1. Nodes of one
span layer have no dependences among themselves, which is what kernel packing
and layer-wise deep fusion rely on.
"""
from __future__ import annotations

from ..ir.graph import Graph


def span_of(graph: Graph) -> dict[str, int]:
    span: dict[str, int] = {}
    users = graph.users
    for node in reversed(graph.nodes):
        us = users[node.name]
        span[node.name] = 1 + max(span[u] for u in us) if us else 0
    return span


def layers(graph: Graph) -> list[list[str]]:
    """Span layers, deepest first (so producers come before consumers)."""
    span = span_of(graph)
    out: list[list[str]] = [[] for _ in range(max(span.values(), default=-1) + 1)]
    for node in graph.nodes:
        out[span[node.name]].append(node.name)
    return out[::-1]
