"""Program: runs a plan group by group, counts launches, keeps eager semantics."""
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion import make_plan
from fusionstitch.fusion.plan import plan_none
from fusionstitch.ir.text import parse
from fusionstitch.runtime.program import Program

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])


def test_program_runs_counts_and_returns_views():
    b = GraphBuilder("g")
    x = b.param((4, 8))
    c = b.constant(torch.full((8,), 2.0))
    m = b.op("mul.Tensor", x, c)
    t = b.op("permute.default", x, (1, 0))
    mx = b.op("max.dim", m, 1)
    vals = b.getitem(mx, 0)
    g = b.build(vals, t, None, 3)
    prog = Program(plan_none(g))
    inp = torch.randn(4, 8)
    fusionstitch.reset_stats()
    out = prog([inp])
    assert torch.equal(out[0], (inp * 2).max(1).values)
    assert out[1]._base is inp, "a view output stays a real view (AOTAutograd relies on it)"
    assert out[2] is None and out[3] == 3
    assert fusionstitch.stats()["kernels_launched"] == prog.num_kernels == 2
    assert not inp.requires_grad


def test_program_drops_dead_intermediates():
    b = GraphBuilder("g")
    x = b.param((16,))
    a = b.op("exp.default", x)
    bb = b.op("neg.default", a)
    c = b.op("sin.default", bb)
    prog = Program(plan_none(b.build(c)))
    # each intermediate is freed right after its last reader
    freed = {slot for _, ops in prog.steps for *_, dead in ops for slot in dead}
    assert freed == {1, 2}


def test_values_live_until_their_last_reader_in_execution_order():
    """Fused groups may run ops in another order than the graph lists them."""
    from fusionstitch.fusion.plan import plan_from_groups
    b = GraphBuilder("g")
    x = b.param((4,))
    a = b.op("exp.default", x, name="a")
    c = b.op("neg.default", a, name="c")      # reads a; grouped with d, so runs after e
    e = b.op("sin.default", a, name="e")      # a's last reader in graph order
    d = b.op("mul.Tensor", c, e, name="d")
    g = b.build(d)
    plan = plan_from_groups(g, [["c", "d"], ["e"]], "test")
    assert [grp.nodes for grp in plan.groups] == [("a",), ("e",), ("c", "d")]
    out = Program(plan)([torch.ones(4)])
    expected = -torch.ones(4).exp() * torch.ones(4).exp().sin()
    assert torch.allclose(out[0], expected)


def test_a_kernel_drops_only_values_that_reached_the_value_list():
    """A generated kernel's dead list holds the values it read from outside, not those
    made and last read inside it (never materialised); inputs are never offered for
    recycling (the caller holds them)."""
    from fusionstitch.fusion import make_plan
    from fusionstitch.ir.graph import PARAMETER
    b = GraphBuilder("g")
    x = b.param((256, 256))
    y = b.param((256, 256))
    e = b.op("exp.default", x)                     # made and read inside the kernel
    s = b.op("add.Tensor", e, y)
    r = b.op("relu.default", s)
    g = b.build(b.op("mul.Tensor", r, r))
    plan = make_plan(g, "stitch", "cpu")
    prog = Program(plan, torch.device("cpu"), "cpu")
    slot = {n.name: i for i, n in enumerate(g.nodes)}
    [(kind, (step, dead))] = [st for st in prog.steps if st[0] == "generated"]
    made = {slot[name] for grp in plan.groups if grp.kind == "kernel" for name in grp.nodes}
    assert not set(dead) & made
    params = {slot[n.name] for n in g.nodes if n.op == PARAMETER}
    assert not prog.recycled & params
    a, bb = torch.randn(256, 256), torch.randn(256, 256)
    torch.testing.assert_close(prog([a, bb])[0], torch.relu(a.exp() + bb) ** 2)


def _library_graph(declared: str):
    """cumsum (a library call) declared as `declared`, read by a generated kernel."""
    return parse(f"""graph g(%a: f32[2,4]) {{
  %m: {declared} = cumsum.default(%a, 1)
  %r: {declared.split('[')[0]}[2,4] = add.Tensor(%m, 1.0)
  return (%r, %m)
}}""")


@pytest.mark.parametrize("target", TARGETS)
def test_library_result_of_another_dtype_than_declared_is_converted(target):
    """The graph's types come from torch's meta kernels, which can disagree with the real
    kernel (fp16 batch-norm's running statistics: fp32 in meta, fp16 for real). A kernel
    reading the library result as declared read garbage: the result is converted."""
    g = _library_graph("f16[2,4]")     # cumsum of fp32 really returns fp32
    a = torch.randn(2, 4)
    prog = Program(make_plan(g, "stitch", target), target=target)
    assert prog.num_kernels == 1 and prog.num_library_calls == 1
    for _ in range(2):       # the first call converts, and so do later ones
        r, m = prog([a])
        assert m.dtype == torch.float16 and r.dtype == torch.float16
        assert torch.equal(m, a.cumsum(1).half())
        assert torch.equal(r, (a.cumsum(1).half().float() + 1).half())


@pytest.mark.parametrize("target", TARGETS)
def test_library_result_of_another_shape_than_declared_raises(target):
    prog = Program(make_plan(_library_graph("f32[2,2]"), "stitch", target), target=target)
    with pytest.raises(RuntimeError, match=r"cumsum.default returned shape \(2, 4\)"):
        prog([torch.randn(2, 4)])


def test_library_result_only_torch_reads_is_left_as_it_is():
    """embedding_bag's offset2bag is (0,) for real where meta says (5,): unread by kernels,
    it is no hazard, and eager's value is what the graph returns."""
    g = parse("""graph g(%a: f32[2,4]) {
  %m: f16[2,2] = cumsum.default(%a, 1)
  %r: f32[2,4] = exp.default(%a)
  return (%r, %m)
}""")
    a = torch.randn(2, 4)
    for target in TARGETS:
        r, m = Program(make_plan(g, "stitch", target), target=target)([a])
        assert torch.equal(m, a.cumsum(1)) and torch.allclose(r, a.exp())


@pytest.mark.parametrize("target", TARGETS)
def test_fp16_batch_norm_running_statistics_match_eager(target):
    """The case that showed it: _batch_norm_with_update in fp16 (torch's meta gives fp32
    running statistics; a kernel converting them back read fp16 memory as fp32)."""
    torch._dynamo.reset()
    x = torch.randn(3, 5, dtype=torch.float16)
    stats = [torch.randn(5, dtype=torch.float16), torch.rand(5, dtype=torch.float16) + 0.5]

    def f(x, rm, rv):
        return torch.ops.aten._batch_norm_with_update(x, None, None, rm, rv, 0.1, 1e-5)[0]
    want_stats = [s.clone() for s in stats]
    want = f(x, *want_stats)
    got = torch.compile(f, backend=fusionstitch.backend(target=target), dynamic=False)(x, *stats)
    assert torch.equal(got, want)
    for s, w in zip(stats, want_stats):
        assert torch.equal(s, w)
