"""Strategy `xla`: the rule-based XLA GPU fusion passes (fusion/xla.py)."""
import contextlib
import logging

import pytest
import torch

import fusionstitch
from bench import workloads
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion import xla
from fusionstitch.fusion.legality import Legality
from fusionstitch.fusion.plan import KERNEL, LIBRARY, plan_none
from fusionstitch.fusion.xla import (HORIZONTAL_MAX_KERNELS, MAX_OPERANDS_AND_OUTPUTS,
                                     Partition, instruction_fusion, plan_xla)
from fusionstitch.ir.ops import Category, category
from fusionstitch.ir.text import parse
from fusionstitch.runtime.program import Program


def kernels(plan):
    return [g for g in plan.groups if g.kind == KERNEL]


def group_of(plan, name):
    (g,) = [g for g in plan.groups if name in g.nodes]
    return g


def random_inputs(graph, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for p in graph.params:
        t = p.type
        if t.dtype in ("f64", "f32", "f16", "bf16"):
            out.append(torch.randn(t.shape, generator=gen).to(t.torch_dtype))
        else:  # indices and masks: zeros are in range for every index op
            out.append(torch.zeros(t.shape, dtype=t.torch_dtype))
    return out


def assert_same_results(graph, plan):
    """The plan runs, and gives what the unfused plan gives."""
    inputs = random_inputs(graph)
    got = Program(plan)(inputs)
    want = Program(plan_none(graph))(inputs)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b) or torch.allclose(a, b, equal_nan=True), graph.name
        else:
            assert a == b


def plan_checked(graph):
    plan = plan_xla(graph, "cuda")
    plan.validate()
    assert_same_results(graph, plan)
    return plan


ELEMENTWISE_CHAIN = """
graph chain(%x: f32[8,16], %y: f32[8,16]) {
  %a: f32[8,16] = add.Tensor(%x, %y)
  %b: f32[8,16] = mul.Tensor(%a, 2.0)
  %v: f32[128] = view.default(%b, [128])
  %c: f32[128] = relu.default(%v)
  %d: f32[128] = exp.default(%c)
  return (%d,)
}
"""

SOFTMAX = """
graph softmax(%x: f32[8,16]) {
  %m: f32[8,1] = amax.default(%x, [-1], True)
  %s: f32[8,16] = sub.Tensor(%x, %m)
  %e: f32[8,16] = exp.default(%s)
  %t: f32[8,1] = sum.dim_IntList(%e, [-1], True)
  %d: f32[8,16] = div.Tensor(%e, %t)
  return (%d,)
}
"""


def test_elementwise_chain_is_one_kernel():
    g = parse(ELEMENTWISE_CHAIN)
    plan = plan_checked(g)
    assert plan.num_kernels == 1
    assert kernels(plan)[0].nodes == ("a", "b", "v", "c", "d")
    assert kernels(plan)[0].composition == "thread"


def test_softmax_keeps_reductions_as_fusion_roots():
    g = parse(SOFTMAX)
    plan = plan_checked(g)
    assert plan.num_kernels > 1, "XLA cannot read a reduction inside its own kernel"
    for red in ("m", "t"):
        grp = group_of(plan, red)
        assert not any(u in grp.nodes for u in g.users[red]), f"%{red} must be a root"
    # input fusion: the elementwise producers of the sum fuse into it
    assert {"s", "e", "t"} <= set(group_of(plan, "t").nodes)
    assert group_of(plan, "d") != group_of(plan, "t")


def test_reduction_consumers_start_a_new_kernel_after_instruction_fusion():
    g = parse(SOFTMAX)
    part = Partition(g)
    instruction_fusion(part)
    # %e is read by the sum and the div (two kernels): it stays apart, %s joins it
    assert sorted(sorted(m) for m in part.groups()) == [["d"], ["e", "s"], ["m"], ["t"]]


def test_illegal_group_is_rebuilt_join_by_join(caplog):
    # the 256-element relu is neither per-element nor per-row in the sum's 8x16 schedule
    g = parse("""
graph sliced(%x: f32[256]) {
  %r: f32[256] = relu.default(%x)
  %s: f32[128] = slice.Tensor(%r, 0, 0, 128)
  %v: f32[8,16] = view.default(%s, [8, 16])
  %t: f32[8] = sum.dim_IntList(%v, [1])
  return (%t,)
}
""")
    assert not Legality(g).group(["r", "s", "v", "t"])
    with caplog.at_level(logging.DEBUG, logger="fusionstitch.fusion"):
        plan = plan_checked(g)
    assert [k.nodes for k in kernels(plan)] == [("r",), ("s", "v", "t")]
    assert any("no consistent schedule" in r.getMessage() for r in caplog.records)


EXPENSIVE_SHARED = """
graph shared(%x: f32[8,16]) {
  %e: f32[8,16] = {op}(%x)
  %r: f32[8] = sum.dim_IntList(%e, [1])
  %c: f32[16] = sum.dim_IntList(%e, [0])
  return (%r, %c)
}
"""


def test_expensive_op_with_two_consumers_is_not_merged(caplog):
    g = parse(EXPENSIVE_SHARED.replace("{op}", "exp.default"))
    part = Partition(g)
    with caplog.at_level(logging.DEBUG, logger="fusionstitch.fusion"):
        instruction_fusion(part)
    assert part.members[part.group_of["e"]] == ["e"], "an expensive op is not duplicated"
    assert any("%e" in r.getMessage() and "expensive" in r.getMessage()
               for r in caplog.records)
    plan = plan_checked(g)
    # the row and column sums cannot share a kernel; %e is computed exactly once, in
    # the kernel of one of them (producer-consumer multi-output), never in both
    assert plan.num_kernels == 2
    assert group_of(plan, "r") != group_of(plan, "c")
    assert sum("e" in k.nodes for k in plan.groups) == 1


def test_cheap_shared_op_is_logged_as_a_duplication_we_cannot_do(caplog):
    g = parse(EXPENSIVE_SHARED.replace("{op}", "neg.default"))
    with caplog.at_level(logging.DEBUG, logger="fusionstitch.fusion"):
        instruction_fusion(Partition(g))
    msgs = [r.getMessage() for r in caplog.records if r.name == "fusionstitch.fusion"]
    assert any("%e" in m and "duplicate" in m for m in msgs)


def test_library_op_is_never_fused():
    b = GraphBuilder("lib")
    x, w = b.param((4, 8)), b.param((8, 8))
    r = b.op("relu.default", x, name="r")
    m = b.op("mm.default", r, w, name="m")
    n = b.op("neg.default", m, name="n")
    s = b.op("sigmoid.default", x, name="s")
    g = b.build(n, s)
    plan = plan_checked(g)
    mm = group_of(plan, "m")
    assert mm.nodes == ("m",) and mm.kind == LIBRARY
    assert plan.num_library_calls == 1


def test_siblings_reading_one_input_are_multi_output_fused():
    g = parse("""
graph siblings(%x: f32[8,16]) {
  %a: f32[8,16] = relu.default(%x)
  %b: f32[8,16] = neg.default(%x)
  %s: f32[8] = sum.dim_IntList(%x, [1])
  %m: f32[8] = amax.default(%x, [1])
  return (%a, %b, %s, %m)
}
""")
    plan = plan_checked(g)
    assert plan.num_kernels == 1, "equal loop shape and equal reductions share one kernel"


def test_siblings_with_different_reductions_stay_apart():
    g = parse("""
graph siblings(%x: f32[8,16]) {
  %s: f32[8] = sum.dim_IntList(%x, [1])
  %c: f32[16] = sum.dim_IntList(%x, [0])
  return (%s, %c)
}
""")
    plan = plan_checked(g)
    assert plan.num_kernels == 2


def test_siblings_with_a_path_between_them_are_not_fused():
    b = GraphBuilder("path")
    x, w = b.param((8, 8)), b.param((8, 8))
    a = b.op("relu.default", x, name="a")
    m = b.op("mm.default", a, w, name="m")
    c = b.op("add.Tensor", x, m, name="c")  # reads x (sibling of a) and, via mm, a
    g = b.build(c, a)
    plan = plan_checked(g)
    assert group_of(plan, "a") != group_of(plan, "c")


def test_producer_also_read_elsewhere_is_multi_output_fused():
    g = parse("""
graph pc(%x: f32[8,16], %y: f32[8,16]) {
  %a: f32[8,16] = add.Tensor(%x, %y)
  %s: f32[8] = sum.dim_IntList(%a, [1])
  return (%s, %a)
}
""")
    plan = plan_checked(g)
    assert plan.num_kernels == 1


def independent_chains(shapes):
    b = GraphBuilder("adam_like")
    params = [(b.param(shape), b.param(shape)) for shape in shapes]  # parameters lead
    outs = []
    for i, (p, m) in enumerate(params):
        t = b.op("mul.Tensor", m, 0.9)
        outs.append(b.op("sub.Tensor", p, t, name=f"out{i}"))
    return b.build(*outs)


def test_independent_small_kernels_are_packed_horizontally():
    g = independent_chains([(4, 8), (16,), (3, 5, 7)])
    plan = plan_checked(g)
    assert plan.num_kernels == 1
    assert kernels(plan)[0].composition == "packing"


def test_horizontal_packing_respects_its_limits():
    n = HORIZONTAL_MAX_KERNELS + 3
    plan = plan_checked(independent_chains([(4, 8)] * n))
    assert plan.num_kernels == 2
    big = (xla.HORIZONTAL_MAX_OUTPUT_ELEMENTS + 1,)
    plan = plan_checked(independent_chains([big, big]))
    assert plan.num_kernels == 2, "large kernels are bandwidth-bound: not packed"


def test_operand_limit_bounds_each_fusion():
    b = GraphBuilder("accumulate")
    ps = [b.param((16,)) for _ in range(150)]
    acc = ps[0]
    for p in ps[1:]:
        acc = b.op("add.Tensor", acc, p)
    g = b.build(acc)
    plan = plan_checked(g)
    assert plan.num_kernels > 1
    for k in kernels(plan):
        inside = set(k.nodes)
        reads = {i for n in k.nodes for i in g[n].inputs if i not in inside}
        assert len(reads) + 1 <= MAX_OPERANDS_AND_OUTPUTS


def test_fuel_zero_plans_unfused():
    g = parse(ELEMENTWISE_CHAIN)
    assert plan_xla(g, "cuda", fuel=0).num_kernels == plan_none(g).num_kernels
    assert plan_xla(g, "cuda", fuel=1).num_kernels == plan_none(g).num_kernels - 1


# --- the model zoo ------------------------------------------------------------------------

def capture(name, size="small", **overrides):
    """Canonicalised IR graphs (forward and backward) of one zoo workload."""
    torch._dynamo.reset()
    inst = workloads.make(name, size, **overrides)
    grad = torch.no_grad() if inst.workload.mode == "inference" else contextlib.nullcontext()
    with grad:
        rep = fusionstitch.explain(inst.fn, *inst.args, strategy="none", target="cpu")
    return [g.plan.graph for g in rep.graphs if g.plan is not None]


@pytest.fixture(scope="module")
def zoo():
    return {name: capture(name) for name in workloads.names()}


def test_zoo_uses_fewer_kernels_than_unfused(zoo):
    for name, graphs in zoo.items():
        assert graphs, name
        none = sum(plan_none(g).num_kernels for g in graphs)
        ours = sum(plan_checked(g).num_kernels for g in graphs)
        assert ours < none, f"{name}: xla {ours} kernels, none {none}"


def test_zoo_kernels_are_legal_and_keep_reductions_as_roots(zoo):
    for graphs in zoo.values():
        for g in graphs:
            legality = Legality(g)
            for k in kernels(plan_xla(g, "cuda")):
                if len(k.nodes) > 1:
                    assert legality.group(k.nodes), (g.name, k.nodes)
                for n in k.nodes:
                    if category(g[n].op) == Category.REDUCE:
                        assert not set(g.users[n]) & set(k.nodes), (g.name, n)


def test_zoo_plans_are_deterministic(zoo):
    for graphs in zoo.values():
        for g in graphs:
            first = plan_xla(g, "cuda")
            again = plan_xla(parse(str(g)), "cuda")
            assert first.groups == again.groups, g.name
