"""Graph, Node and type basics of fusionstitch.ir.graph."""
import math
import pickle

import pytest
import torch

from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.graph import (DTYPES, Graph, Node, Ref, TensorLiteral, TensorType,
                                   TupleType, dtype_name)


def test_tensor_type_validation():
    with pytest.raises(TypeError, match="unknown dtype"):
        TensorType((2,), "f33")
    with pytest.raises(TypeError, match="non-negative"):
        TensorType((2, -1), "f32")
    with pytest.raises(TypeError, match="non-negative"):
        TensorType((2.0,), "f32")
    with pytest.raises(TypeError, match="no dtype"):
        dtype_name(torch.qint8)
    assert all(dtype_name(v) == k for k, v in DTYPES.items())


@pytest.mark.parametrize("shape,dtype,numel,nbytes", [
    ((4, 8), "f32", 32, 128), ((), "f32", 1, 4), ((0, 3), "f64", 0, 0),
    ((3,), "bf16", 3, 6), ((2, 2), "b8", 4, 4), ((5,), "i64", 5, 40), ((1,), "c128", 1, 16),
])
def test_numel_nbytes(shape, dtype, numel, nbytes):
    t = TensorType(shape, dtype)
    assert (t.numel, t.nbytes, t.rank) == (numel, nbytes, len(shape))
    assert t.torch_dtype == DTYPES[dtype]


def test_type_str_and_of():
    assert str(TensorType((4, 8), "f32")) == "f32[4,8]"
    assert str(TensorType((), "i64")) == "i64[]"
    assert str(TupleType((TensorType((4,), "f32"),))) == "(f32[4],)"
    tt = TupleType((TensorType((4,), "f32"), None, TensorType((2,), "i64")))
    assert str(tt) == "(f32[4], None, i64[2])"
    assert tt.nbytes == 16 + 16
    assert TensorType.of(torch.zeros(2, 3, dtype=torch.float16)) == TensorType((2, 3), "f16")


def _graph() -> Graph:
    b = GraphBuilder("g")
    x = b.param((4, 8), "f32", name="x")
    y = b.param((8,), "f32", name="y")
    a = b.op("add.Tensor", x, y, name="a")
    m = b.op("mul.Tensor", a, x, name="m")
    s = b.op("sum.dim_IntList", m, [1], name="s")
    return b.build(s, None, 2)


def test_graph_lookup_users_params():
    g = _graph()
    assert len(g) == 5 and g["a"].op == "add.Tensor"
    assert "m" in g and "nope" not in g
    with pytest.raises(KeyError):
        g["nope"]
    assert [n.name for n in g.params] == ["x", "y"]
    assert [n.name for n in g.ops] == ["a", "m", "s"]
    assert g.users == {"x": ("a", "m"), "y": ("a",), "a": ("m",), "m": ("s",), "s": ()}
    assert g.output_refs == (Ref("s"),)
    assert g["s"].type == TensorType((4,), "f32")


def test_duplicate_names_rejected():
    t = TensorType((2,), "f32")
    with pytest.raises(ValueError, match="duplicate node name %x"):
        Graph((Node("x", "parameter", type=t), Node("x", "relu.default", (Ref("x"),), type=t)),
              ())


def test_node_requires_a_type():
    with pytest.raises(TypeError, match="%n"):
        Node("n", "relu.default", (Ref("x"),))


def test_pickle_round_trip():
    g = _graph()
    _ = g.users, [n.inputs for n in g.nodes]  # fill the caches: they must not be pickled
    g2 = pickle.loads(pickle.dumps(g))
    assert g2 == g and g2.name == "g"
    assert g2["m"].inputs == ("a", "x") and g2.users == g.users
    assert "inputs" not in g2["m"].__getstate__()


def test_node_inputs_order_and_kwargs():
    t = TensorType((2,), "f32")
    n = Node("n", "cat.default", ((Ref("b"), Ref("a"), Ref("b")), 0),
             (("other", Ref("c")), ("k", (1, (Ref("d"),)))), t)
    assert n.inputs == ("b", "a", "b", "c", "d")
    assert n.kwarg("other") == Ref("c") and n.kwarg("missing", 7) == 7
    n2 = n.replace(name="n2")
    assert n2.name == "n2" and n2.args == n.args and n2 != n


def test_tensor_literal_equality():
    a = TensorLiteral(torch.tensor([1.0, math.nan]))
    assert a == TensorLiteral(torch.tensor([1.0, math.nan]))
    assert a != TensorLiteral(torch.tensor([1.0, 2.0]))
    assert a != TensorLiteral(torch.tensor([1.0, math.nan], dtype=torch.float64))
    assert hash(a) == hash(TensorLiteral(torch.tensor([1.0, math.nan])))
    assert a.type == TensorType((2,), "f32")


# Fixed limitations of graph.py/ops.py, kept as regression tests.
def test_nan_literal_nodes_compare_equal():
    t = TensorType((2,), "f32")
    assert Node("n", "add.Scalar", (Ref("x"), float("nan")), type=t) == \
        Node("n", "add.Scalar", (Ref("x"), float("nan")), type=t)


def test_complex_nan_literal_equals_itself():
    lit = TensorLiteral(torch.tensor([1 + 1j, complex(math.nan, 0)]))
    assert lit == lit
