"""The floor backend (bench/run.py `floor_backend`, `python -m bench.ab --variants floor,...`):
graphs that replay their first call's outputs, so that a step compiled with it times
only what no backend avoids. These check that it replays (costs nothing per graph),
for inference graphs and for a training step's forward and backward alike."""
import sys
from pathlib import Path

import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import ab  # noqa: E402
from bench.run import _compile  # noqa: E402


def test_an_inference_graph_replays_its_first_outputs():
    torch._dynamo.reset()
    f = _compile("floor", lambda x: (x.sin() * 2).sum(-1), "cpu")
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    first = f(x)
    torch.testing.assert_close(first, (x.sin() * 2).sum(-1))
    assert f(y) is first        # no work: the same tensor again


def test_a_training_step_replays_forward_and_backward():
    torch._dynamo.reset()
    lin = torch.nn.Linear(8, 3)
    f = _compile("floor", lambda x: lin(x).square().mean(), "cpu")
    x = torch.randn(5, 8)
    loss = f(x)
    loss.backward()
    grad = lin.weight.grad.clone()
    ref = torch.autograd.grad(lin(x).square().mean(), lin.weight)[0]
    torch.testing.assert_close(grad, ref)
    lin.weight.grad = None
    f(torch.randn(5, 8)).backward()   # other inputs: the first step's gradients again
    torch.testing.assert_close(lin.weight.grad, grad)


def test_ab_reports_the_graphs_time_and_the_best_possible_ratio():
    r = ab.ab("softmax_chain", ("floor", "fusionstitch", "inductor"), rounds=2, warmup=1)
    med = r["median_ms"]
    assert set(r["graphs_ms"]) == {"fusionstitch", "inductor"}
    assert r["graphs_ms"]["fusionstitch"] == med["fusionstitch"] - med["floor"]
    assert r["best_possible_over_inductor"] == med["inductor"] / med["floor"]


def test_torchs_debug_backends_run_data_dependent_sizes():
    """dynamo_eager and aot_eager: the floor where replaying cannot work (a size the data
    decides, which a replayed output would get wrong)."""
    def pick(x):
        return (x[x > 0] * 2).sum()
    for variant in ("dynamo_eager", "aot_eager"):
        torch._dynamo.reset()
        f = _compile(variant, pick, "cpu")
        for x in (torch.randn(16), torch.randn(9)):
            torch.testing.assert_close(f(x), pick(x))
