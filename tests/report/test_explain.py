"""explain(): fields, printing, and no side effects on grads or stats."""
import torch

import fusionstitch


def test_explain_reports_forward_and_backward_without_touching_grads():
    torch._dynamo.reset()
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8, requires_grad=True)
    fusionstitch.reset_stats()
    before = fusionstitch.stats()
    rep = fusionstitch.explain(lambda x: torch.tanh(lin(x)).sum(), x, strategy="none")
    assert fusionstitch.stats() == before, "explain restores stats()"
    assert x.grad is None and lin.weight.grad is None, "explain leaves .grad alone"
    kinds = {g.kind for g in rep.graphs}
    assert kinds == {"forward", "backward"}
    assert rep.num_ops > rep.num_kernels > 0
    assert rep.num_library_calls >= 2   # addmm forward, mm backward
    assert rep.bytes_moved > 0 and rep.planning_seconds > 0
    text = str(rep)
    assert "strategy=none" in text and "forward" in text and "tanh.default" in text


def test_explain_inference_under_no_grad():
    torch._dynamo.reset()
    with torch.no_grad():
        rep = fusionstitch.explain(lambda a, b: (a * b).relu() + 1, torch.randn(3),
                                   torch.randn(3), strategy="none")
    assert [g.kind for g in rep.graphs] == ["inference"]
    assert rep.num_kernels == 3
    # 3 kernels, each reading its inputs and writing one f32[3]: 4 reads + 3 writes
    assert rep.bytes_moved == (4 + 3) * 3 * 4


def test_why_not_fused_names_the_reason(monkeypatch):
    # the planner's own stages are asserted below: plan, do not load a cached plan
    monkeypatch.setenv("FUSIONSTITCH_PLAN_CACHE", "0")
    torch._dynamo.reset()
    w = torch.randn(128, 128)   # a GEMM above the fused-GEMM limit: a library call
    with torch.no_grad():
        rep = fusionstitch.explain(lambda x: torch.softmax(x @ w, -1).exp(),
                                   torch.randn(4, 128), strategy="stitch")
    ops = {n.op: n.name for n in rep.graphs[0].plan.graph.ops}
    mm, amax, exp = ops["mm.default"], ops["amax.default"], ops["exp.default"]
    assert "library call" in rep.why_not_fused(mm, amax)
    assert "are fused" in rep.why_not_fused(amax, exp)
    g = rep.graphs[0]
    assert set(g.stages) >= {"candidates", "scores", "ilp", "plan"}
    assert "planning:" in str(rep)


def test_print_shows_each_kernels_template_on_codegen_targets():
    rep = fusionstitch.explain(lambda x: torch.softmax(x, -1) * 2, torch.randn(4, 8),
                               target="interpret")
    text = str(rep)
    assert "[grid x<" in text and "persistent r<" in text, text   # the row fits one block
    rep = fusionstitch.explain(lambda x: torch.softmax(x, -1) * 2, torch.randn(2, 3000),
                               target="interpret")
    assert "loop r<" in str(rep), str(rep)                         # longer rows are looped
