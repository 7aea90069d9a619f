"""Planners run with the cyclic collector off and leave it as they found it."""
import gc

import pytest

from fusionstitch.fusion.gc_pause import gc_paused
from fusionstitch.fusion.stitch import plan_stitch
from fusionstitch.fusion.xla import plan_xla
from fusionstitch.ir.text import parse

TEXT = """graph g(%x: f32[8,16]) {
  %a: f32[8,16] = exp.default(%x)
  %b: f32[8,16] = mul.Tensor(%a, %x)
  %s: f32[8,1] = sum.dim_IntList(%b, [-1], True)
  return (%s)
}"""

@pytest.mark.parametrize("planner", [plan_xla, plan_stitch])
@pytest.mark.parametrize("enabled", [True, False])
def test_planner_restores_collector_state(planner, enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        planner(parse(TEXT), "cpu")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_collector_off_inside_and_restored_after_an_error():
    seen = []

    @gc_paused
    def boom():
        seen.append(gc.isenabled())
        raise ValueError("x")

    assert gc.isenabled()
    with pytest.raises(ValueError):
        boom()
    assert seen == [False] and gc.isenabled()
