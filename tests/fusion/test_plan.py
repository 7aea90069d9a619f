"""FusionPlan: groups, kinds, validation."""
import pytest

from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion.plan import FREE, KERNEL, LIBRARY, FusionPlan, Group, plan_none


def small_graph():
    b = GraphBuilder("g")
    x, w = b.param((4, 8)), b.param((8, 8))
    y = b.op("mm.default", x, w, name="y")
    v = b.op("view.default", y, (32,), name="v")
    z = b.op("relu.default", v, name="z")
    return b.build(z)


def test_plan_none_kinds_and_counts():
    plan = plan_none(small_graph())
    kinds = {g.nodes[0]: g.kind for g in plan.groups}
    assert kinds == {"y": LIBRARY, "v": FREE, "z": KERNEL}
    assert (plan.num_kernels, plan.num_library_calls, plan.num_fallback_calls) == (1, 1, 0)
    plan.validate()


def test_validate_rejects_missing_duplicate_and_misordered():
    g = small_graph()
    with pytest.raises(ValueError, match="in no group"):
        FusionPlan(g, (Group(0, ("y",), LIBRARY), Group(1, ("v",), FREE)), "t").validate()
    with pytest.raises(ValueError, match="is in groups"):
        FusionPlan(g, (Group(0, ("y", "v"), KERNEL), Group(1, ("v", "z"), KERNEL)),
                   "t").validate()
    with pytest.raises(ValueError, match="dependency order"):
        FusionPlan(g, (Group(0, ("z",), KERNEL), Group(1, ("y", "v"), KERNEL)), "t").validate()


def test_views_are_not_stored_next_to_their_source():
    from fusionstitch.fusion.plan import detach_views, plan_from_groups
    from fusionstitch.ir.text import parse
    g = parse("""graph saved(%x: f32[8,16], %y: f32[8,16]) {
  %v: f32[128] = view.default(%y, [128])
  %e: f32[128] = exp.default(%v)
  %r: f32[8,16] = relu.default(%x)
  %a: f32[8,16] = alias.default(%r)
  %t: f32[16,8] = permute.default(%r, [1, 0])
  %u: f32[16,8] = neg.default(%t)
  return (%r, %a, %e, %u)
}""")
    # %a only leaves the group while %r leaves it too: a view of the stored %r. %v reshapes
    # an input: the kernel reads %y through it. %t is read inside the group: kept.
    assert detach_views(g, {"v", "e", "r", "a", "t", "u"}) == {"e", "r", "t", "u"}
    plan = plan_from_groups(g, [{"v", "e", "r", "a", "t", "u"}], "test")
    assert [grp.kind for grp in plan.groups if "a" in grp.nodes] == [FREE]
    assert [grp.nodes for grp in plan.groups if grp.kind == KERNEL] == [("e", "r", "t", "u")]


def test_a_permute_leaving_its_group_is_a_view_of_the_stored_value():
    """convnext's layer norm over the channels of an NHWC value, permuted back to NCHW
    for a convolution and a residual add: the kernel stores the value in the order it
    computes it (NHWC rows, stores along memory) and the permute is a view after it (the
    convolution gets the channels-last tensor it wants); a permute read inside the
    group stays, and so does a graph output of the caller's layout when nothing else
    makes the kernel store its source."""
    from fusionstitch.fusion.plan import detach_views
    from fusionstitch.ir.text import parse
    g = parse("""graph ln(%x: f32[2,4,4,8], %w: f32[8]) {
  %m: f32[2,4,4,8] = mul.Tensor(%x, %w)
  %p: f32[2,8,4,4] = permute.default(%m, [0, 3, 1, 2])
  %q: f32[2,8,4,4] = permute.default(%m, [0, 3, 1, 2])
  %s: f32[2,8,4,4] = sigmoid.default(%q)
  %r: f32[2,8,4,4] = relu.default(%p)
  return (%r, %s)
}""")
    assert detach_views(g, {"m", "p", "q", "s"}) == {"m", "q", "s"}
    out = parse("""graph out(%x: f32[2,4,4,8], %w: f32[8]) {
  %m: f32[2,4,4,8] = mul.Tensor(%x, %w)
  %o: f32[2,8,4,4] = permute.default(%m, [0, 3, 1, 2])
  return (%o)
}""")
    assert detach_views(out, {"m", "o"}) == {"m", "o"}
