"""The IR verifier: a good graph passes, each broken invariant is reported by node."""
import pytest
import torch

from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.graph import Graph, Node, Ref, TensorLiteral, TensorType, TupleType
from fusionstitch.ir.verify import VerifyError, verify, verify_groups

F4 = TensorType((4,), "f32")


def _good() -> Graph:
    b = GraphBuilder("good")
    x = b.param((4, 8), "f32", name="x")
    c = b.constant(torch.ones(8), name="c")
    a = b.op("add.Tensor", x, c, name="a")
    m = b.op("max.dim", a, 1, name="m")
    v = b.getitem(m, 0, name="v")
    i = b.getitem(m, 1, name="i")
    d = b.op("native_dropout.default", v, 0.5, True, name="d")
    s = b.op("sum.dim_IntList", a, [1], name="s")
    r = b.op("add.Tensor", v, s, name="r")
    return b.build(r, b.getitem(d, 0, name="dv"), i, None, 2)


def _with(g: Graph, name: str, **changes) -> Graph:
    return Graph(tuple(n.replace(**changes) if n.name == name else n for n in g.nodes),
                 g.outputs, g.name)


def _raises(g: Graph, *fragments: str, **kw) -> str:
    with pytest.raises(VerifyError) as info:
        verify(g, **kw)
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    for f in ("graph " + g.name,) + fragments:
        assert f in msg, msg
    return msg


def test_good_graph_verifies():
    verify(_good())
    verify(_good(), check_types=False)


def test_use_before_definition():
    g = _good()
    nodes = list(g.nodes)
    k = [n.name for n in nodes].index("s")
    nodes.insert(2, nodes.pop(k))  # %s now comes before %a, which it reads
    _raises(Graph(tuple(nodes), g.outputs, g.name), "%s (sum.dim_IntList)",
            "uses %a before its definition")


def test_self_reference():
    g = _with(_good(), "r", args=(Ref("v"), Ref("r")))
    _raises(g, "%r (add.Tensor)", "uses itself")


def test_undefined_reference_and_missing_output():
    _raises(_with(_good(), "r", args=(Ref("v"), Ref("ghost"))), "%r", "%ghost",
            "not a node of the graph")
    g = _good()
    _raises(Graph(g.nodes, g.outputs + (Ref("nope"),), g.name), "output %nope")
    _raises(Graph(g.nodes, ("text",), g.name), "expected a ref, None, an int or a float")


def test_unknown_op():
    _raises(_with(_good(), "s", op="no_such_op.default"), "%s (no_such_op.default)",
            "unknown op")
    _raises(_with(_good(), "s", op="malformed"), "%s (malformed)", "unknown op")


def test_wrong_type():
    g = _with(_good(), "r", type=TensorType((4,), "f16"))
    _raises(g, "%r (add.Tensor)", "has type f16[4]; expected f32[4]")
    verify(g, check_types=False)
    bad_args = _with(_good(), "s", args=(Ref("a"), (5,)))  # dim 5 of a rank-2 tensor
    _raises(bad_args, "%s (sum.dim_IntList)", "type rule failed")


def test_bad_getitem():
    _raises(_with(_good(), "v", args=(Ref("m"), 2)), "%v (getitem)", "out of range")
    _raises(_with(_good(), "v", args=(Ref("m"), -1)), "%v (getitem)", "out of range")
    _raises(_with(_good(), "v", args=(Ref("a"), 0)), "%v (getitem)", "expected a tuple type")
    _raises(_with(_good(), "v", args=(Ref("m"),)), "%v (getitem)", "getitem(%tuple, index)")
    _raises(_with(_good(), "v", type=TensorType((4,), "i64")), "%v", "expected f32[4]")
    b = GraphBuilder("none_elem")
    grad = b.param((2, 4), "f32")
    r = b.param((2, 1), "f32")
    w = b.param((4,), "f32")
    ln = b.op("native_layer_norm_backward.default", grad, grad, [4], r, r, w, w,
              [True, False, True], name="ln")
    g = b.build(b.getitem(ln, 0))
    bad = Graph(g.nodes + (Node("e", "getitem", (Ref("ln"), 1), type=F4),), g.outputs, g.name)
    _raises(bad, "%e (getitem)", "element 1 of %ln", "is None")


def test_parameter_and_constant_rules():
    _raises(_with(_good(), "x", args=(1,)), "%x (parameter)", "no arguments")
    # a parameter may say its strides (an input that is not row-major), one int per dim
    verify(_with(_good(), "x", kwargs=(("strides", (1, 4)),)))
    for bad in ((("strides", (1,)),), (("strides", (1.0, 4)),), (("strides", (-1, 4)),),
                (("layout", (1, 4)),)):
        _raises(_with(_good(), "x", kwargs=bad), "%x (parameter)", "no arguments")
    _raises(_with(_good(), "c", type=F4), "%c (constant)", "expected f32[8]")
    _raises(_with(_good(), "c", kwargs=(("value", 1.0),)), "%c (constant)", "TensorLiteral")
    _raises(_with(_good(), "c", kwargs=()), "%c (constant)", "TensorLiteral")
    lit = TensorLiteral(torch.ones(8, dtype=torch.float64))
    _raises(_with(_good(), "c", kwargs=(("value", lit),)), "%c (constant)",
            "expected f64[8]")


def test_random_ops_are_not_type_checked():
    g = _with(_good(), "d", type=TupleType((F4, F4)))
    verify(_with(g, "dv", type=F4))


def test_fallback_op_without_meta_kernel_is_skipped():
    b = GraphBuilder("fallback")
    x = b.param((4, 3), "f32", name="x")
    g = b.build()
    nz = Node("nz", "nonzero.default", (x,), type=TensorType((5, 2), "i64"))
    verify(Graph(g.nodes + (nz,), (Ref("nz"),), "fallback"))
    # a table op whose rule fails is reported, since its kernel should exist
    bad = Node("r", "relu.default", (x, x), type=TensorType((4, 3), "f32"))
    _raises(Graph(g.nodes + (bad,), (), "fallback"), "%r (relu.default)", "type rule failed")


def test_verify_groups():
    g = _good()
    ops = [n.name for n in g.nodes if n.op not in ("parameter", "constant")]
    verify_groups(g, [ops[:3], ops[3:]])
    verify_groups(g, [["x", "c"] + ops[:3], ["c"] + ops[3:]])  # sources may repeat
    with pytest.raises(VerifyError, match=r"graph good: node %s \(sum.dim_IntList\): is in no"):
        verify_groups(g, [[n for n in ops if n != "s"]])
    with pytest.raises(VerifyError, match=r"node %a \(add.Tensor\): is in group 0 and group 1"):
        verify_groups(g, [ops, ["a"]])
    with pytest.raises(VerifyError, match=r"group 1 names %zz"):
        verify_groups(g, [ops, ["zz"]])


def test_to_copy_with_device_has_a_type():
    b = GraphBuilder("to_copy")
    x = b.param((4,), "f32")
    verify(b.build(b.op("_to_copy.default", x, dtype=torch.float16,
                        device=torch.device("cpu"))))
