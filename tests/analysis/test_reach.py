"""reach: creates_cycle / reaches agree with networkx brute force; group_cycle; speed."""
import random
import time

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import random_dags
from fusionstitch.analysis.reach import Reachability, group_cycle
from fusionstitch.ir.graph import PARAMETER, Graph, Node, Ref, TensorType

T = TensorType((4,), "f32")
_OPS = {1: "neg.default", 2: "add.Tensor", 3: "addcmul.default"}
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def dags(max_nodes=20):
    return random_dags.dags(max_nodes, last_is_output=True)


def _nx(graph: Graph) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(n.name for n in graph.nodes)
    g.add_edges_from((i, n.name) for n in graph.nodes for i in n.inputs)
    return g


def _contracted_is_dag(g: nx.DiGraph, group: set[str]) -> bool:
    """Brute force: merge the group into one node and test acyclicity."""
    if not group:
        return True
    rep = "GROUP"
    h = nx.DiGraph()
    h.add_nodes_from(rep if v in group else v for v in g.nodes)
    for u, v in g.edges:
        u2, v2 = (rep if u in group else u), (rep if v in group else v)
        if u2 != v2:
            h.add_edge(u2, v2)
    return nx.is_directed_acyclic_graph(h)


@pytest.mark.parametrize("bitsets", [False, True], ids=["search", "bitsets"])
@FAST
@given(data=st.data())
def test_creates_cycle_matches_contraction(bitsets, data):
    graph = data.draw(dags())
    names = [n.name for n in graph.nodes]
    g, reach = _nx(graph), Reachability(graph)
    if bitsets:   # the wide-window path (ancestor bitsets), forced on every query
        reach.WIDE_WINDOW = -1
    for _ in range(5):
        group = data.draw(st.sets(st.sampled_from(names), max_size=len(names)))
        assert reach.creates_cycle(group) == (not _contracted_is_dag(g, group)), sorted(group)


def test_wide_groups_agree_with_the_search():
    """Groups spanning most of a 4,001-node ladder: bitsets and the windowed search agree."""
    graph = _ladder(2_000)
    bits, search = Reachability(graph), Reachability(graph)
    search.MAX_BITSET_NODES = 0
    rng = random.Random(1)
    queries = [["a0", "b1999"], ["a0", "a1", "b0", "b1999"], ["b0", "a1999"], ["a5", "b1999"]]
    for _ in range(200):
        i, j = rng.randrange(0, 100), rng.randrange(1_900, 2_000)
        queries.append([f"{rng.choice('ab')}{i}", f"{rng.choice('ab')}{j}"]
                       + [f"{rng.choice('ab')}{rng.randrange(i, j)}" for _ in range(3)])
    answers = [bits.creates_cycle(q) for q in queries]
    assert bits._ancestors is not None and search._ancestors is None
    assert answers == [search.creates_cycle(q) for q in queries]
    assert answers[:4] == [True, True, False, True] and not all(answers)


@FAST
@given(dags())
def test_reaches_matches_has_path(graph):
    g, reach = _nx(graph), Reachability(graph)
    names = [n.name for n in graph.nodes]
    for a in names:
        assert not reach.reaches(a, a)  # src itself excluded
        for b in names:
            if a != b:
                assert reach.reaches(a, b) == nx.has_path(g, a, b), (a, b)


@FAST
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                         max_size=3 * n))))
def test_group_cycle_finds_real_cycle_or_none(case):
    n, pairs = case
    edges: dict[int, set[int]] = {}
    for u, v in pairs:
        edges.setdefault(u, set()).add(v)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(pairs)
    cycle = group_cycle(list(range(n)), edges)
    if nx.is_directed_acyclic_graph(g):
        assert cycle is None
    else:
        assert cycle is not None and len(set(cycle)) == len(cycle) >= 1
        for u, v in zip(cycle, cycle[1:] + cycle[:1]):
            assert v in edges.get(u, ()), (cycle, u, v)


def test_group_cycle_self_loop_and_deterministic():
    assert group_cycle([0, 1], {0: {0}}) == [0]
    edges = {0: {1}, 1: {2}, 2: {0, 3}, 3: {1}}
    cycle = group_cycle([0, 1, 2, 3], edges)
    assert cycle == group_cycle([0, 1, 2, 3], edges)
    assert cycle in ([0, 1, 2], [1, 2, 0], [2, 0, 1])  # in edge order, any rotation


def _ladder(rungs: int) -> Graph:
    """Two chains a_i, b_i with b_i = f(a_i, b_{i-1}): 2 * rungs + 1 nodes."""
    nodes = [Node("p", PARAMETER, type=T)]
    for i in range(rungs):
        nodes.append(Node(f"a{i}", "neg.default", (Ref("p" if i == 0 else f"a{i - 1}"),),
                          type=T))
        nodes.append(Node(f"b{i}", "add.Tensor",
                          (Ref(f"a{i}"), Ref("p" if i == 0 else f"b{i - 1}")), type=T))
    return Graph(tuple(nodes), (Ref(f"b{rungs - 1}"),))


def test_ladder_small_cases():
    reach = Reachability(_ladder(10))
    assert not reach.creates_cycle(["a3", "a4"])
    assert reach.creates_cycle(["a3", "a5"])           # a3 -> a4 -> a5 leaves and returns
    assert not reach.creates_cycle(["a3", "b3"])
    assert reach.creates_cycle(["a3", "b4"])           # a3 -> a4 -> b4
    assert reach.creates_cycle(["a3", "a4", "b4"])     # a3 -> b3 -> b4
    assert not reach.creates_cycle(["a3", "b3", "a4", "b4"])
    assert not reach.creates_cycle(["a3"])
    assert reach.reaches("a3", "b9") and not reach.reaches("b3", "a4")


@pytest.mark.timing
def test_local_queries_on_30k_nodes_are_fast():
    graph = _ladder(15_000)
    reach = Reachability(graph)
    rng = random.Random(0)
    queries = []
    for _ in range(1000):
        i = rng.randrange(0, 14_990)
        k = rng.randrange(2, 6)
        queries.append([f"{rng.choice('ab')}{i + rng.randrange(0, 8)}" for _ in range(k)])
    t0 = time.perf_counter()
    answers = [reach.creates_cycle(q) for q in queries]
    assert time.perf_counter() - t0 < 2.0
    assert any(answers) and not all(answers)
    # spot-check against the brute force on the local window (paths cannot leave it)
    g = _nx(graph)
    for q in queries[:20]:
        idx = [int(name[1:]) for name in q]
        window = g.subgraph([f"{c}{j}" for c in "ab"
                             for j in range(min(idx), max(idx) + 1)])
        assert reach.creates_cycle(q) == (not _contracted_is_dag(window, set(q))), q
