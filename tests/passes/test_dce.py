"""dce: dead chains go, parameters and live nodes stay in their order."""
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes import dce

from helpers_passes import assert_same_results


def test_removes_dead_chain_keeps_unused_params():
    b = GraphBuilder()
    x = b.param((4, 8))
    unused = b.param((3,))
    dead = b.op("exp.default", x)
    b.op("neg.default", dead)  # a dead chain of two
    live = b.op("relu.default", x)
    y = b.op("add.Tensor", live, x)
    g = b.build(y)
    out = dce(g)
    assert [n.name for n in out.nodes] == [x.name, unused.name, live.name, y.name]
    assert out.outputs == g.outputs
    assert_same_results(g, out)


def test_nothing_dead_returns_same_graph():
    b = GraphBuilder()
    x = b.param((2,))
    g = b.build(b.op("exp.default", x), None, 3)
    assert dce(g) is g


def test_dead_random_op_is_kept():
    # Dropping it would shift the RNG stream seen by every later random op.
    b = GraphBuilder()
    x = b.param((4,))
    r = b.op("rand_like.default", x)
    g = b.build(b.op("exp.default", x))
    assert r.name in dce(g)


def test_tuple_node_kept_through_getitem():
    b = GraphBuilder()
    x = b.param((2, 3))
    mx = b.op("max.dim", x, 1)
    vals = b.getitem(mx, 0)
    b.getitem(mx, 1)  # dead
    g = b.build(vals)
    out = dce(g)
    assert [n.name for n in out.nodes] == [x.name, mx.name, vals.name]
    assert_same_results(g, out)
