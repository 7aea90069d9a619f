"""passes/distinct_outputs.py: outputs that were separate tensors stay separate after
canonicalisation (CSE and folding merged them; the Program then returned one tensor for
two, and a training step through `x.half().float()` twice got a wrong gradient)."""
import pytest
import torch

import fusionstitch
from fusionstitch.ir.graph import PARAMETER, Graph, Node, Ref, TensorType
from fusionstitch.passes.distinct_outputs import keep_apart
from fusionstitch.passes.pipeline import canonicalize

pytestmark = pytest.mark.usefixtures("strict_fresh")

T = TensorType((4, 3), "f32")


def _graph(outputs):
    x = Node("x", PARAMETER, (0,), type=T)
    a = Node("a", "sin.default", (Ref("x"),), type=T)
    b = Node("b", "sin.default", (Ref("x"),), type=T)
    v = Node("v", "view.default", (Ref("a"), (12,)), type=TensorType((12,), "f32"))
    return Graph((x, a, b, v), tuple(Ref(o) for o in outputs))


def test_merged_outputs_get_a_clone_and_the_graphs_own_aliases_do_not():
    before = _graph(["a", "b", "v", "a", "x"])
    got = canonicalize(before)              # CSE merges b into a; a clone keeps it apart
    assert keep_apart(before, got) is got
    roots = [o.name for o in got.outputs]
    assert roots[1] != roots[0] and got[roots[1]].op == "clone.default"
    # a view of an output, the same output twice, a parameter: as the graph returned them
    assert got[roots[2]].op == "view.default" and roots[3] == roots[0] and roots[4] == "x"


@pytest.mark.parametrize("fn", [
    lambda x: (x.sin(), x.sin()),
    lambda x: ((x * 2).float(), x * 2),
    lambda x: (x.clone(), x.clone()),
    lambda x: (x * 1, x + 0),
    lambda x: (x.half().float(), x.half().float()),
], ids=["cse", "cast_folded", "clones", "identities", "half_round_trips"])
def test_separate_outputs_are_separate_tensors(fn):
    x = torch.randn(4, 3)
    outs = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))(x)
    ptrs = [o.untyped_storage().data_ptr() for o in outs]
    assert len(set(ptrs)) == len(ptrs) and x.untyped_storage().data_ptr() not in ptrs
    outs[0].add_(1)                         # eager's outputs are independent
    torch.testing.assert_close(outs[1], fn(x)[1])


def test_the_gradient_through_two_half_round_trips_is_eagers():
    """The dynamic fuzzer's program: the backward got other tangents for the two merged
    outputs (a wrong gradient in 3000 of 4096 elements)."""
    def f(a):
        return a.to(torch.float16).to(a.dtype), a.to(torch.float16).to(a.dtype)
    a = torch.rand(16, 16, 16, requires_grad=True)
    g0, g1 = torch.randn(16, 16, 16), torch.randn(16, 16, 16)
    torch.autograd.backward(torch.compile(f, backend=fusionstitch.backend(target="cpu"))(a),
                            [g0, g1])
    got, a.grad = a.grad, None
    torch.autograd.backward(f(a), [g0, g1])
    assert torch.equal(got, a.grad)
