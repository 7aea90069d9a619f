"""constant_fold: small all-constant nodes become constants; random, big and
aliasing nodes stay."""
import torch

from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.ir.graph import CONSTANT
from fusionstitch.passes import MAX_FOLDED_NUMEL, constant_fold, dce

from helpers_passes import assert_same_results


def test_full_plus_add_folds_to_one_constant():
    b = GraphBuilder()
    x = b.param((4, 8))
    f = b.op("full.default", (4, 8), 2.0, dtype=torch.float32, device=torch.device("cpu"))
    c = b.constant(torch.arange(8, dtype=torch.float32))
    s = b.op("add.Tensor", f, c)
    g = b.build(b.op("mul.Tensor", x, s))
    out = dce(constant_fold(g))
    assert [n.op for n in out.ops] == [CONSTANT, "mul.Tensor"]
    assert out[s.name].op == CONSTANT and out[s.name].type == g[s.name].type
    assert torch.equal(out[s.name].kwarg("value").value, torch.arange(8.0).expand(4, 8) + 2)
    assert_same_results(g, out)


def test_creation_on_another_device_folds_on_cpu():
    b = GraphBuilder()
    x = b.param((3,))
    s = b.op("scalar_tensor.default", 1.5, dtype=torch.float32, device=torch.device("meta"))
    g = b.build(b.op("add.Tensor", x, s))
    out = constant_fold(g)
    assert out[s.name].op == CONSTANT
    assert out[s.name].kwarg("value").value.device.type == "cpu"


def test_random_not_folded():
    b = GraphBuilder()
    r = b.op("rand.default", (4,), dtype=torch.float32)
    g = b.build(b.op("exp.default", r))
    assert constant_fold(g) is g


def test_numel_threshold():
    b = GraphBuilder()
    small = b.op("ones.default", (MAX_FOLDED_NUMEL,), dtype=torch.float32)
    big = b.op("ones.default", (MAX_FOLDED_NUMEL + 1,), dtype=torch.float32)
    g = b.build(small, big)
    out = constant_fold(g)
    assert out[small.name].op == CONSTANT and out[big.name].op == "ones.default"


def test_views_tuples_and_param_users_not_folded():
    b = GraphBuilder()
    x = b.param((2, 3))
    c = b.constant(torch.randn(2, 3))
    v = b.op("view.default", c, (6,))  # would alias c
    mx = b.op("max.dim", c, 1)  # tuple result
    y = b.op("add.Tensor", x, c)  # reads a parameter
    g = b.build(v, b.getitem(mx, 0), y)
    assert constant_fold(g) is g


def test_arange_and_chains_fold():
    b = GraphBuilder()
    x = b.param((5,), "i64")
    a = b.op("arange.start", 0, 5)
    sq = b.op("mul.Tensor", a, a)
    g = b.build(b.op("add.Tensor", x, sq))
    out = dce(constant_fold(g))
    assert [n.op for n in out.ops] == [CONSTANT, "add.Tensor"]
    assert_same_results(g, out)
