"""merge: chosen kernel groups merged after the ILP (fusion/merge.py), and staged
single-program groups (a row reduction and a reduction of its results in one kernel)."""
import pytest

from fusionstitch.fusion import stitch
from fusionstitch.fusion.legality import staged_limit
from fusionstitch.fusion.plan import KERNEL
from fusionstitch.fusion.stitch import plan_stitch
from fusionstitch.ir.text import parse

# %a and %e are independent kernels on different span layers (a -> mm -> t is longer than
# e -> mm2); %t depends on %a only through a library call.
ACROSS_LAYERS = parse("""graph across(%x: f32[256,256], %w: f32[256,256], %y: f32[256,256],
                                      %w2: f32[256,256]) {
  %a: f32[256,256] = relu.default(%x)
  %m: f32[256,256] = mm.default(%a, %w)
  %t: f32[256,256] = tanh.default(%m)
  %e: f32[256,256] = exp.default(%y)
  %m2: f32[256,256] = mm.default(%e, %w2)
  return (%t, %m2)
}""")


def loss(rows: int, cols: int):
    """Per-row log-sum-exp, summed to a scalar: a row reduction, then a scalar one."""
    return parse(f"""graph loss(%x: f32[{rows},{cols}]) {{
  %m: f32[{rows},1] = amax.default(%x, [-1], True)
  %s: f32[{rows},{cols}] = sub.Tensor(%x, %m)
  %e: f32[{rows},{cols}] = exp.default(%s)
  %z: f32[{rows},1] = sum.dim_IntList(%e, [-1], True)
  %l: f32[{rows},1] = log.default(%z)
  %t: f32[] = sum.default(%l)
  return (%t)
}}""")


def kernel_groups(plan):
    return [set(g.nodes) for g in plan.groups if g.kind == KERNEL]


def no_merging(monkeypatch):
    monkeypatch.setattr(stitch, "merge_kernels", lambda graph, groups, *a: groups)


@pytest.mark.parametrize("target", ["cuda", "cpu"])
def test_independent_kernels_of_different_layers_share_a_launch(monkeypatch, target):
    plan = plan_stitch(ACROSS_LAYERS, target)
    assert {"a", "e"} in kernel_groups(plan), plan.to_text()
    assert plan.num_kernels == 2
    assert "merging" in dict(plan.stages)
    no_merging(monkeypatch)
    assert plan_stitch(ACROSS_LAYERS, target).num_kernels == 3


def test_merging_never_joins_across_a_library_call():
    plan = plan_stitch(ACROSS_LAYERS, "cuda")
    for g in kernel_groups(plan):
        assert not {"a", "t"} <= g       # a -> mm -> t: one kernel would be a cycle
    plan.validate()


def test_row_then_scalar_reduction_is_one_staged_kernel_on_gpu_targets():
    plan = plan_stitch(loss(128, 10), "cuda")
    assert plan.num_kernels == 1, plan.to_text()
    (g,) = [g for g in plan.groups if g.kind == KERNEL]
    assert g.composition == "block"
    assert "batch[1x" in plan.to_text()


def test_staged_kernels_are_only_for_small_groups():
    big = loss(4096, 1024)          # 16 MiB: one program would take far longer than a launch
    assert plan_stitch(big, "cuda").num_kernels == 2
    assert staged_limit("cuda") < 4096 * 1024 * 4


def test_cpu_has_no_staged_kernels():
    assert staged_limit("cpu") == 0
    assert plan_stitch(loss(128, 10), "cpu").num_kernels == 2
