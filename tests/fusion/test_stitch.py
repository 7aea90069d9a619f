"""stitch: kernel counts and compositions of the FusionStitching planner (2019 §4),
the cycle-breaking ILP loop (Figure 3), fuel, determinism and stage timings."""
import pytest

from fusionstitch.fusion import stitch
from fusionstitch.fusion.legality import Legality, staged_limit
from fusionstitch.fusion.plan import KERNEL, LIBRARY, plan_none
from fusionstitch.fusion.stitch import ModelScore, _find_cycle, plan_stitch
from fusionstitch.ir.text import parse
from fusionstitch.targets import resolve

TARGETS = ["cuda", "cpu"]


def softmax(rows: int, cols: int):
    return parse(f"""graph softmax(%x: f32[{rows},{cols}]) {{
  %m: f32[{rows},1] = amax.default(%x, [-1], True)
  %s: f32[{rows},{cols}] = sub.Tensor(%x, %m)
  %e: f32[{rows},{cols}] = exp.default(%s)
  %z: f32[{rows},1] = sum.dim_IntList(%e, [-1], True)
  %d: f32[{rows},{cols}] = div.Tensor(%e, %z)
  return (%d)
}}""")


LAYERNORM = parse("""graph layernorm(%x: f32[16,256], %gamma: f32[256], %beta: f32[256]) {
  %mu: f32[16,1] = mean.dim(%x, [-1], True)
  %d: f32[16,256] = sub.Tensor(%x, %mu)
  %sq: f32[16,256] = mul.Tensor(%d, %d)
  %var: f32[16,1] = mean.dim(%sq, [-1], True)
  %ve: f32[16,1] = add.Scalar(%var, 1e-05)
  %rs: f32[16,1] = rsqrt.default(%ve)
  %n: f32[16,256] = mul.Tensor(%d, %rs)
  %g: f32[16,256] = mul.Tensor(%n, %gamma)
  %y: f32[16,256] = add.Tensor(%g, %beta)
  return (%y)
}""")

# The GEMM is larger than any tile a kernel may compose: it stays a library call.
SPLIT_BY_MM = parse("""graph split_by_mm(%x: f32[256,256], %w: f32[256,256]) {
  %a: f32[256,256] = relu.default(%x)
  %b: f32[256,256] = neg.default(%a)
  %c: f32[256,256] = mm.default(%b, %w)
  %d: f32[256,256] = exp.default(%c)
  %e: f32[256,256] = add.Tensor(%d, %x)
  return (%e)
}""")

# Figure 3 of the paper: A -> B -> C and A -> C with B unfusible; {A, C} is cyclic.
FIGURE_3 = parse("""graph figure3(%x: f32[256,256], %w: f32[256,256]) {
  %A: f32[256,256] = exp.default(%x)
  %B: f32[256,256] = mm.default(%A, %w)
  %C: f32[256,256] = add.Tensor(%A, %B)
  return (%C)
}""")


def crossed(copies: int = 1):
    """Per copy: a row chain {a, r, s} and a column chain {y, c, m}, each legal, that
    read each other's reductions (r -> m, c -> s): together they form a cycle, and all
    six ops cannot be one kernel (a row and a column reduction, too large for one
    program to run them in stages)."""
    params = ", ".join(f"%x{i}: f32[8,65536]" for i in range(copies))
    body, outs = [], []
    for i in range(copies):
        body += [f"  %a{i}: f32[8,65536] = relu.default(%x{i})",
                 f"  %r{i}: f32[8,1] = amax.default(%a{i}, [-1], True)",
                 f"  %y{i}: f32[8,65536] = sigmoid.default(%x{i})",
                 f"  %c{i}: f32[1,65536] = amax.default(%y{i}, [0], True)",
                 f"  %s{i}: f32[8,65536] = sub.Tensor(%a{i}, %c{i})",
                 f"  %m{i}: f32[8,65536] = mul.Tensor(%y{i}, %r{i})"]
        outs += [f"%s{i}", f"%m{i}"]
    return parse(f"graph crossed({params}) {{\n" + "\n".join(body)
                 + f"\n  return ({', '.join(outs)})\n}}")


def row_pattern(i=0):
    return frozenset({f"a{i}", f"r{i}", f"s{i}"})


def column_pattern(i=0):
    return frozenset({f"y{i}", f"c{i}", f"m{i}"})


def multi(plan):
    return [g for g in plan.groups if len(g.nodes) > 1]


def assert_sound(plan):
    plan.validate()
    legality = Legality(plan.graph, gemms=True, staged_bytes=staged_limit("cuda"))
    for g in plan.groups:
        if g.kind == KERNEL and len(g.nodes) > 1:
            d = legality.group(g.nodes)
            assert d, (g, d.reason)


class Call:
    """One ILP call, with chosen and forbidden sets spelled as patterns."""

    def __init__(self, patterns, scores, forbidden, chosen):
        self.patterns, self.scores, self.indices = patterns, scores, chosen
        self.chosen = {patterns[i] for i in chosen}
        self.forbidden = [{patterns[i] for i in f} for f in forbidden]


class SolveSpy:
    """Records every ILP call of a planning run."""

    def __init__(self, monkeypatch):
        self.calls: list[Call] = []
        self._solve = stitch.ilp.solve
        monkeypatch.setattr(stitch.ilp, "solve", self)

    def __call__(self, patterns, scores, forbidden=(), *args, **kwargs):
        sol = self._solve(patterns, scores, forbidden, *args, **kwargs)
        self.calls.append(Call(list(patterns), list(scores), list(forbidden), sol.chosen))
        return sol


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_is_one_warp_kernel(target):
    plan = plan_stitch(softmax(32, 128), target)
    assert_sound(plan)
    assert (plan.num_kernels, plan.num_library_calls) == (1, 0)
    (group,) = plan.groups
    assert group.nodes == ("m", "s", "e", "z", "d")
    assert group.composition == "warp"


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_long_row_is_one_block_kernel(target):
    plan = plan_stitch(softmax(4, 4096), target)
    assert_sound(plan)
    assert plan.num_kernels == 1
    assert plan.groups[0].composition == "block"


@pytest.mark.parametrize("target", TARGETS)
def test_layernorm_forward_is_one_kernel(target):
    plan = plan_stitch(LAYERNORM, target)
    assert_sound(plan)
    assert (plan.num_kernels, plan.num_library_calls) == (1, 0)
    assert len(plan.groups) == 1 and plan.groups[0].composition == "warp"


@pytest.mark.parametrize("target", TARGETS)
def test_elementwise_chain_split_by_mm(target):
    plan = plan_stitch(SPLIT_BY_MM, target)
    assert_sound(plan)
    assert (plan.num_kernels, plan.num_library_calls) == (2, 1)
    assert [(g.nodes, g.kind) for g in plan.groups] == [
        (("a", "b"), KERNEL), (("c",), LIBRARY), (("d", "e"), KERNEL)]
    assert plan.groups[0].composition == plan.groups[2].composition == "thread"


def test_figure3_cyclic_pair_is_never_a_candidate():
    assert not Legality(FIGURE_3).group(["A", "C"])
    plan = plan_stitch(FIGURE_3, "cuda")
    assert_sound(plan)
    assert all(set(g.nodes) != {"A", "C"} for g in plan.groups)


def test_find_cycle_names_the_interleaved_patterns():
    g = crossed()
    legality = Legality(g)
    rows, cols = row_pattern(), column_pattern()
    assert legality.group(rows) and legality.group(cols)
    assert not legality.group(rows | cols)      # a row and a column reduction
    assert _find_cycle(g, [rows]) is None and _find_cycle(g, [cols]) is None
    assert _find_cycle(g, [rows, cols]) == [0, 1]
    # a group on no cycle is not named
    assert _find_cycle(g, [rows, frozenset({"y0", "c0"})]) is None
    assert _find_cycle(crossed(2), [rows, row_pattern(1), cols]) == [0, 2]


def test_cycle_loop_adds_a_constraint_until_acyclic(monkeypatch, caplog):
    g = crossed()
    rows, cols = row_pattern(), column_pattern()
    # disjoint, both positive: the ILP takes both (the planner may add candidates of
    # its own after these, so the checks below speak of patterns, not indices)
    monkeypatch.setattr(stitch, "candidate_patterns", lambda leg, *a, **k: [rows, cols])
    spy = SolveSpy(monkeypatch)
    with caplog.at_level("INFO", logger="fusionstitch.fusion"):
        plan = plan_stitch(g, "cuda")
    assert_sound(plan)
    assert len(spy.calls) == 2
    assert spy.calls[0].forbidden == [] and {rows, cols} <= spy.calls[0].chosen
    assert spy.calls[1].forbidden == [{rows, cols}]
    assert not {rows, cols} <= spy.calls[1].chosen
    assert "cycle" in caplog.text


def test_cycle_loop_on_generated_candidates():
    # the real candidates include both chains of `crossed`; whatever the ILP picks
    # first, the final plan is acyclic and every kernel legal
    for target in TARGETS:
        plan = plan_stitch(crossed(), target)
        assert_sound(plan)
        for grp in plan.groups:
            assert not {"r0", "c0"} <= set(grp.nodes)


def test_cycle_loop_with_several_disjoint_cycles(monkeypatch):
    g = crossed(4)
    hand = [p for i in range(4) for p in (row_pattern(i), column_pattern(i))]
    monkeypatch.setattr(stitch, "candidate_patterns", lambda leg, *a, **k: list(hand))
    spy = SolveSpy(monkeypatch)
    plan = plan_stitch(g, "cuda")
    assert_sound(plan)
    # every independent cycle is constrained in the first round, then the plan is
    # acyclic; each constraint names the two chains of one copy, once
    pairs = [{row_pattern(i), column_pattern(i)} for i in range(4)]
    assert len(spy.calls) == 2
    forbidden = spy.calls[-1].forbidden
    assert forbidden and all(f in pairs for f in forbidden)
    assert len(forbidden) == len({frozenset(f) for f in forbidden}) == 4
    for pair in pairs:
        assert not pair <= spy.calls[-1].chosen


def test_cycle_round_limit_still_gives_an_acyclic_plan(monkeypatch):
    # out of rounds with several cycles left: every one must be broken, not only the
    # last one found (a one-round limit stands for the real one on a large graph)
    monkeypatch.setattr(stitch, "MAX_CYCLE_ROUNDS", 1)
    # the merging stage after the ILP may re-fuse a dropped copy's legal parts; this test
    # is about the ILP stage
    monkeypatch.setattr(stitch, "merge_kernels", lambda graph, groups, *a: groups)
    g = crossed(3)
    hand = [p for i in range(3) for p in (row_pattern(i), column_pattern(i))]
    monkeypatch.setattr(stitch, "candidate_patterns", lambda leg, *a, **k: list(hand))
    spy = SolveSpy(monkeypatch)
    plan = plan_stitch(g, "cuda")
    assert_sound(plan)
    (call,) = spy.calls
    cyclic = [i for i in range(3) if {row_pattern(i), column_pattern(i)} <= call.chosen]
    assert len(cyclic) >= 2, "the one ILP round should leave several cycles"
    for i in cyclic:   # a dropped copy runs unfused
        assert not any(row_pattern(i) <= set(grp.nodes) or column_pattern(i) <= set(grp.nodes)
                       for grp in plan.groups), i


def test_fuel_zero_gives_the_unfused_plan():
    for graph in (softmax(32, 128), LAYERNORM, SPLIT_BY_MM, crossed(2)):
        plan = plan_stitch(graph, "cuda", fuel=0)
        assert_sound(plan)
        none = plan_none(graph)
        assert plan.num_kernels == none.num_kernels
        assert plan.num_library_calls == none.num_library_calls
        assert multi(plan) == []


def test_fuel_one_applies_one_fusion():
    full = plan_stitch(SPLIT_BY_MM, "cuda")
    assert len(multi(full)) == 2
    plan = plan_stitch(SPLIT_BY_MM, "cuda", fuel=1)
    assert_sound(plan)
    (fused,) = multi(plan)
    assert fused.nodes in [g.nodes for g in multi(full)]
    assert plan.num_kernels == plan_none(SPLIT_BY_MM).num_kernels - (len(fused.nodes) - 1)


@pytest.mark.parametrize("graph", [softmax(32, 128), LAYERNORM, SPLIT_BY_MM, crossed(3)],
                         ids=lambda g: g.name)
def test_deterministic(graph):
    first = plan_stitch(graph, "cuda")
    for _ in range(2):
        assert plan_stitch(graph, "cuda").groups == first.groups
    # a re-parsed copy of the graph plans the same
    again = parse(str(graph))
    assert plan_stitch(again, "cuda").groups == first.groups


@pytest.mark.parametrize("target", TARGETS)
def test_ilp_gets_only_positive_scores(monkeypatch, target):
    spy = SolveSpy(monkeypatch)
    graph = crossed(2)
    plan_stitch(graph, target)
    device = resolve(target).device_spec
    score = ModelScore(graph, device)
    assert spy.calls
    for call in spy.calls:
        assert call.patterns and all(s > 0 for s in call.scores)
        for i in call.indices:
            assert call.scores[i] > 0
            assert score(graph, call.patterns[i], device) > 0


def test_fused_kernels_save_time():
    device = resolve("cuda").device_spec
    for graph in (softmax(32, 128), LAYERNORM, SPLIT_BY_MM):
        plan = plan_stitch(graph, "cuda")
        score = ModelScore(graph, device)
        for g in multi(plan):
            assert score(graph, frozenset(g.nodes), device) > 0


def test_stages_are_timed():
    plan = plan_stitch(LAYERNORM, "cuda")
    stages = dict(plan.stages)
    assert {"candidates", "scores", "ilp", "plan"} <= set(stages)
    assert all(isinstance(v, float) and v >= 0 for v in stages.values())
    assert plan.strategy == "stitch"
