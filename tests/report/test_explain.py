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
