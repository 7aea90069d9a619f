"""IR text form: golden text, bit-exact round trips, random graphs, speed, errors."""
import math
import struct
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.graph import Graph, Node, Ref, TensorLiteral, TensorType, TupleType
from fusionstitch.ir.text import parse, print_graph
from fusionstitch.ir.verify import verify

GOLDEN = """\
graph forward_0(%arg0: f32[4,8], %arg1: i64[4]) {
  %t: f32[8,4] = permute.default(%arg0, [1, 0])
  %m: (f32[4], i64[4]) = max.dim(%arg0, 1)
  %v: f32[4] = getitem(%m, 0)
  %s: f32[4] = sum.dim_IntList(%t, [0], keepdim=False, dtype=torch.float32)
  %c: f32[2] = constant(value=tensor(f32[2], [1.0, -inf]))
  %e: f32[0,3] = full.default([0, 3], 1.5, dtype=torch.float32, layout=torch.strided, \
device=device("cpu"), pin_memory=False)
  %x.1: f32[4] = add.Tensor(%v, %s, alpha=-2.5e-07)
  return (%x.1, None, 3, -0.0)
}"""


def _same(a, b) -> bool:
    """Type-strict, bit-exact equality of literals (Graph == is looser: 1 == 1.0 == True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, TensorLiteral):
        return (a.value.dtype == b.value.dtype and a.value.shape == b.value.shape
                and a.to_bytes() == b.to_bytes())
    return a == b


def assert_round_trip(g: Graph) -> str:
    text = print_graph(g)
    h = parse(text)
    assert h == g
    assert h.name == g.name and _same(h.outputs, g.outputs)
    for m, n in zip(h.nodes, g.nodes, strict=True):
        assert (m.name, m.op, m.type) == (n.name, n.op, n.type)
        assert _same(m.args, n.args) and _same(m.kwargs, n.kwargs), (m, n)
    assert print_graph(h) == text
    return text


def test_golden_text_parses_and_prints_back():
    g = parse(GOLDEN)
    assert print_graph(g) == GOLDEN == str(g)
    assert [n.name for n in g.params] == ["arg0", "arg1"]
    assert g["x.1"].kwargs == (("alpha", -2.5e-07),)
    assert g["m"].type == TupleType((TensorType((4,), "f32"), TensorType((4,), "i64")))
    assert g.outputs == (Ref("x.1"), None, 3, -0.0) and type(g.outputs[2]) is int
    assert g["e"].kwarg("device") == torch.device("cpu")
    assert g["c"].kwarg("value") == TensorLiteral(torch.tensor([1.0, -math.inf]))
    verify(g)


def test_parse_tolerates_whitespace_and_trailing_commas():
    text = "graph g ( %a : f32 [ 2 ] ) {\n\n %b:(f32[2],)=split.Tensor(%a,2,)\r\n return(%b ,)}\n"
    g = parse(text)
    assert g["b"].type == TupleType((TensorType((2,), "f32"),)) and g.outputs == (Ref("b"),)


def _literal_graph() -> Graph:
    b = GraphBuilder("literals")
    x = b.param((2, 3, 4, 5), "f32", name="x")
    y = b.param((0, 3), "f32", name="y")
    z = b.param((), "f32", name="z")
    i = b.param((4,), "i64", name="i")
    b.op("full.default", [0, 3], 1.5, dtype=torch.float32, layout=torch.strided,
         device=torch.device("cpu"), pin_memory=False)
    b.op("full.default", [2], math.nan, dtype=torch.float16)
    b.op("_to_copy.default", x, dtype=torch.bfloat16, memory_format=torch.preserve_format)
    b.op("clone.default", x, memory_format=torch.channels_last)
    b.op("clone.default", x, memory_format=torch.contiguous_format)
    b.op("gelu.default", x, approximate="tanh")
    b.op("div.Tensor_mode", x, x, rounding_mode="floor")
    b.op("div.Tensor_mode", x, x, rounding_mode=None)
    b.op("clamp.default", x, -math.inf, math.inf)
    b.op("nan_to_num.default", x, nan=0.0, posinf=math.inf, neginf=-math.inf)
    b.op("mul.Scalar", x, -0.0)
    b.op("add.Scalar", x, math.nan)
    b.op("add.Tensor", x, z, alpha=2**62)
    b.op("mul.Scalar", x, 1e-300)
    s0 = b.op("sum.default", z)
    sy = b.op("sum.dim_IntList", y, [0], True)
    m = b.op("max.dim", x, 1, keepdim=True)
    mv = b.getitem(m, 0)
    b.getitem(m, 1)
    grad = b.param((2, 4), "f32", name="grad")
    r = b.param((2, 1), "f32", name="r")
    w = b.param((4,), "f32", name="w")
    ln = b.op("native_layer_norm_backward.default", grad, grad, [4], r, r, w, w,
              [True, False, True])
    assert str(b.types[ln.name]) == "(f32[2,4], None, f32[4])"
    gw = b.getitem(ln, 2)
    parts = b.op("split.Tensor", x, 1)
    b.op("cat.default", [b.getitem(parts, 0), b.getitem(parts, 1)], 0)
    b.op("index.Tensor", x, [None, i])
    b.op("view.default", x, [-1])
    b.op("expand.default", z, [4, 2])
    for k, t in enumerate([
        torch.tensor([1.0, -0.0, math.inf, -math.inf, math.nan, 5e-45]),
        torch.randn(64, 64), torch.randn(3, 7).half(), torch.randn(20).half(),
        torch.tensor([-0.0, math.nan, 1.5]).bfloat16(), torch.randn(5, 5).bfloat16(),
        torch.tensor([[1, -(2**63)], [2**63 - 1, 0]]), torch.arange(40).reshape(2, 20) * -7,
        torch.tensor([True, False]), torch.rand(17) > 0.5, torch.tensor(2.5),
        torch.zeros(0, 4), torch.randn(30, dtype=torch.float64),
        torch.arange(20, dtype=torch.uint8),
        torch.tensor([1 + 2j, -0.5j]), torch.tensor(7, dtype=torch.int8),
    ]):
        b.constant(t, name=f"c{k}")
    return b.build(mv, gw, s0, sy, None, 0, -3, 1.5, -0.0, math.inf, math.nan)


def test_every_literal_kind_round_trips():
    g = _literal_graph()
    text = assert_round_trip(g)
    assert 'memory_format=torch.channels_last' in text and 'approximate="tanh"' in text
    assert "tensor(f32[6], [1.0, -0.0, inf, -inf, nan, 5.605193857299268e-45])" in text
    assert 'tensor(f32[64,64], b64"' in text and "tensor(f32[0,4], [])" in text
    assert "tensor(b8[2], [True, False])" in text and "tensor(f32[], [2.5])" in text
    assert "[None, %i]" in text and "alpha=4611686018427387904" in text
    verify(parse(text))


def test_hand_built_literals_round_trip():
    t = TensorType((2,), "f32")
    weird = 'quote " backslash \\ newline \n tab \t unicode \u00e9 \U0001F600'
    nodes = (
        Node("p", "parameter", type=t),
        Node("a b", "relu.default", (Ref("p"),), type=t),
        Node("q", "parameter", type=t),  # a parameter after the leading run
        Node("r", "parameter", (1,), (("k", "v"),), type=t),  # malformed, printed faithfully
        Node("d", "full.default", ((2,), 0.0), (("device", torch.device("cuda:0")),
                                                ("s", weird), ("nest", ((1, (2.5, None)), ())),
                                                ("f", torch.float64), ("l", torch.sparse_coo)),
             type=t),
        Node("n", "nonzero.default", (Ref("a b"),), type=TupleType(())),
        Node("u", "prims.convert_element_type.default", (Ref("q"), torch.float16),
             type=TensorType((2,), "f16")),
        Node("neg_nan", "add.Scalar", (Ref("p"), -math.nan), type=t),
    )
    g = Graph(nodes, (Ref("a b"), Ref("u")), name="not an identifier")
    text = print_graph(g)
    assert text.startswith('graph "not an identifier"(%p: f32[2]) {\n  %"a b": f32[2] = ')
    assert "  %q: f32[2] = parameter()\n" in text and '%r: f32[2] = parameter(1, k="v")' in text
    assert 'device=device("cuda:0")' in text and "nest=[[1, [2.5, None]], []]" in text
    assert "%n: () = nonzero.default" in text and "-nan" in text
    h = parse(text)
    assert [n.name for n in h.nodes] == [n.name for n in nodes]
    assert _same(h.nodes[-1].args, nodes[-1].args) and h.nodes[:-1] == nodes[:-1]
    assert print_graph(h) == text


def test_complex_scalar_literals_round_trip():
    """A complex Scalar argument (polar's backward multiplies by 1j) prints and parses
    back; its text (the plan cache's key) is exact."""
    t = TensorType((3,), "c64")
    vals = (1j, complex(-0.5, 2.0), complex(math.inf, -0.0), complex(1e-300, -math.inf))
    nodes = (Node("x", "parameter", type=t),) + tuple(
        Node(f"m{k}", "mul.Scalar", (Ref("x" if k == 0 else f"m{k - 1}"), v), type=t)
        for k, v in enumerate(vals))
    g = Graph(nodes, (Ref("m3"),), name="cplx")
    text = assert_round_trip(g)
    assert "mul.Scalar(%x, complex(0.0, 1.0))" in text
    assert "complex(inf, -0.0)" in text and "complex(1e-300, -inf)" in text
    nan = parse(text.replace("complex(0.0, 1.0)", "complex(nan, -nan)"))
    v = nan["m0"].args[1]
    assert type(v) is complex and v.real != v.real and math.copysign(1, v.imag) < 0
    with pytest.raises(ValueError, match="expected complex"):
        parse(text.replace("complex(0.0, 1.0)", "complex(1.0)"))


def test_nan_payloads_and_bits_round_trip():
    f32 = torch.tensor([0x7FC00001, -0x400000, 0x7F800001], dtype=torch.int32).view(torch.float32)
    bf = torch.tensor([0x7FC1, -0x40, 0x0000, -0x8000], dtype=torch.int16).view(torch.bfloat16)
    f16 = torch.tensor([0x7E01, -0x200, 0x0001], dtype=torch.int16).view(torch.float16)
    b = GraphBuilder("nan")
    for t in (f32, bf, f16, torch.tensor([math.nan, -math.nan]).half()):
        b.constant(t)
    g = b.build()
    text = assert_round_trip(g)
    assert "tensor(f16[2], [nan, -nan])" in text  # canonical NaNs keep the short form
    assert 'tensor(f32[3], b64"' in text  # payload NaNs fall back to bytes


@pytest.mark.timing
def test_thirty_thousand_node_chain_is_fast():
    t = TensorType((4, 8), "f32")
    nodes = [Node("x", "parameter", type=t)]
    for k in range(30000):
        nodes.append(Node(f"v{k}", "add.Scalar" if k % 3 else "mul.Tensor",
                          (Ref(nodes[-1].name), 1.5 if k % 3 else Ref("x")),
                          (("alpha", k % 7),) if k % 3 else (), t))
    g = Graph(tuple(nodes), (Ref(nodes[-1].name), None))
    start = time.perf_counter()
    text = print_graph(g)
    h = parse(text)
    elapsed = time.perf_counter() - start
    assert h == g and elapsed < 10, elapsed


@pytest.mark.parametrize("text,where,expected", [
    ("grph g() {\n  return ()\n}", "line 1, column 1", "expected 'graph'"),
    ("graph g(%a: f32[2]) {\n  %b: f32[2] = relu.default(%a\n  return (%b)\n}",
     "line 3, column 3", "expected ',' or ')'"),
    ("graph g() {\n  %b: q32[2] = a()\n  return ()\n}", "line 2, column 7", "expected a type"),
    ("graph g() {\n  %b: f32[-2] = a()\n  return ()\n}", "line 2, column 11", "non-negative"),
    ("graph g() {\n  %b: f32[2] = a(x=1, 2)\n  return ()\n}", "line 2, column 23",
     "positional argument after keyword"),
    ("graph g() {\n  %b: f32[2] = a(@)\n  return ()\n}", "line 2, column 18",
     "unexpected character"),
    ("graph g() {\n  %b: f32[2] = a()\n  %b: f32[2] = a()\n  return ()\n}",
     "line 3, column 3", "duplicate node name %b"),
    ("graph g() {\n  %c: f32[2] = constant(value=tensor(f32[2], [1.0]))\n  return ()\n}",
     "line 2, column 46", "expected 2 elements for f32[2], got 1"),
    ('graph g() {\n  %c: f32[2] = constant(value=tensor(f32[20], b64"AAAA"))\n  return ()\n}',
     "line 2, column 50", "expected 80 bytes of data for f32[20], got 3"),
    ('graph g() {\n  %c: f32[2] = a("unterminated)\n  return ()\n}', "line 2, column 18",
     "bad string literal"),
    ("graph g() {\n  %c: f32[2] = a(torch.nonsense)\n  return ()\n}", "line 2, column 18",
     "expected a value"),
    ("graph g() {\n  return ()\n} extra", "line 3, column 3", "expected end of input"),
    ("graph g() {\n  return (", "line 2, column 11", "got end of input"),
])
def test_parse_errors_name_line_and_column(text, where, expected):
    with pytest.raises(ValueError) as info:
        parse(text)
    msg = str(info.value)
    assert where in msg and expected in msg, msg


# --- random builder graphs --------------------------------------------------------------

_FLOAT = st.floats(allow_nan=True, allow_infinity=True).map(
    lambda v: math.nan if v != v else v)  # NaN literals compare by identity in Node ==
_UNARY = ["relu.default", "exp.default", "neg.default", "abs.default", "sigmoid.default",
          "tanh.default", "sqrt.default"]


def _step(draw, b: GraphBuilder, vals: list[Ref]) -> Ref:
    x = draw(st.sampled_from(vals))
    t = b.types[x.name]
    rank = t.rank
    kind = draw(st.sampled_from(["unary", "scalar", "binary", "reduce", "reshape", "permute",
                                 "unsqueeze", "cast", "max", "constant"]))
    if kind == "unary":
        return b.op(draw(st.sampled_from(_UNARY)), x)
    if kind == "scalar":
        other = draw(st.one_of(_FLOAT, st.integers(-5, 5)))
        return b.op(draw(st.sampled_from(["add.Scalar", "mul.Scalar", "sub.Scalar"])), x, other)
    if kind == "binary":
        same = [v for v in vals if b.types[v.name].shape in (t.shape, ())]
        return b.op("add.Tensor", x, draw(st.sampled_from(same)), alpha=draw(st.integers(-3, 3)))
    if kind == "reduce":
        if rank == 0:
            return b.op("sum.default", x)
        dims = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
        op = draw(st.sampled_from(["sum.dim_IntList", "mean.dim"]))
        return b.op(op, x, dims, draw(st.booleans()),
                    dtype=draw(st.sampled_from([None, torch.float32, torch.float64])))
    if kind == "reshape":
        return b.op("view.default", x, [t.numel] if t.numel else list(reversed(t.shape)))
    if kind == "permute":
        return b.op("permute.default", x, draw(st.permutations(range(rank))))
    if kind == "unsqueeze":
        return b.op("unsqueeze.default", x, draw(st.integers(-rank - 1, rank)))
    if kind == "cast":
        dt = draw(st.sampled_from([torch.float16, torch.bfloat16, torch.float32]))
        return b.op("_to_copy.default", x, dtype=dt)
    if kind == "max" and rank and t.shape[0]:
        return b.getitem(b.op("max.dim", x, 0, draw(st.booleans())), 0)
    values = draw(st.lists(st.floats(width=32), max_size=20))
    dt = draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]))
    return b.constant(torch.tensor(values, dtype=dt))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_builder_graphs_round_trip(data):
    draw = data.draw
    b = GraphBuilder(draw(st.sampled_from(["g", "forward_1", "f.x", "has space"])))
    vals = []
    for _ in range(draw(st.integers(1, 3))):
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        vals.append(b.param(shape, draw(st.sampled_from(["f32", "f16", "bf16", "f64"]))))
    for _ in range(draw(st.integers(1, 12))):
        vals.append(_step(draw, b, vals))
    outs = draw(st.lists(st.one_of(st.sampled_from(vals), st.none(), st.integers(), _FLOAT),
                         max_size=4))
    g = b.build(*outs)
    assert_round_trip(g)
    verify(g)


def test_a_parameter_with_strides_round_trips():
    """An input that is not row-major says its strides (frontend/fx_to_ir): in the body,
    as a keyword of its parameter node."""
    text = ("graph g(%y: f32[2]) {\n  %x: f32[4,8] = parameter(strides=[1, 4])\n"
            "  %a: f32[4,8] = mul.Tensor(%x, 2)\n  return (%a, %y)\n}")
    g = parse(text)
    assert g["x"].kwarg("strides") == (1, 4)
    assert print_graph(g) == text and parse(print_graph(g)) == g
    verify(g)
