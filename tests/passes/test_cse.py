"""cse: equal computations merge; random ops and parameters never do."""
import torch

from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.graph import Ref
from fusionstitch.passes import cse

from helpers_passes import assert_same_results, run_graph


def test_merges_duplicate_exp_and_its_users():
    b = GraphBuilder()
    x = b.param((4, 8))
    e1 = b.op("exp.default", x)
    e2 = b.op("exp.default", x)
    s1 = b.op("add.Tensor", e1, x)
    s2 = b.op("add.Tensor", e2, x)  # equal only once e2 became e1
    g = b.build(b.op("mul.Tensor", s1, s2), s2)
    out = cse(g)
    names = [n.name for n in out.nodes]
    assert e2.name not in names and s2.name not in names
    assert out.outputs[1] == Ref(s1.name)  # outputs rewritten, first name kept
    assert_same_results(g, out)


def test_random_ops_not_merged():
    b = GraphBuilder()
    x = b.param((64,))
    r1 = b.op("rand_like.default", x)
    r2 = b.op("rand_like.default", x)
    g = b.build(r1, r2)
    out = cse(g)
    assert out is g
    a, c = run_graph(out, [torch.zeros(64)])
    assert not torch.equal(a, c)


def test_parameters_not_merged():
    b = GraphBuilder()
    x = b.param((4,))
    y = b.param((4,))
    g = b.build(b.op("add.Tensor", x, y))
    assert cse(g) is g


def test_literals_of_different_type_or_sign_not_merged():
    # Python says 2 == 2.0 and 0.0 == -0.0; the ops may still differ.
    b = GraphBuilder()
    x = b.param((4,), "i64")
    a = b.op("mul.Scalar", x, 2)
    c = b.op("mul.Scalar", x, 2.0)
    y = b.param((4,))
    d = b.op("add.Scalar", y, 0.0)
    e = b.op("add.Scalar", y, -0.0)
    g = b.build(a, c, d, e)
    assert len(cse(g)) == len(g)


def test_equal_constants_merge_by_bytes():
    b = GraphBuilder()
    x = b.param((3,))
    c1 = b.constant(torch.tensor([1.0, 2.0, 3.0]))
    c2 = b.constant(torch.tensor([1.0, 2.0, 3.0]))
    c3 = b.constant(torch.tensor([1.0, 2.0, -0.0]))
    c4 = b.constant(torch.tensor([1.0, 2.0, 0.0]))
    g = b.build(b.op("add.Tensor", x, c1), b.op("add.Tensor", x, c2),
                b.op("div.Tensor", x, c3), b.op("div.Tensor", x, c4))
    out = cse(g)
    assert c2.name not in out and c3.name in out and c4.name in out
    assert_same_results(g, out)


def test_deterministic():
    b = GraphBuilder()
    x = b.param((4,))
    g = b.build(*(b.op("sin.default", x) for _ in range(5)))
    assert cse(g) == cse(g)
    assert len(cse(g)) == 2
