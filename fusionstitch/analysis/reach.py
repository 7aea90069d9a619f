"""Reachability: would grouping these nodes create a cycle?

Grouping a set S into one kernel is cycle-free iff no path leaves S and
re-enters it. Such a path can only pass through nodes whose topological index
lies between S's smallest and largest index, so the search from S's outside
users is bounded to that window (XLA's fusion passes make the same check).
That keeps the check fast on 30,000-node graphs: typical groups are local.

A group that spans most of the graph (an LSTM weight's transpose at the start
and its last use at the end) makes that search walk the whole window, and the
planners ask about such groups hundreds of times. Those queries use ancestor
bitsets instead (XLA's HloReachabilityMap keeps the same map): built once, on
the first wide query, one Python int of n bits per node; a path leaves S and
returns iff some outside successor of a member is an ancestor of a member.
Graphs above MAX_BITSET_NODES (the map is n^2/8 bytes) keep the search.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..ir.graph import Graph


class Reachability:
    # a query whose window (largest member minus smallest outside successor) is wider
    # than this uses the ancestor bitsets; the map is built for graphs up to
    # MAX_BITSET_NODES (30,000 nodes: 112 MB)
    WIDE_WINDOW = 1024
    MAX_BITSET_NODES = 30_000

    def __init__(self, graph: Graph):
        self.graph = graph
        self.index = {n.name: i for i, n in enumerate(graph.nodes)}
        # users as index lists, for a tight inner loop
        self.succ: list[list[int]] = [[] for _ in graph.nodes]
        self.pred: list[list[int]] = [[] for _ in graph.nodes]
        for i, n in enumerate(graph.nodes):
            for src in dict.fromkeys(n.inputs):
                j = self.index[src]
                self.succ[j].append(i)
                self.pred[i].append(j)
        self._ancestors: list[int] | None = None

    def ancestors(self) -> list[int]:
        """Per node, a bitset (Python int) of its strict ancestors' indices."""
        if self._ancestors is None:
            anc: list[int] = []
            for preds in self.pred:
                a = 0
                for j in preds:
                    a |= anc[j] | (1 << j)
                anc.append(a)
            self._ancestors = anc
        return self._ancestors

    def creates_cycle(self, names: Iterable[str]) -> bool:
        """True when some path leaves the set and comes back into it."""
        members = {self.index[n] for n in names}
        return self._escapes_and_returns(members)

    def _escapes_and_returns(self, members: set[int]) -> bool:
        if len(members) < 2:
            return False
        hi = max(members)
        stack = [u for m in members for u in self.succ[m] if u not in members and u < hi]
        if not stack:
            return False
        if (hi - min(stack) > self.WIDE_WINDOW
                and len(self.succ) <= self.MAX_BITSET_NODES):
            return self._escapes_and_returns_bitsets(members, stack)
        seen = set(stack)
        while stack:
            v = stack.pop()
            for u in self.succ[v]:
                if u in members:
                    return True
                if u < hi and u not in seen:
                    seen.add(u)
                    stack.append(u)
        return False

    def _escapes_and_returns_bitsets(self, members: set[int], exits: list[int]) -> bool:
        anc = self.ancestors()
        above = 0
        for m in members:
            above |= anc[m]
        out = 0
        for u in exits:
            out |= 1 << u
        return bool(above & out)

    def reaches(self, src: str, dst: str) -> bool:
        """Is there a path src -> dst (src itself excluded)?"""
        s, d = self.index[src], self.index[dst]
        if s >= d:
            return False
        stack, seen = [s], {s}
        while stack:
            v = stack.pop()
            for u in self.succ[v]:
                if u == d:
                    return True
                if u < d and u not in seen:
                    seen.add(u)
                    stack.append(u)
        return False


def group_cycle(order: list[int], edges: dict[int, set[int]]) -> list[int] | None:
    """A cycle in a graph of groups (ids in `order`, edges id -> successor ids), or None.

    Iterative DFS with colours; returns the groups on one cycle, in order.
    """
    colour = dict.fromkeys(order, 0)  # 0 new, 1 on stack, 2 done
    parent: dict[int, int] = {}
    for root in order:
        if colour[root]:
            continue
        stack = [(root, iter(sorted(edges.get(root, ()))))]
        colour[root] = 1
        while stack:
            v, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[v] = 2
                stack.pop()
                continue
            if colour[nxt] == 1:
                cycle, w = [nxt], v
                while w != nxt:
                    cycle.append(w)
                    w = parent[w]
                return cycle[::-1]
            if colour[nxt] == 0:
                colour[nxt] = 1
                parent[nxt] = v
                stack.append((nxt, iter(sorted(edges.get(nxt, ())))))
    return None
