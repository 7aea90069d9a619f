"""Dominators and post-dominators of the dataflow DAG.

FusionStitching 2019 §5.4 shares shared-memory space between the
intermediates of one kernel along the dominance tree: a buffer whose every
use is dominated by another value's last use may reuse that value's space.
This module gives the on-chip planner that tree.

Node `a` dominates `b` when every path from the graph's inputs to `b` passes
through `a`; it post-dominates `b` when every path from `b` to the graph's
results passes through `a`. Dominance is reflexive. A virtual entry feeds
every node that reads nothing (parameters, constants, creation ops) and a
virtual exit is fed by every output and every sink, so both relations are
defined on every node; a node whose immediate (post-)dominator is the virtual
node maps to None. The idoms come from `networkx.immediate_dominators`, which
implements Cooper, Harvey and Kennedy, "A Simple, Fast Dominance Algorithm"
(2001); on a DAG visited in reverse postorder it converges in one sweep.
"""
from __future__ import annotations

import networkx as nx

from ..ir.graph import Graph

__all__ = ["dominators", "post_dominators", "dominator_tree", "dominates"]


class _Virtual:
    """The virtual entry/exit: not a str, so it never collides with a node name."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<virtual>"


_VIRTUAL = _Virtual()


def _idoms(g: nx.DiGraph, order: list[str]) -> dict[str, str | None]:
    raw = nx.immediate_dominators(g, _VIRTUAL)
    raw.pop(_VIRTUAL, None)  # networkx < 3.5 maps the start to itself
    # every node is reachable from the virtual node, so every name has an entry
    return {n: (None if raw[n] is _VIRTUAL else raw[n]) for n in order}


def dominators(graph: Graph) -> dict[str, str | None]:
    """Immediate dominator of every node, in graph order (None: the virtual entry)."""
    order = [n.name for n in graph.nodes]
    g = nx.DiGraph()
    g.add_node(_VIRTUAL)
    g.add_nodes_from(order)
    for n in graph.nodes:
        ins = dict.fromkeys(n.inputs)
        if not ins:
            g.add_edge(_VIRTUAL, n.name)
        g.add_edges_from((i, n.name) for i in ins)
    return _idoms(g, order)


def post_dominators(graph: Graph) -> dict[str, str | None]:
    """Immediate post-dominator of every node, in graph order (None: the virtual exit).

    Computed as dominators of the reversed graph, whose entry is fed by every
    output and every node no one reads.
    """
    order = [n.name for n in graph.nodes]
    outputs = {r.name for r in graph.output_refs}
    users = graph.users
    g = nx.DiGraph()
    g.add_node(_VIRTUAL)
    g.add_nodes_from(order)
    for name in reversed(order):
        if name in outputs or not users[name]:
            g.add_edge(_VIRTUAL, name)
        g.add_edges_from((u, name) for u in users[name])
    return _idoms(g, order)


def dominator_tree(idom: dict[str, str | None]) -> dict[str, list[str]]:
    """Children of every node in the (post-)dominator tree, in the order of idom's keys.

    Roots (idom None) are the children of the virtual node; they are keys like
    any other node but appear in no list.
    """
    children: dict[str, list[str]] = {n: [] for n in idom}
    for n, parent in idom.items():
        if parent is not None:
            children[parent].append(n)
    return children


def dominates(idom: dict[str, str | None], a: str, b: str) -> bool:
    """Does `a` (post-)dominate `b` under this idom map? Reflexive: a dominates a."""
    if a not in idom or b not in idom:
        missing = a if a not in idom else b
        raise KeyError(f"%{missing} is not in the dominator map")
    v: str | None = b
    while v is not None:
        if v == a:
            return True
        v = idom[v]
    return False
