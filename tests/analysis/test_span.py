"""span: roots have span 0, span = max(users) + 1; layers hold no dependences."""
from hypothesis import HealthCheck, given, settings

import random_dags
from fusionstitch.analysis.span import layers, span_of
from fusionstitch.ir.graph import Graph, TensorType
from fusionstitch.ir.text import parse

T = TensorType((4,), "f32")
_OPS = {1: "neg.default", 2: "add.Tensor", 3: "addcmul.default"}


def dags(max_nodes=25):
    return random_dags.dags(max_nodes, last_is_output=False)


def test_hand_example():
    g = parse("""graph s(%x: f32[4], %unused: f32[4]) {
  %a: f32[4] = exp.default(%x)
  %b: f32[4] = neg.default(%a)
  %c: f32[4] = add.Tensor(%a, %b)
  %d: f32[4] = relu.default(%x)
  return (%a, %c, %d)
}""")
    # %a is returned but also read: its span comes from its users, not from being an output
    assert span_of(g) == {"x": 3, "unused": 0, "a": 2, "b": 1, "c": 0, "d": 0}
    assert layers(g) == [["x"], ["a"], ["b"], ["unused", "c", "d"]]


def test_empty_graph():
    g = Graph((), ())
    assert span_of(g) == {} and layers(g) == []


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_span_definition_and_layers(graph):
    span = span_of(graph)
    users = graph.users
    assert set(span) == {n.name for n in graph.nodes}
    for name, s in span.items():
        if not users[name]:
            assert s == 0
        else:
            assert s == 1 + max(span[u] for u in users[name])
    ls = layers(graph)
    flat = [n for layer in ls for n in layer]
    assert sorted(flat) == sorted(span) and len(flat) == len(set(flat))
    assert all(ls), "no empty layer"
    where = {n: i for i, layer in enumerate(ls) for n in layer}
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    for layer in ls:
        assert layer == sorted(layer, key=position.__getitem__)  # graph order inside
    for n in graph.nodes:
        for i in n.inputs:
            # producers in strictly earlier layers: nothing inside a layer depends on another
            assert where[i] < where[n.name], (i, n.name)
