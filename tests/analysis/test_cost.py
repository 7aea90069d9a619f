"""cost: device table entries are sourced; kernel time; bytes read/written once."""
import dataclasses

import pytest

from fusionstitch.analysis.cost import DEVICES, DeviceSpec, Measured, group_bytes, plan_bytes
from fusionstitch.fusion.plan import FREE, plan_from_groups, plan_none
from fusionstitch.ir.text import parse

# x: f32[4,8] = 128 B, y: f32[8] = 32 B
G = parse("""graph c(%x: f32[4,8], %y: f32[8]) {
  %a: f32[4,8] = add.Tensor(%x, %x)
  %b: f32[4,8] = mul.Tensor(%a, %y)
  %c: f32[4,8] = exp.default(%b)
  %d: f32[4,8] = neg.default(%b)
  %e: f32[4,8] = sub.Tensor(%c, %d)
  %v: f32[32] = view.default(%e, [32])
  return (%v, %c)
}""")


@pytest.mark.parametrize("target", sorted(DEVICES))
def test_every_device_value_has_a_source(target):
    spec = DEVICES[target]
    assert isinstance(spec, DeviceSpec) and spec.name
    measured = [f for f in dataclasses.fields(spec) if f.name != "name"]
    assert measured, "a device spec with no numbers"
    for f in measured:
        m = getattr(spec, f.name)
        assert isinstance(m, Measured), f.name
        assert m.value > 0, f"{target}.{f.name}"
        assert isinstance(m.source, str) and m.source.strip(), f"{target}.{f.name} has no source"


@pytest.mark.parametrize("target", sorted(DEVICES))
def test_kernel_time_is_latency_plus_max_of_memory_and_compute(target):
    s = DEVICES[target]
    bw, phi, peak = s.bandwidth.value, s.launch_latency.value, s.peak_flops.value
    assert s.kernel_time(0) == pytest.approx(phi)
    nbytes = 1e9
    assert s.kernel_time(nbytes) == pytest.approx(phi + nbytes / bw)  # memory bound
    flops = peak * (nbytes / bw) * 10
    assert s.kernel_time(nbytes, flops) == pytest.approx(phi + flops / peak)  # compute bound
    assert s.kernel_time(nbytes, flops / 100) == pytest.approx(phi + nbytes / bw)
    assert s.memory_time(nbytes) == pytest.approx(nbytes / bw)


def test_group_bytes_reads_and_writes_each_value_once():
    # {a, b}: reads x once although a reads it twice (128) and y (32);
    # writes b once although two outside nodes read it (128); a stays inside.
    assert group_bytes(G, ("a", "b")) == 128 + 32 + 128
    # {c}: reads b (128), writes c, which is both returned and read by e: once (128)
    assert group_bytes(G, ("c",)) == 128 + 128
    # {c, d, e}: reads b once (128), writes c (returned) and e (read by the view): 256
    assert group_bytes(G, ("c", "d", "e")) == 128 + 128 + 128
    # the whole graph reads the parameters and writes the two returned values
    assert group_bytes(G, ("a", "b", "c", "d", "e", "v")) == 128 + 32 + 128 + 128


def test_plan_bytes_sums_groups_and_skips_free_ones():
    plan = plan_none(G)
    free = [g for g in plan.groups if g.kind == FREE]
    assert [g.nodes for g in free] == [("v",)]
    assert plan_bytes(plan) == sum(group_bytes(G, g.nodes) for g in plan.groups
                                   if g.kind != FREE)
    fused = plan_from_groups(G, [("a", "b", "c", "d", "e")], "test")
    # one kernel: reads x, y; writes c (returned) and e (read by the free view)
    assert plan_bytes(fused) == 128 + 32 + 128 + 128
    assert plan_bytes(fused) < plan_bytes(plan)

