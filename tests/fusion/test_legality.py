"""legality: forbidden ops and groups say why; elementwise chains and softmax are allowed."""
import pytest

from fusionstitch.analysis.reach import Reachability
from fusionstitch.fusion.legality import Decision, check_group, fusible
from fusionstitch.ir.text import parse

OPS = parse("""graph ops(%x: f32[4,8], %idx: i64[4,8], %w: f32[8,3]) {
  %mm: f32[4,3] = mm.default(%x, %w)
  %rnd: f32[4,8] = rand_like.default(%x)
  %fft: c64[4,5] = _fft_r2c.default(%x, [1], 0, True)
  %sc: f32[4,8] = scatter_add.default(%x, 1, %idx, %x)
  %x4: f32[1,1,4,8] = view.default(%x, [1, 1, 4, 8])
  %k: f32[1,1,1,1] = full.default([1, 1, 1, 1], 1.0, dtype=torch.float32)
  %conv: f32[1,1,4,8] = convolution.default(%x4, %k, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
  %sm: f32[4,8] = _softmax.default(%x, 1, False)
  %e: f32[4,8] = exp.default(%x)
  return (%mm, %rnd, %fft, %sc, %conv, %sm, %e)
}""")


def _check(graph, names):
    return check_group(graph, names, Reachability(graph))


def test_decision_is_truthy_only_when_allowed():
    assert Decision.allow() and Decision.allow().reason == ""
    d = Decision.forbid("because")
    assert not d and d.reason == "because"


@pytest.mark.parametrize("name,op,word", [
    ("mm", "mm.default", "library"),
    ("rnd", "rand_like.default", "random"),
    ("fft", "_fft_r2c.default", "torch"),
    ("sc", "scatter_add.default", "scatter"),
    ("conv", "convolution.default", "library"),
    ("sm", "_softmax.default", "composite"),
])
def test_forbidden_ops_name_the_op(name, op, word):
    d = fusible(OPS, OPS[name])
    assert not d
    assert op in d.reason and word in d.reason


def test_inputs_are_not_ops():
    d = fusible(OPS, OPS["x"])
    assert not d and "%x" in d.reason
    assert fusible(OPS, OPS["e"])


def test_forbidden_member_forbids_the_group():
    d = _check(OPS, ["e", "rnd"])
    assert not d and "rand_like.default" in d.reason


def test_cycle_creating_group_is_forbidden():
    g = parse("""graph cyc(%x: f32[4,8]) {
  %a: f32[4,8] = exp.default(%x)
  %b: f32[4,8] = neg.default(%a)
  %c: f32[4,8] = add.Tensor(%a, %b)
  return (%c)
}""")
    d = _check(g, ["a", "c"])  # a -> b -> c leaves the group and re-enters it
    assert not d and "cycle" in d.reason
    assert _check(g, ["a", "b", "c"])


def test_row_and_column_reduction_of_one_tensor_is_inconsistent():
    g = parse("""graph rc(%x: f32[16,32]) {
  %e: f32[16,32] = exp.default(%x)
  %r: f32[16] = sum.dim_IntList(%e, [1])
  %c: f32[32] = sum.dim_IntList(%e, [0])
  return (%r, %c)
}""")
    d = _check(g, ["e", "r", "c"])
    assert not d and "no consistent schedule" in d.reason
    assert "%c" in d.reason or "%r" in d.reason
    assert _check(g, ["e", "r"]) and _check(g, ["e", "c"])


def test_elementwise_chain_is_allowed():
    g = parse("""graph ew(%x: f32[4,8], %y: f32[4,8]) {
  %a: f32[4,8] = add.Tensor(%x, %y)
  %b: f32[4,8] = relu.default(%a)
  %c: f32[4,8] = mul.Scalar(%b, 2.0)
  %d: f32[4,8] = tanh.default(%c)
  return (%d)
}""")
    assert _check(g, ["a", "b", "c", "d"])


def test_softmax_is_allowed():
    g = parse("""graph softmax(%x: f32[4,16]) {
  %m: f32[4,1] = amax.default(%x, [-1], True)
  %s: f32[4,16] = sub.Tensor(%x, %m)
  %e: f32[4,16] = exp.default(%s)
  %t: f32[4,1] = sum.dim_IntList(%e, [-1], True)
  %d: f32[4,16] = div.Tensor(%e, %t)
  return (%d)
}""")
    d = _check(g, ["m", "s", "e", "t", "d"])
    assert d, d.reason
