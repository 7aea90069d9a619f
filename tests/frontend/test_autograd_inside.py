"""Functions that differentiate inside the compiled code: none of our frames reaches Dynamo.

AOTAutograd compiles a backward graph lazily, on its first call, which happens inside
the user's torch.autograd.grad or .backward(): code that runs after a graph break,
where Dynamo's frame callback is still set. Everything fusionstitch runs there (the
backward's compile and every compiled graph) must run with Dynamo off, as Inductor's
does: else Dynamo traces our compiler and runtime into extra graphs, recompiles them
until its limit, and may break the user's autograd graph.

Each case runs under AOTAutograd with the graphs run as they are (`aot_eager`, the
reference for what Dynamo and AOTAutograd make) and under fusionstitch on `cpu` and
`interpret`: the same Dynamo graphs, one backend compile per AOTAutograd graph, no
frame of fusionstitch's in Dynamo's converted frames, and eager's results.
"""
import os

import pytest
import torch
import torch.utils.checkpoint as checkpoint

import fusionstitch
from fusionstitch.frontend import lean_training
import known_fallbacks
from dynamo_frames import counting_aot_backend, reset, watch

CALLS = 3   # the first compiles (the backward lazily, in the call), the others reuse
# Triton's interpreter is slow: CI runs every case on `cpu` and this share on `interpret`
# (one of each kind: a training step, graph breaks, checkpointing, torch.func);
# FUSIONSTITCH_TEST_INTERPRET=all runs every case there too
INTERPRET_SHARE = ("logreg_step", "breaks_around_backward", "checkpointed_input_gradient",
                   "functorch_vmap_grad")
# ops the cases use that no code generator lowers yet (README: Fallbacks): they run
# through torch, counted; the gradient penalty's norm
KNOWN_GAPS = known_fallbacks.ALLOWED | {"linalg_vector_norm.default"}


def _graph_break():
    torch._dynamo.graph_break()


def _lin(seed: int, n: int, m: int) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(n, m)


LIN = _lin(0, 6, 6)
HEAD = _lin(1, 6, 1)
X = torch.randn(8, 6, generator=torch.Generator().manual_seed(2))
Y = torch.rand(8, generator=torch.Generator().manual_seed(3)).round()


# --- the cases: each returns tensors only and leaves every .grad alone ------------------
def logreg_step(w, b):
    """A hand-written logistic-regression step: autograd.grad, then the update."""
    w, b = w.detach().requires_grad_(), b.detach().requires_grad_()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(X @ w + b, Y)
    gw, gb = torch.autograd.grad(loss, (w, b))
    return w - 0.1 * gw, b - 0.1 * gb, loss.detach()


def input_gradient(x):
    """First order: the gradient of a module's output with respect to its input."""
    x = x.detach().requires_grad_()
    y = torch.tanh(LIN(x)).sin().sum()
    g, = torch.autograd.grad(y, x)
    return g * 2 + 1


def penalty_value(x):
    """create_graph=True whose result is used, not differentiated again (torch serves it)."""
    x = x.detach().requires_grad_()
    y = torch.tanh(LIN(x)).sum()
    g, = torch.autograd.grad(y, x, create_graph=True)
    return (y + (g.norm(2, dim=1) - 1).pow(2).mean()).detach()


def breaks_around_backward(x):
    """Graph breaks before and after the inner backward: forward, backward and the code
    after it are separate Dynamo graphs."""
    x = x.detach().requires_grad_()
    y = torch.cos(LIN(x)) * 3
    _graph_break()
    g, = torch.autograd.grad(y.sum(), x)
    _graph_break()
    return g.exp() - y.detach()


def functorch_grad(x):
    return torch.func.grad(lambda t: torch.sin(t).mul(t).sum())(x)


def functorch_vmap_grad(x):
    return torch.func.vmap(torch.func.grad(lambda t: torch.tanh(LIN(t)).sum()))(x)


def checkpointed_input_gradient(x):
    """Activation checkpointing inside a function that differentiates itself."""
    x = x.detach().requires_grad_()
    y = checkpoint.checkpoint(lambda t: torch.tanh(LIN(t)).sin(), x, use_reentrant=False)
    g, = torch.autograd.grad(y.sum(), x)
    return g


def meta_step(x, y):
    """MAML's inner step: adapted weights from a gradient, then the loss with them."""
    w = HEAD.weight.detach().requires_grad_()
    inner = torch.nn.functional.mse_loss(torch.nn.functional.linear(x, w).squeeze(1), y)
    gw, = torch.autograd.grad(inner, w)
    fast = w - 0.5 * gw
    return torch.nn.functional.mse_loss(torch.nn.functional.linear(x, fast).squeeze(1),
                                        y).detach()


CASES = {
    "logreg_step": (logreg_step, lambda: (torch.zeros(6), torch.zeros(()))),
    "input_gradient": (input_gradient, lambda: (X.clone(),)),
    "penalty_value": (penalty_value, lambda: (X.clone(),)),
    "breaks_around_backward": (breaks_around_backward, lambda: (X.clone(),)),
    "functorch_grad": (functorch_grad, lambda: (X.clone(),)),
    "functorch_vmap_grad": (functorch_vmap_grad, lambda: (X.clone(),)),
    "checkpointed_input_gradient": (checkpointed_input_gradient, lambda: (X.clone(),)),
    "meta_step": (meta_step, lambda: (X.clone(), Y.clone())),
}


def _run(fn, args, backend):
    compiled = torch.compile(fn, backend=backend)
    outs = None
    for _ in range(CALLS):
        outs = compiled(*args)
    return outs


def _reference(fn, args) -> tuple[int, dict]:
    """Dynamo's graphs and AOTAutograd's compiles of `fn` under aot_eager."""
    reset()
    counts: dict = {}
    with watch() as seen:
        # our training graphs' backwards are compiled with their forwards
        _run(fn, args, counting_aot_backend(counts, eager_backward=lean_training.enabled()))
    return seen.graphs, counts


def _case_targets() -> list[tuple[str, str]]:
    every = os.environ.get("FUSIONSTITCH_TEST_INTERPRET") == "all"
    return [(case, target) for case in sorted(CASES) for target in ("cpu", "interpret")
            if target == "cpu" or every or case in INTERPRET_SHARE]


@pytest.mark.parametrize("case,target", _case_targets())
def test_no_frame_of_ours_is_traced(case, target, monkeypatch, caplog):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")   # an internal error raises
    fn, make_args = CASES[case]
    graphs, counts = _reference(fn, make_args())
    reset()
    fusionstitch.reset_stats()
    with watch() as seen:
        got = _run(fn, make_args(), fusionstitch.backend(target=target))
    assert seen.saw(fn), "the frame observer sees the user's function"
    assert seen.ours() == [], f"Dynamo converted fusionstitch's frames: {seen.ours()}"
    assert seen.graphs == graphs, "the same Dynamo graphs as aot_eager"
    assert fusionstitch.stats()["compiles"] == sum(counts.values()), counts
    # what runs through torch is only a lowering no code generator has, logged and counted
    parts = [p for r in caplog.records if r.name == "fusionstitch.frontend"
             and "run through torch" in r.msg for p in str(r.args[2]).split("; ")]
    assert all(any(f"({op})" in p for op in KNOWN_GAPS) for p in parts), parts
    assert (fusionstitch.stats()["fallbacks"] > 0) == bool(parts), parts
    want = fn(*make_args())
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, w)


def test_steady_state_makes_no_new_graphs():
    """Many calls with new values: no recompile after the first call (Dynamo's recompile
    limit was hit by our own frames before)."""
    reset()
    compiled = torch.compile(logreg_step, backend=fusionstitch.backend(target="cpu"))
    w, b = torch.zeros(6), torch.zeros(())
    # the second call recompiles (Dynamo's, as with any backend): the first returned
    # w - 0.1 * gw, which requires grad
    for _ in range(2):
        w, b, _ = compiled(w, b)
    with watch() as seen:
        for _ in range(10):
            w, b, _ = compiled(w, b)
    assert seen.graphs == 0 and seen.ours() == []
    we, be = torch.zeros(6), torch.zeros(())
    for _ in range(12):
        we, be, _ = logreg_step(we, be)
    torch.testing.assert_close((w, b), (we, be))


def test_outer_backward_of_checkpointed_module_matches_eager():
    """torch.utils.checkpoint in a compiled module, differentiated from outside."""
    reset()

    def fn(x):
        return checkpoint.checkpoint(lambda t: torch.tanh(LIN(t)).sin(), x,
                                     use_reentrant=False).sum()

    x = X.clone().requires_grad_()
    compiled = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    with watch() as seen:
        for _ in range(CALLS):
            compiled(x).backward()
    assert seen.ours() == []
    got = x.grad / CALLS
    x.grad = None
    fn(x).backward()
    torch.testing.assert_close(got, x.grad)


@pytest.mark.parametrize("backend", ["aot_eager", "fusionstitch"])
def test_double_backward_gives_torchs_own_error(backend):
    """Differentiating a compiled backward again is a torch.compile limit: its own error."""
    reset()

    def penalty(x):
        x = x.detach().requires_grad_()
        y = torch.tanh(LIN(x)).sum()
        g, = torch.autograd.grad(y, x, create_graph=True)
        return y + g.pow(2).mean()

    compiled = torch.compile(penalty, backend=backend)
    with watch() as seen, pytest.raises(RuntimeError, match="does not currently support "
                                        "double backward"):
        compiled(X.clone()).backward()
    assert seen.ours() == []
