"""Verdicts that depend only on a group's structure, remembered per structure.

Whether a set of nodes has one consistent schedule, fits the staged-kernel bound,
lowers to one kernel and stays within the recompute limit depends only on what the
set is: its ops in graph order, their literal arguments, the edges between them,
which values leave the set, every value's type, and the values read from outside
(their types; a constant's value). An unrolled loop or a stack of identical layers
asks the same question once per copy: on the 400-step LSTM the stitch planner's
legality checks asked ~6,300 allowed questions of under 300 structures. Names do not
enter a key; a node is named by its place (members in graph order, then the values
read from outside in order of first use).

Whether a set closes a cycle is not structural (it depends on paths outside the set)
and is never remembered here.

A remembered refusal names nodes of the set it was first decided for; on a hit its
`%name`s are renamed place by place to the asker's nodes. A refusal whose reason names
a node that is not in its set (so cannot be renamed) is not remembered.
"""
from __future__ import annotations

import re

from ..ir.graph import CONSTANT, PARAMETER, Graph, Ref
from .decision import Decision

_NAME = re.compile(r"%([A-Za-z_][A-Za-z0-9_]*)")


def _strict(value, local: dict, outside: dict, order: list):
    """A literal argument as a hashable key: a Ref by its place, 1, 1.0 and True told
    apart, -0.0 from 0.0, NaN equal to itself."""
    if isinstance(value, Ref):
        k = local.get(value.name)
        if k is not None:
            return ("v", k)
        j = outside.get(value.name)
        if j is None:
            j = outside[value.name] = len(order)
            order.append(value.name)
        return ("i", j)
    if isinstance(value, tuple):
        return tuple(_strict(v, local, outside, order) for v in value)
    if isinstance(value, float):
        return (float, value.hex() if value == value else "nan")
    if isinstance(value, (bool, int)):
        return (type(value), value)
    return value   # str, dtype, device, TensorLiteral (equal by value), None


class StructuralMemo:
    """Verdicts of one graph's node sets, keyed by structure (see the module doc). One
    memo serves one graph and one set of legality settings (the caller's)."""

    def __init__(self, graph: Graph, position: dict[str, int] | None = None):
        self.graph = graph
        self.position = position if position is not None else {
            n.name: i for i, n in enumerate(graph.nodes)}
        self.outputs = graph.output_names
        self.users = graph.users
        self._outside: dict[str, tuple] = {}
        # (question, structure) -> (verdict, the nodes it was decided for, placed)
        self._seen: dict[tuple, tuple[Decision, list[str]]] = {}
        self._last = None     # (the set object last keyed, its key)
        self.hits = 0
        self.misses = 0

    def key(self, names) -> tuple[tuple, list[str]]:
        """(the structure of node set `names`, its nodes in the order the key names them).
        Asked again for the same frozenset (one check asks several questions), the last
        answer is returned (only for a frozenset: a list could have changed since)."""
        last = self._last
        if last is not None and last[0] is names:
            return last[1]
        shape = self._key(names)
        if type(names) is frozenset:
            self._last = (names, shape)
        return shape

    def _key(self, names) -> tuple[tuple, list[str]]:
        graph, inside = self.graph, set(names)
        members = sorted(inside, key=self.position.__getitem__)
        local = {m: k for k, m in enumerate(members)}
        outside: dict[str, int] = {}
        order: list[str] = []
        parts = []
        for m in members:
            node = graph[m]
            leaves = m in self.outputs or any(u not in inside for u in self.users[m])
            parts.append((node.op, _strict(node.args, local, outside, order),
                          _strict(tuple(node.kwargs), local, outside, order),
                          node.type, leaves))
        reads = tuple(self._read(n) for n in order)
        return (tuple(parts), reads), members + order

    def _read(self, name: str) -> tuple:
        got = self._outside.get(name)
        if got is None:
            node = self.graph[name]
            if node.op == CONSTANT:   # its value may be inlined into the kernel
                got = (CONSTANT, node.type, _strict(tuple(node.kwargs), {}, {}, []))
            else:
                got = (PARAMETER if node.op == PARAMETER else "value", node.type)
            self._outside[name] = got
        return got

    def verdict(self, shape: tuple, question: str, decide) -> Decision:
        """The verdict of `decide()` on the set whose `key` is `shape`, asked as
        `question` (one memo answers several questions), remembered by structure."""
        key, placed = shape
        hit = self._seen.get((question, key))
        if hit is not None:
            self.hits += 1
            d, first = hit
            if d or first is placed:
                return d
            rename = dict(zip(first, placed))
            return Decision.forbid(_NAME.sub(lambda m: "%" + rename[m.group(1)], d.reason),
                                   d.rule)
        self.misses += 1
        d = decide()
        if d or set(_NAME.findall(d.reason)) <= set(placed):
            self._seen[(question, key)] = (d, placed)
        return d
