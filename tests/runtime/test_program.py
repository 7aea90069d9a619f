"""Program: runs a plan group by group, counts launches, keeps eager semantics."""
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion.plan import plan_none
from fusionstitch.runtime.program import Program


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
