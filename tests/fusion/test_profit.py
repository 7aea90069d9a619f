"""Profitability rules (fusion/profit.py) apart from legality: the recompute limit is a
check of its own that the stitch planner applies after the legality seam
(stitch.StitchChecks), recorded in the plan trace under `profit`."""
from fusionstitch.fusion.legality import Legality
from fusionstitch.fusion.stitch import plan_stitch, stitch_checks
from fusionstitch.fusion.trace import PlanTrace
from fusionstitch.ir.text import parse

# softmax_chain's inference graph (bench zoo, small): a softmax, then a layer norm
CHAIN = parse("""graph chain(%x: f32[2,2,8,8], %m: f32[2,1,1,8], %w: f32[1,2,1,8]) {
  %mul: f32[2,2,8,8] = mul.Tensor(%x, 0.35355339059327373)
  %add: f32[2,2,8,8] = add.Tensor(%mul, %m)
  %amax: f32[2,2,8,1] = amax.default(%add, [-1], True)
  %sub: f32[2,2,8,8] = sub.Tensor(%add, %amax)
  %exp: f32[2,2,8,8] = exp.default(%sub)
  %sum_1: f32[2,2,8,1] = sum.dim_IntList(%exp, [-1], True)
  %div: f32[2,2,8,8] = div.Tensor(%exp, %sum_1)
  %mul_1: f32[2,2,8,8] = mul.Tensor(%div, %w)
  %mul_2: f32[2,2,8,8] = mul.Tensor(%mul_1, 8)
  %mean: f32[2,2,8,1] = mean.dim(%mul_2, [-1], True)
  %sub_1: f32[2,2,8,8] = sub.Tensor(%mul_2, %mean)
  %mul_3: f32[2,2,8,8] = mul.Tensor(%sub_1, %sub_1)
  %mean_1: f32[2,2,8,1] = mean.dim(%mul_3, [-1], True)
  %add_1: f32[2,2,8,1] = add.Tensor(%mean_1, 1e-05)
  %rsqrt: f32[2,2,8,1] = rsqrt.default(%add_1)
  %mul_4: f32[2,2,8,8] = mul.Tensor(%sub_1, %rsqrt)
  %squeeze: f32[2,2,8] = squeeze.dims(%mean, [-1])
  return (%mul_4, %squeeze)
}""")
PAIR = frozenset({"mean", "squeeze"})   # the mean's loop, recomputed for the squeeze


def test_legal_group_refused_by_the_recompute_limit_on_cpu():
    assert Legality(CHAIN, "cpu").group(PAIR)          # legal: one kernel could hold it
    trace = PlanTrace("stitch", "cpu")
    checks = stitch_checks(CHAIN, "cpu", trace)
    assert [r.name for r in checks.rules] == ["recompute"]
    d = checks.check(PAIR)
    assert not d and d.rule == "recompute" and "limit 3.0x" in d.reason
    assert trace.unprofitable[PAIR] == d.reason and PAIR not in trace.rejected
    v = trace.why_apart("mean", "squeeze")
    assert (v.stage, v.reason) == ("profit", d.reason)


def test_no_limit_on_cuda():
    checks = stitch_checks(CHAIN, "cuda")
    assert checks.rules == () and checks.check(PAIR)


def test_the_planner_records_its_profit_refusals():
    plan = plan_stitch(CHAIN, "cpu")
    assert plan.trace.unprofitable
    for key, reason in plan.trace.unprofitable.items():
        assert Legality(CHAIN, "cpu").group(key), sorted(key)
        assert "limit 3.0x" in reason


# an LSTM cell and the concat of its output with the next step's input (the zoo's lstm at
# full size): fused, the concat's branch of the cell's output recomputes every sigmoid
# and tanh of the cell (values are computed where they are read), twice the
# transcendental work: 3.7x Inductor's time, slower than the ops one by one
CELL = parse("""graph cell(%g: f32[32,1024], %c: f32[32,256], %x: f32[32,128]) {
  %split: (f32[32,256], f32[32,256], f32[32,256], f32[32,256]) = split_with_sizes.default(%g, [256, 256, 256, 256], 1)
  %i: f32[32,256] = getitem(%split, 0)
  %f: f32[32,256] = getitem(%split, 1)
  %gg: f32[32,256] = getitem(%split, 2)
  %o: f32[32,256] = getitem(%split, 3)
  %sf: f32[32,256] = sigmoid.default(%f)
  %m1: f32[32,256] = mul.Tensor(%sf, %c)
  %si: f32[32,256] = sigmoid.default(%i)
  %tg: f32[32,256] = tanh.default(%gg)
  %m2: f32[32,256] = mul.Tensor(%si, %tg)
  %c2: f32[32,256] = add.Tensor(%m1, %m2)
  %so: f32[32,256] = sigmoid.default(%o)
  %tc: f32[32,256] = tanh.default(%c2)
  %h: f32[32,256] = mul.Tensor(%so, %tc)
  %cat: f32[32,384] = cat.default([%x, %h], 1)
  return (%c2, %h, %cat)
}""")


def test_recomputing_transcendental_ops_is_held_to_a_tighter_limit():
    names = frozenset(n.name for n in CELL.nodes if n.name not in ("g", "c", "x"))
    checks = stitch_checks(CELL, "cpu", PlanTrace("stitch", "cpu"))
    d = checks.check(names)
    assert not d and d.rule == "recompute" and "transcendental" in d.reason, d
    assert "limit 1.5x" in d.reason
    # the cell alone (no concat) recomputes nothing
    assert checks.check(names - {"cat"})
    # planned, the concat is a kernel of its own (it reads the cell's output from memory)
    plan = plan_stitch(CELL, "cpu")
    cat_group = next(gr for gr in plan.groups if "cat" in gr.nodes)
    assert not {"sf", "si", "tg", "so", "tc"} & set(cat_group.nodes), cat_group.nodes


# gelu (one node, erf inside its lowering) then a row max: nothing is recomputed, but
# counted by name the gelu node had no transcendental op of its own, and the rule read
# the kernel's erf as 8192x recomputation and split the group
GELU_ROWMAX = parse("""graph g(%x: f32[64,128]) {
  %gelu: f32[64,128] = gelu.default(%x)
  %mul: f32[64,128] = mul.Tensor(%gelu, 1.5)
  %amax: f32[64,1] = amax.default(%mul, [-1], True)
  %sub: f32[64,128] = sub.Tensor(%mul, %amax)
  return (%sub)
}""")


def test_a_composite_op_counts_the_transcendental_ops_it_lowers_to():
    names = frozenset({"gelu", "mul", "amax", "sub"})
    checks = stitch_checks(GELU_ROWMAX, "cpu", PlanTrace("stitch", "cpu"))
    d = checks.check(names)
    assert d or "transcendental" not in d.reason, d.reason
