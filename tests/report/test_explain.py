"""explain(): fields, printing, and no side effects on grads or stats."""
import pytest
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


# --- explain works on whatever torch.compile accepts, and leaves no state ------------------
def test_explain_of_a_function_that_differentiates_itself():
    """The function's inner autograd.grad consumed the autograd graph of the output it
    returns: explain reports the graphs it ran and notes that no further backward ran."""
    lin = torch.nn.Linear(4, 4)

    def fn(x):
        y = torch.tanh(lin(x))
        g, = torch.autograd.grad(y.sum(), x)
        return y, g

    x = torch.randn(2, 4, requires_grad=True)
    rep = fusionstitch.explain(fn, x, strategy="none")
    assert {g.kind for g in rep.graphs} == {"forward", "backward"}
    assert len(rep.notes) == 1 and "second time" in rep.notes[0]
    assert "note: no backward" in str(rep)
    assert x.grad is None and lin.weight.grad is None


def test_explain_of_a_training_step_with_detached_and_non_tensor_outputs():
    w = torch.zeros(4, requires_grad=True)
    data = torch.randn(8, 4)

    def step(xs):
        loss = torch.nn.functional.softplus(xs @ w).mean()
        gw, = torch.autograd.grad(loss, w)
        with torch.no_grad():
            w.sub_(0.1 * gw)
        return {"loss": loss.detach(), "step": 1, "name": "sgd", "none": None}

    before = w.detach().clone()
    rep = fusionstitch.explain(step, data, strategy="none")
    kinds = [g.kind for g in rep.graphs]
    assert "forward" in kinds and "backward" in kinds and "inference" in kinds
    assert rep.notes == []
    # explain runs the function: its own update happens, as torch.compile's would
    torch.testing.assert_close(w.detach(), before - 0.1 * torch.autograd.grad(
        torch.nn.functional.softplus(data @ before.requires_grad_()).mean(), before)[0])


def test_explain_of_double_backward_notes_torchs_refusal():
    lin = torch.nn.Linear(4, 4)

    def penalty(x):
        x = x.detach().requires_grad_()
        y = torch.tanh(lin(x)).sum()
        g, = torch.autograd.grad(y, x, create_graph=True)
        return y + g.pow(2).mean()

    rep = fusionstitch.explain(penalty, torch.randn(2, 4), strategy="none")
    assert "double backward" in rep.notes[0]
    assert lin.weight.grad is None


def test_explain_differentiates_with_respect_to_closed_over_parameters():
    """No argument needs grad, but the module the function closes over does: its
    backward graph is compiled and reported too."""
    lin = torch.nn.Linear(4, 4)
    rep = fusionstitch.explain(lambda x: torch.tanh(lin(x)).sum(), torch.randn(2, 4),
                               strategy="none")
    assert [g.kind for g in rep.graphs] == ["forward", "backward"]
    assert lin.weight.grad is None


def test_failed_explain_leaves_no_state_behind():
    """Dynamo does not capture an nn.LSTM and marks the frames it gave up on as skipped;
    explain takes those marks back: later explains, and the user's own torch.compile,
    capture graphs without torch._dynamo.reset()."""
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="produced no graph"):
        fusionstitch.explain(torch.nn.LSTM(4, 8), torch.randn(3, 2, 4), strategy="none")
    rep = fusionstitch.explain(torch.nn.Linear(4, 4), torch.randn(2, 4), strategy="none")
    assert [g.kind for g in rep.graphs] == ["forward", "backward"]
    from torch._dynamo.utils import counters
    graphs = counters["stats"]["unique_graphs"]
    torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
                  backend="eager")(torch.randn(2, 4))
    assert counters["stats"]["unique_graphs"] == graphs + 1


def test_many_explains_do_not_reach_the_recompile_limit():
    """Each explain compiles with a backend of its own; its cache entries go with it."""
    torch._dynamo.reset()
    limit = getattr(torch._dynamo.config, "recompile_limit", 8)
    for _ in range(limit + 2):
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        with torch.no_grad():
            rep = fusionstitch.explain(m, torch.randn(2, 4), strategy="none")
        assert [g.kind for g in rep.graphs] == ["inference"]
