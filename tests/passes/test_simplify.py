"""fold_views: reshape and permute chains collapse; identities vanish unless an
output would become a parameter or another output."""
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.graph import Ref
from fusionstitch.passes import fold_views

from helpers_passes import assert_same_results


def _ops(g):
    return [n.op for n in g.ops]


def test_view_of_view_collapses_to_one_view():
    b = GraphBuilder()
    x = b.param((4, 8))
    e = b.op("exp.default", x)
    v = b.op("view.default", b.op("view.default", e, (2, 16)), (32,))
    g = b.build(b.op("neg.default", v))
    out = fold_views(g)
    assert _ops(out) == ["exp.default", "view.default", "neg.default"]
    assert out[v.name].args == (Ref(e.name), (32,))
    assert_same_results(g, out)


def test_mixed_chain_picks_the_folded_op():
    b = GraphBuilder()
    x = b.param((4, 8))
    s = b.op("unsqueeze.default", b.op("_unsafe_view.default", x, (32,)), 0)
    r = b.op("reshape.default", b.op("view.default", x, (8, 4)), (2, 16))
    g = b.build(s, r)
    out = fold_views(g)
    assert out[s.name].op == "_unsafe_view.default" and out[s.name].args[1] == (1, 32)
    # reshape may copy where a view cannot (strided inputs), so it stays a reshape
    assert out[r.name].op == "reshape.default" and out[r.name].args[0] == Ref(x.name)
    assert len(out.ops) == 2
    assert_same_results(g, out)


def test_identity_views_are_removed():
    b = GraphBuilder()
    x = b.param((4, 8))
    e = b.op("exp.default", x)
    i1 = b.op("view.default", e, (4, 8))
    i2 = b.op("expand.default", i1, (4, 8))
    i3 = b.op("squeeze.dim", i2, 0)  # dim 0 has size 4: nothing to squeeze
    back = b.op("view.default", b.op("unsqueeze.default", i3, 0), (4, 8))  # round trip
    g = b.build(b.op("neg.default", back))
    out = fold_views(g)
    assert _ops(out) == ["exp.default", "neg.default"]
    assert_same_results(g, out)


def test_output_view_of_param_is_kept():
    # AOTAutograd expects that output to alias the input, not to be the input.
    b = GraphBuilder()
    x = b.param((4, 8))
    v = b.op("view.default", x, (4, 8))
    a = b.op("alias.default", b.op("view.default", x, (32,)))
    folded = b.op("view.default", a, (4, 8))  # identity of x through a chain
    g = b.build(v, folded)
    out = fold_views(g)
    assert out.outputs == (Ref(v.name), Ref(folded.name))
    assert out[folded.name].args == (Ref(x.name), (4, 8))
    assert len(out.ops) == 2
    assert_same_results(g, out)


def test_output_identity_of_another_output_is_kept_but_intermediate_forwarded():
    b = GraphBuilder()
    x = b.param((4,))
    e = b.op("exp.default", x)
    a1 = b.op("alias.default", e)
    a2 = b.op("alias.default", e)
    g = b.build(a1, a2)
    out = fold_views(g)
    # a1 becomes e itself; a2 must then stay distinct from that output
    assert out.outputs == (Ref(e.name), Ref(a2.name))
    assert_same_results(g, out)


def test_permute_of_permute_composes():
    b = GraphBuilder()
    x = b.param((2, 3, 4))
    p = b.op("permute.default", b.op("permute.default", x, (1, 2, 0)), (0, 2, -2))
    e = b.op("exp.default", x)
    ident = b.op("permute.default", b.op("permute.default", e, (1, 0, 2)), (1, 0, 2))
    g = b.build(b.op("neg.default", p), b.op("neg.default", ident))
    out = fold_views(g)
    assert out[p.name].args == (Ref(x.name), (1, 0, 2))
    assert _ops(out) == ["permute.default", "exp.default", "neg.default", "neg.default"]
    assert_same_results(g, out)


def test_identity_permute_output_of_param_is_kept():
    b = GraphBuilder()
    x = b.param((2, 3))
    t = b.op("permute.default", b.op("permute.default", x, (1, 0)), (1, 0))
    g = b.build(t)
    out = fold_views(g)
    assert out.outputs == (Ref(t.name),) and out[t.name].args == (Ref(x.name), (0, 1))
    assert_same_results(g, out)


def test_zero_pad_is_the_identity_but_a_real_pad_is_kept():
    """constant_pad_nd by zeros copies its input (transformers' "same" padding before a
    1x1 convolution): its readers read the input. A pad that grows or crops stays, and
    an output is not forwarded onto a parameter."""
    b = GraphBuilder()
    x = b.param((2, 3, 4, 5))
    e = b.op("exp.default", x)
    z = b.op("constant_pad_nd.default", e, (0, 0, 0, 0), 0.0)
    grow = b.op("constant_pad_nd.default", e, (1, 0, 0, 2), 0.0)
    crop = b.op("constant_pad_nd.default", e, (0, -1), 0.0)
    kept = b.op("constant_pad_nd.default", x, (0, 0), 0.0)
    g = b.build(b.op("neg.default", z), grow, crop, kept)
    out = fold_views(g)
    assert _ops(out) == ["exp.default", "constant_pad_nd.default",
                         "constant_pad_nd.default", "constant_pad_nd.default",
                         "neg.default"]
    assert out[out.outputs[0].name].args[0] == Ref(e.name)
    assert out[kept.name].args[0] == Ref(x.name)
    assert_same_results(g, out)
