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
