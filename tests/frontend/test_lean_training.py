"""The lean training runtime (frontend/lean_training.py): one autograd function in place
of AOTAutograd's runtime wrappers for a training graph of the plain case.

What it must keep of AOTAutograd's runtime, each against eager (and, where the question
is an error, against AOTAutograd's runtime itself, FUSIONSTITCH_LEAN_TRAINING=0): the
gradients of every input that requires grad, outputs that do not require grad, unused
outputs, incoming gradients of any layout (transposed, expanded), retain_graph,
create_graph (first-order gradients right, a second-order one refused), an input that
requires grad but gets no gradient (autograd must not walk its history), kept mutations
(batch norm's running statistics), grad mode forced on inside no_grad, and
AOTAutograd's runtime wherever the case is not the plain one (an output aliasing an
input)."""
import pytest
import torch
from test_lean_wrapper import fresh_caches, spied

import fusionstitch
from fusionstitch.frontend import lean_training


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.delenv("FUSIONSTITCH_LEAN_TRAINING", raising=False)
    yield from fresh_caches(tmp_path, monkeypatch)


def lean_used(returned) -> bool:
    return any(getattr(r, "lean_training", None) is not None for r in returned)


def leaves(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).requires_grad_() for s in shapes]


def grads_of(fn, inputs, grad_outputs):
    """fn's outputs and the gradients of `inputs` after backward from `grad_outputs`
    (None: that output is not used)."""
    for t in inputs:
        t.grad = None
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, g) for o, g in zip(outs, grad_outputs) if g is not None]
    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    return [o.detach() for o in outs], [t.grad for t in inputs]


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def mlp(x, w1, b1, w2):
    h = torch.tanh(x @ w1 + b1)
    return (h @ w2).softmax(-1)


def test_gradients_match_eager_and_the_runtime_is_ours():
    x, w1, b1, w2 = leaves((8, 16), (16, 32), (32,), (32, 4))
    fn, returned = spied(mlp)
    g = torch.randn(8, 4)
    for _ in range(2):   # the first call compiles, the second runs the compiled step
        got_out, got = grads_of(fn, [x, w1, b1, w2], [g])
        want_out, want = grads_of(mlp, [x, w1, b1, w2], [g])
        assert close(got_out[0], want_out[0])
        assert all(close(a, b) for a, b in zip(got, want))
    assert lean_used(returned)
    assert fusionstitch.stats()["fallbacks"] == 0


def two_outputs(x, w):
    y = x @ w
    return y.sin(), y.argmax(-1), y.cos()


def test_non_differentiable_and_unused_outputs():
    x, w = leaves((6, 5), (5, 7))
    fn, returned = spied(two_outputs)
    out = fn(x, w)
    assert lean_used(returned)
    assert out[0].requires_grad and not out[1].requires_grad and out[2].requires_grad
    assert out[1].dtype == torch.int64 and torch.equal(out[1], two_outputs(x, w)[1])
    g = torch.randn(6, 7)
    # the third output unused: its gradient is zeros, autograd's materialised ones
    _, got = grads_of(fn, [x, w], [g, None, None])
    _, want = grads_of(two_outputs, [x, w], [g, None, None])
    assert all(close(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("make_grad", [
    lambda: torch.randn(7, 6).t(),                       # transposed
    lambda: torch.randn(1, 7).expand(6, 7),              # expanded (stride 0)
    lambda: torch.randn(6, 14)[:, ::2],                  # strided
], ids=["transposed", "expanded", "strided"])
def test_incoming_gradients_of_any_layout(make_grad):
    x, w = leaves((6, 5), (5, 7))
    f = lambda x, w: (x @ w).exp()   # noqa: E731
    fn, returned = spied(f)
    grads_of(fn, [x, w], [torch.randn(6, 7)])   # the backward compiled for row-major
    assert lean_used(returned)
    g = make_grad()
    _, got = grads_of(fn, [x, w], [g])
    _, want = grads_of(f, [x, w], [g])
    assert all(close(a, b) for a, b in zip(got, want))


def test_retain_graph_runs_the_backward_twice():
    x, w = leaves((4, 3), (3, 5))
    f = lambda x, w: ((x @ w).sigmoid() * 3).sum()   # noqa: E731
    fn, returned = spied(f)
    loss = fn(x, w)
    assert lean_used(returned)
    loss.backward(retain_graph=True)
    loss.backward()
    want_loss = f(x.detach().requires_grad_(), w)
    w_grad = w.grad.clone()
    w.grad = None
    want_loss.backward()
    assert torch.allclose(w_grad, 2 * w.grad, rtol=1e-5)


def test_create_graph_gives_first_order_gradients_and_refuses_a_second():
    x, w = leaves((4, 3), (3, 5))
    f = lambda x, w: (x @ w).tanh().sum()   # noqa: E731
    fn, returned = spied(f)
    (gw,) = torch.autograd.grad(fn(x, w), [w], create_graph=True)
    assert lean_used(returned)
    (want,) = torch.autograd.grad(f(x, w), [w])
    assert close(gw.detach(), want)
    assert gw.requires_grad
    with pytest.raises(RuntimeError, match="double backward"):
        gw.sum().backward()


def test_an_input_without_gradient_is_not_walked_back():
    # AOTAutograd's "inputs to detach": y requires grad (a history whose buffers are
    # already freed) but the graph only reads y.detach(); eager's backward does not
    # reach y's history, and neither may ours
    x, a = leaves((4, 4), (4, 4))
    y = a.exp()
    y.sum().backward()                   # frees y's graph
    f = lambda x, y: (x * y.detach()).sum()   # noqa: E731
    fn, returned = spied(f)
    loss = fn(x, y)
    assert lean_used(returned)
    loss.backward()                      # must not backward through y's freed graph
    assert torch.allclose(x.grad, y.detach())


def test_a_leaf_without_gradient_stays_attached():
    # found by the OpInfo sweep (linalg.vector_norm, ord=0): the backward returns no
    # gradient for x, a leaf; detached, the output would not require grad (eager's has a
    # grad_fn) and autograd.grad(out, x) would refuse (AOTAutograd detaches only
    # non-leaves)
    (x,) = leaves((5,))
    f = lambda x: torch.linalg.vector_norm(x, ord=0)   # noqa: E731
    fn, returned = spied(f)
    out, want = fn(x), f(x)
    assert lean_used(returned)
    assert out.requires_grad and out.grad_fn is not None and want.grad_fn is not None
    assert torch.autograd.grad(out, [x], allow_unused=True) == \
        torch.autograd.grad(want, [x], allow_unused=True) == (None,)


def test_batch_norm_running_statistics_and_gradients():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                              torch.nn.ReLU())
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                              torch.nn.ReLU())
    ref.load_state_dict(net.state_dict())
    x = torch.randn(2, 3, 8, 8)
    fn, returned = spied(net)
    for _ in range(2):
        for m in (net, ref):
            m.zero_grad(set_to_none=True)
        fn(x).square().mean().backward()
        ref(x).square().mean().backward()
    assert lean_used(returned)
    for (name, a), b in zip(net.named_parameters(), ref.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-5), name
    for (name, a), b in zip(net.named_buffers(), ref.buffers()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-6), name


def test_enable_grad_inside_no_grad():
    x, w = leaves((4, 3), (3, 5))

    def f(x, w):
        with torch.enable_grad():
            return (x @ w).relu().sum()
    fn, _ = spied(f)
    with torch.no_grad():
        loss = fn(x, w)
        want = f(x, w)
    assert loss.requires_grad and want.requires_grad
    loss.backward()
    got = w.grad
    w.grad = None
    want.backward()
    assert torch.allclose(got, w.grad, rtol=1e-5)


def test_an_output_aliasing_an_input_keeps_aotautograds_runtime():
    x, w = leaves((4, 3), (3, 5))
    f = lambda x, w: ((x @ w).sum(), w.view(15))   # noqa: E731
    fn, returned = spied(f)
    loss, view = fn(x, w)
    assert not lean_used(returned)
    assert view._base is w
    loss.backward()
    assert torch.allclose(w.grad, x.detach().sum(0)[:, None].expand(3, 5))


def test_aotautograds_runtime_with_an_eager_backward_keeps_the_graph():
    # where AOTAutograd's runtime stays, its backward was still compiled with the forward
    # (lean_training.eager_backward): retain_graph and create_graph must work as with a
    # backward compiled at its first call (AOTAutograd's donated-buffer check refused them)
    x, w = leaves((4, 3), (3, 5))
    f = lambda x, w: ((x @ w).tanh().sum(), w.view(15))   # noqa: E731
    fn, returned = spied(f)
    loss, _ = fn(x, w)
    assert not lean_used(returned)
    (gw,) = torch.autograd.grad(loss, [w], create_graph=True, retain_graph=True)
    (want,) = torch.autograd.grad(f(x, w)[0], [w])
    assert close(gw.detach(), want)
    loss.backward()
    assert close(w.grad, want)


def test_the_knob_keeps_aotautograds_runtime(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_LEAN_TRAINING", "0")
    x, w1, b1, w2 = leaves((8, 16), (16, 32), (32,), (32, 4))
    fn, returned = spied(mlp)
    _, got = grads_of(fn, [x, w1, b1, w2], [torch.ones(8, 4)])
    assert not lean_used(returned)
    _, want = grads_of(mlp, [x, w1, b1, w2], [torch.ones(8, 4)])
    assert all(close(a, b) for a, b in zip(got, want))


def test_layout_refuses_what_it_does_not_know():
    capture = lean_training.Capture()
    with pytest.raises(lean_training.NotLean, match="0 forward and 0 backward"):
        lean_training.layout(capture, [])
    assert lean_training.runner(capture, []) is None
