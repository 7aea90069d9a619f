"""dominance: idoms and post-idoms agree with the definition; trees in graph order."""
import time

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings

import random_dags
from fusionstitch.analysis.dominance import (dominates, dominator_tree, dominators,
                                             post_dominators)
from fusionstitch.ir.graph import PARAMETER, Graph, Node, Ref, TensorType
from fusionstitch.ir.text import parse

T = TensorType((4,), "f32")
_OPS = {1: "neg.default", 2: "add.Tensor", 3: "addcmul.default"}

DIAMOND = parse("""graph diamond(%x: f32[4]) {
  %a: f32[4] = exp.default(%x)
  %b: f32[4] = neg.default(%a)
  %c: f32[4] = relu.default(%a)
  %d: f32[4] = add.Tensor(%b, %c)
  %e: f32[4] = sin.default(%d)
  return (%e)
}""")


def dags(max_nodes=18):
    return random_dags.dags(max_nodes, last_is_output=False)


def _flow(graph: Graph, reverse: bool) -> nx.DiGraph:
    """The dataflow DAG with a virtual 'ENTRY' (or, reversed, 'EXIT' as the source)."""
    g = nx.DiGraph()
    g.add_node("ENTRY")
    outputs = {r.name for r in graph.output_refs}
    for n in graph.nodes:
        g.add_node(n.name)
        for i in n.inputs:
            g.add_edge(n.name, i) if reverse else g.add_edge(i, n.name)
        if reverse and (n.name in outputs or not graph.users[n.name]):
            g.add_edge("ENTRY", n.name)
        if not reverse and not n.inputs:
            g.add_edge("ENTRY", n.name)
    return g


def _brute_dominance(g: nx.DiGraph, names: list[str]) -> dict[str, set[str]]:
    """a -> the nodes a dominates: itself and those unreachable from ENTRY without a."""
    out = {}
    for a in names:
        h = g.copy()
        h.remove_node(a)
        out[a] = {a} | (set(names) - nx.descendants(h, "ENTRY") - {a})
    return out


def _check(graph: Graph, idom: dict, reverse: bool):
    names = [n.name for n in graph.nodes]
    assert list(idom) == names  # every node, in graph order
    dom = _brute_dominance(_flow(graph, reverse), names)
    for a in names:
        for b in names:
            assert dominates(idom, a, b) == (b in dom[a]), (a, b)
    # the idom is the closest strict dominator: every other strict dominator dominates it
    for b, p in idom.items():
        strict = [a for a in names if a != b and b in dom[a]]
        if p is None:
            assert strict == []
        else:
            assert p in strict and all(dominates(idom, a, p) for a in strict)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_dominators_match_definition(graph):
    _check(graph, dominators(graph), reverse=False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_post_dominators_match_definition(graph):
    _check(graph, post_dominators(graph), reverse=True)


def test_diamond():
    idom = dominators(DIAMOND)
    assert idom == {"x": None, "a": "x", "b": "a", "c": "a", "d": "a", "e": "d"}
    pdom = post_dominators(DIAMOND)
    assert pdom == {"x": "a", "a": "d", "b": "d", "c": "d", "d": "e", "e": None}
    assert dominator_tree(idom) == {"x": ["a"], "a": ["b", "c", "d"], "b": [], "c": [],
                                    "d": ["e"], "e": []}
    assert dominates(idom, "a", "e") and not dominates(idom, "b", "d")
    assert dominates(idom, "d", "d")  # reflexive


def test_two_parameters_meet_at_virtual_entry():
    g = parse("""graph two(%x: f32[4], %y: f32[4]) {
  %c: f32[4] = full.default([4], 1.0, dtype=torch.float32)
  %a: f32[4] = add.Tensor(%x, %y)
  %b: f32[4] = mul.Tensor(%a, %c)
  return (%b)
}""")
    idom = dominators(g)
    # %b is reached from %c (a source node) without passing through %a
    assert idom == {"x": None, "y": None, "c": None, "a": None, "b": None}
    assert dominator_tree(idom) == {n: [] for n in "xycab"}


def test_output_that_is_also_read_has_virtual_exit_as_post_dominator():
    g = parse("""graph o(%x: f32[4]) {
  %a: f32[4] = exp.default(%x)
  %b: f32[4] = neg.default(%a)
  return (%a, %b)
}""")
    pdom = post_dominators(g)
    assert pdom == {"x": "a", "a": None, "b": None}
    # without returning %a, %b post-dominates it
    g2 = Graph(g.nodes, (Ref("b"),), "o2")
    assert post_dominators(g2)["a"] == "b"


def test_unused_parameter_is_its_own_sink():
    g = parse("""graph u(%x: f32[4], %unused: f32[4]) {
  %a: f32[4] = exp.default(%x)
  return (%a)
}""")
    assert post_dominators(g) == {"x": "a", "unused": None, "a": None}
    assert dominators(g) == {"x": None, "unused": None, "a": "x"}


def test_tree_children_in_graph_order_and_deterministic():
    g = parse("""graph fan(%x: f32[4]) {
  %z: f32[4] = exp.default(%x)
  %c: f32[4] = neg.default(%z)
  %b: f32[4] = relu.default(%z)
  %a: f32[4] = sin.default(%z)
  return (%a, %b, %c)
}""")
    idom = dominators(g)
    assert dominator_tree(idom)["z"] == ["c", "b", "a"]
    assert dominators(g) == idom and list(dominators(g)) == list(idom)
    assert post_dominators(g) == post_dominators(g)


@pytest.mark.timing
def test_large_chain_is_fast():
    nodes = [Node("p", PARAMETER, type=T)]
    for i in range(30_000):
        prev = "p" if i == 0 else f"v{i - 1}"
        nodes.append(Node(f"v{i}", "add.Tensor", (Ref(prev), Ref(prev)), type=T))
    g = Graph(tuple(nodes), (Ref("v29999"),))
    t0 = time.perf_counter()
    idom = dominators(g)
    pdom = post_dominators(g)
    assert time.perf_counter() - t0 < 5.0
    assert idom["v29999"] == "v29998" and idom["v0"] == "p"
    assert pdom["p"] == "v0" and pdom["v29999"] is None
