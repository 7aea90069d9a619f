"""legality: the one seam (fusion/legality.py). Forbidden ops and groups say why and
name the rule that refused (and the target, where it is the target's code generator);
elementwise chains and softmax are allowed; verdicts are remembered."""
import pytest

from fusionstitch.fusion.legality import Decision, Legality
from fusionstitch.fusion.trace import PlanTrace
from fusionstitch.ir.text import parse

OPS = parse("""graph ops(%x: f32[4,8], %idx: i64[4,8], %w: f32[8,3]) {
  %mm: f32[4,3] = mm.default(%x, %w)
  %rnd: f32[4,8] = rand_like.default(%x)
  %fft: c64[4,5] = _fft_r2c.default(%x, [1], 0, True)
  %sc: f32[4,8] = scatter.src(%x, 1, %idx, %x)
  %x4: f32[1,1,4,8] = view.default(%x, [1, 1, 4, 8])
  %k: f32[1,1,1,1] = full.default([1, 1, 1, 1], 1.0, dtype=torch.float32)
  %conv: f32[1,1,4,8] = convolution.default(%x4, %k, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
  %sm: f32[4,8] = _softmax.default(%x, 1, False)
  %e: f32[4,8] = exp.default(%x)
  %sa: f32[4,8] = scatter_add.default(%x, 1, %idx, %e)
  return (%mm, %rnd, %fft, %sc, %sa, %conv, %sm, %e)
}""")


def _check(graph, names):
    return Legality(graph).group(names)


def test_decision_is_truthy_only_when_allowed():
    assert Decision.allow() and Decision.allow().reason == ""
    d = Decision.forbid("because")
    assert not d and d.reason == "because"


@pytest.mark.parametrize("name,op,word", [
    ("mm", "mm.default", "library"),
    ("rnd", "rand_like.default", "random"),
    ("fft", "_fft_r2c.default", "torch"),
    ("conv", "convolution.default", "library"),
    ("sm", "_softmax.default", "composite"),
])
def test_forbidden_ops_name_the_op(name, op, word):
    d = Legality(OPS).op(name)
    assert not d and d.rule == "op"
    assert op in d.reason and word in d.reason


@pytest.mark.parametrize("name", ["sa", "sc"])    # (sc: scatter.src writing a line's
def test_a_scatter_with_a_kernel_rule_is_a_kernel_of_its_own(name):   # every element)
    leg = Legality(OPS, "cpu")
    assert leg.op(name) and leg.lowers([name])
    d = leg.group(["e", name])
    assert not d and d.rule == "op" and "kernel of its own" in d.reason
    # a target without scatter stores refuses it, naming the reason
    d = Legality(OPS, "interpret").lowers([name])
    assert not d and "data-dependent positions" in d.reason


def test_inputs_are_not_ops():
    d = Legality(OPS).op("x")
    assert not d and "%x" in d.reason
    assert Legality(OPS).op("e")


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
    assert not d and "cycle" in d.reason and d.rule == "cycle"
    assert _check(g, ["a", "b", "c"])


def test_row_and_column_reduction_of_one_tensor_is_inconsistent():
    g = parse("""graph rc(%x: f32[16,32]) {
  %e: f32[16,32] = exp.default(%x)
  %r: f32[16] = sum.dim_IntList(%e, [1])
  %c: f32[32] = sum.dim_IntList(%e, [0])
  return (%r, %c)
}""")
    d = _check(g, ["e", "r", "c"])
    assert not d and "no consistent schedule" in d.reason and d.rule == "schedule"
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


ATAN = parse("""graph at(%x: f32[4,8]) {
  %a: f32[4,8] = erfinv.default(%x)
  %b: f32[4,8] = mul.Tensor(%a, 2.0)
  return (%b)
}""")

COMPLEX_SUM = parse("""graph cs(%x: c64[4,8]) {
  %e: c64[4,8] = neg.default(%x)
  %s: c64[4] = sum.dim_IntList(%e, [1])
  return (%s)
}""")

SMALL_MM = parse("""graph mm(%x: f32[8,8], %w: f32[8,8]) {
  %m: f32[8,8] = mm.default(%x, %w)
  %r: f32[8,8] = relu.default(%m)
  return (%r)
}""")


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_op_without_a_code_generation_rule_is_refused_on_the_target(target):
    d = Legality(ATAN, target).op("a")
    assert not d and d.rule == "op"
    assert target in d.reason and "no code generation rule for erfinv.default" in d.reason
    # the target-free rules (the xla baseline's) know nothing of code generation
    assert Legality(ATAN).op("a")
    assert not Legality(ATAN, target).group(["a", "b"])


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_group_the_target_cannot_lower_is_refused_naming_the_target(target):
    leg = Legality(COMPLEX_SUM, target)
    assert leg.op("e") and leg.op("s")
    d = leg.group(["e", "s"])
    assert not d and d.rule == "lower"
    assert f"the {target} code generator cannot lower it" in d.reason
    assert "c64" in d.reason
    assert leg.lowers(["e", "s"]).reason == d.reason
    assert not leg.kernel(["e", "s"])[0] and leg.kernel(["e", "s"])[1] is None
    # without a target, code generation is not asked
    assert Legality(COMPLEX_SUM).group(["e", "s"])


def test_gemm_in_a_kernel_follows_the_target():
    # cpu's printer has no GEMM stages: a small GEMM is a library call there
    d = Legality(SMALL_MM, "cpu").op("m")
    assert not d and "library call (GEMM)" in d.reason
    assert Legality(SMALL_MM, "cuda").op("m")
    assert Legality(SMALL_MM, "cuda").group(["m", "r"])
    # lowers() is the target's own can_lower, asked of any set (legalize's question)
    d = Legality(SMALL_MM, "cpu").lowers(["m", "r"])
    assert not d and d.rule == "lower" and "cpu code generator has no GEMM stages" in d.reason


def test_verdicts_are_remembered_and_refusals_recorded():
    trace = PlanTrace("stitch", "cpu")
    leg = Legality(ATAN, "cpu", trace=trace)
    assert "erfinv.default" in trace.ops["a"]        # refused ops recorded as the run starts
    assert leg.fusible == {"b"}
    d = leg.group(["a", "b"])
    assert leg.group(frozenset(["b", "a"])) is d
    assert trace.rejected[frozenset(["a", "b"])] == d.reason


def test_settings_default_to_the_target():
    cpu, cuda = Legality(OPS, "cpu"), Legality(OPS, "cuda")
    assert (cpu.gemms, cpu.staged_bytes, cpu.lowering) == (False, 0, True)
    assert cuda.gemms and cuda.staged_bytes > 0 and cuda.lowering
    free = Legality(OPS)
    assert (free.gemms, free.staged_bytes, free.lowering) == (False, 0, False)
    assert not Legality(OPS, "torch").lowering     # generates no kernels
