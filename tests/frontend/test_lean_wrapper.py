"""The lean runtime wrapper (frontend/graph_cache.py `lean`) for inference graphs whose
inputs require grad: an SGD update under no_grad of parameters, after a graph break.

AOTAutograd's wrapper copies each mutated input back after the graph; ours skips the
copy our kernel already made in place. What it must keep of AOTAutograd's: the inputs'
values, their version counters (autograd's check of tensors saved for a backward),
outputs that do not require grad, and AOTAutograd's own wrapper wherever its layout is
not the simple one."""
import pytest
import torch
from torch.profiler import profile

import fusionstitch
from fusionstitch.frontend import graph_cache
from fusionstitch.runtime.cache import clear_memory_caches


def fresh_caches(tmp_path, monkeypatch):
    """The body of a fixture (a generator): empty caches, strict mode, no Dynamo state."""
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    monkeypatch.delenv("FUSIONSTITCH_GRAPH_CACHE", raising=False)
    torch._dynamo.reset()
    clear_memory_caches()
    fusionstitch.reset_stats()
    yield
    torch._dynamo.reset()
    clear_memory_caches()


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    yield from fresh_caches(tmp_path, monkeypatch)


def spied(fn):
    """`fn` compiled, and the list of what our backend returned to Dynamo."""
    returned = []
    be = fusionstitch.backend(target="cpu")

    def spy(gm, example_inputs):
        returned.append(be(gm, example_inputs))
        return returned[-1]
    return torch.compile(fn, backend=spy), returned


def copies(fn, *args) -> int:
    """aten::copy_ calls in one call of `fn`."""
    with profile() as p:
        fn(*args)
    return sum(e.count for e in p.key_averages() if e.key == "aten::copy_")


def sgd(w, b, gw, gb):
    with torch.no_grad():
        w.sub_(0.1 * gw)
        b.sub_(0.1 * gb)
        return (w * 2).sum()


def params(transposed: bool = False):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, 8, generator=g)
    w = w.t() if transposed else w   # a leaf our kernel cannot write in place
    return torch.nn.Parameter(w.clone() if not transposed else w), \
        torch.nn.Parameter(torch.randn((), generator=g))


@pytest.mark.parametrize("transposed", [False, True])
def test_an_sgd_update_of_parameters_under_no_grad_runs_lean_and_matches_eager(transposed):
    grads = torch.randn(*params(transposed)[0].shape), torch.randn(())
    (rw, rb), (w, b) = params(transposed), params(transposed)
    f, returned = spied(sgd)
    assert torch.is_grad_enabled()
    for step in range(3):
        versions = rw._version, rb._version, w._version, b._version
        ref, out = sgd(rw, rb, *grads), f(w, b, *grads)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close((w, b), (rw, rb))
        # eager's one in-place op per parameter bumps its version once; so must we
        assert (w._version - versions[2], b._version - versions[3]) == \
            (rw._version - versions[0], rb._version - versions[1]) == (1, 1)
        assert not out.requires_grad and out.grad_fn is None
        assert w.is_leaf and b.is_leaf and w.requires_grad and w.grad_fn is None
    [fn] = returned
    assert hasattr(fn, "compiled_graph"), "AOTAutograd's wrapper, not the lean one"
    # written in place: no copy back; the transposed one is copied once (by us)
    assert copies(f, w, b, *grads) == (1 if transposed else 0)
    assert fusionstitch.stats()["inplace_writes"] > 0


@pytest.mark.parametrize("requires_grad", [True, False])
def test_an_input_written_in_place_is_seen_by_autograd(requires_grad):
    """A tensor saved for a backward, then updated by a compiled graph: the backward
    raises as in eager (our kernel's write bumps the version; the lean wrapper does it,
    for parameters and for the graph cache's inputs that do not require grad)."""
    w = torch.nn.Parameter(torch.randn(64)) if requires_grad else torch.randn(64)
    x = torch.randn(64, requires_grad=True)
    f, returned = spied(sgd)
    f(w, torch.zeros((), requires_grad=requires_grad), torch.randn(64), torch.zeros(()))
    loss = (x * w).sum()   # saves w
    f(w, torch.zeros((), requires_grad=requires_grad), torch.randn(64), torch.zeros(()))
    assert hasattr(returned[0], "compiled_graph")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_an_output_that_requires_grad_keeps_aot_autograds_wrapper():
    def update_then_use(w, g):
        with torch.no_grad():
            w.sub_(0.1 * g)
        return (w * 2).sum()
    g = torch.randn(32)
    rw, w = torch.nn.Parameter(torch.ones(32)), torch.nn.Parameter(torch.ones(32))
    f, returned = spied(update_then_use)
    ref, out = update_then_use(rw, g), f(w, g)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w, rw)
    assert out.requires_grad and out.grad_fn is not None
    out.backward()
    torch.testing.assert_close(w.grad, torch.full((32,), 2.0))
    # not the inference wrapper (the lean training runtime may serve it: a training graph)
    assert returned and not any(hasattr(fn, "compiled_graph") and
                                not hasattr(fn, "lean_training") for fn in returned)


def test_a_mutated_input_that_is_no_leaf_keeps_aot_autograds_wrapper():
    """AOTAutograd copies into a non-leaf requiring grad with the caller's grad mode; the
    lean wrapper copies under no_grad: it stays out."""
    def update(x, g):
        with torch.no_grad():
            x.sub_(g)
            return x.sum()
    base = torch.nn.Parameter(torch.ones(32))
    x, rx = base * 1, base * 1
    g = torch.randn(32)
    f, returned = spied(update)
    ref, out = update(rx, g), f(x, g)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x, rx)
    assert returned and not any(hasattr(fn, "compiled_graph") for fn in returned)


def test_outputs_that_alias_inputs_are_made_as_aot_autograd_makes_them():
    """The update graph of a training step written by hand also returns `loss.detach()`
    (an input of the graph, from the graph before the break) and may return an input
    itself: AOTAutograd's own output handlers rebuild them from the inputs."""
    def update(w, loss, g):
        with torch.no_grad():
            w.sub_(0.1 * g)
        return loss.detach(), w, w.detach()[:4]
    g = torch.randn(16)
    rw, w = torch.nn.Parameter(torch.ones(16)), torch.nn.Parameter(torch.ones(16))
    loss = (torch.ones(3, requires_grad=True) * 2).sum()
    f, returned = spied(update)
    for _ in range(2):
        ref, out = update(rw, loss, g), f(w, loss, g)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(w, rw)
        assert [o.requires_grad for o in out] == [o.requires_grad for o in ref] == \
            [False, True, False]
        assert out[1] is w
        assert out[0].data_ptr() == loss.data_ptr() and out[2].data_ptr() == w.data_ptr()
    assert [hasattr(fn, "compiled_graph") for fn in returned] == [True]
    # w is an output too: not written in place (runtime/inplace.py), copied back once
    assert copies(f, w, loss, g) <= 1


def test_the_update_of_a_step_written_by_hand_copies_nothing_back():
    """bench/autograd_inside.py's logreg_step: the update after the backward's graph
    break, returning the loss detached."""
    def update(w, loss, g):
        with torch.no_grad():
            w.sub_(0.1 * g)
        return loss.detach(), w.detach().clone()
    w, g = torch.nn.Parameter(torch.ones(16)), torch.randn(16)
    loss = (torch.ones(3, requires_grad=True) * 2).sum()
    f, returned = spied(update)
    f(w, loss, g)
    assert [hasattr(fn, "compiled_graph") for fn in returned] == [True]
    assert copies(f, w, loss, g) == 0


def test_grad_mode_is_off_inside_and_back_after_a_call_and_after_a_raise():
    """The lean wrapper runs the graph with grad mode off (as AOTAutograd's, under
    torch.no_grad) and leaves the caller's mode as it found it, also when the graph
    raises (an index out of range, found by our kernel)."""
    def pick(x, i):
        return x[i] * 2
    x = torch.randn(8)
    f, returned = spied(pick)
    torch.testing.assert_close(f(x, torch.tensor([1, 7])), x[[1, 7]] * 2)
    assert hasattr(returned[0], "compiled_graph"), "AOTAutograd's wrapper, not the lean one"
    assert torch.is_grad_enabled()
    with pytest.raises((IndexError, RuntimeError), match="index"):
        f(x, torch.tensor([1, 8]))
    assert torch.is_grad_enabled()
    with torch.no_grad():
        torch.testing.assert_close(f(x, torch.tensor([0, 2])), x[[0, 2]] * 2)
        assert not torch.is_grad_enabled()
    seen, inner = [], returned[0].compiled_graph

    def probe(args):   # what the graph sees: grad mode off
        seen.append(torch.is_grad_enabled())
        return inner(args)
    run = graph_cache._runner(probe, [], 0)   # the same wrapper around a probe
    torch.testing.assert_close(run(x, torch.tensor([3, 4]))[0], x[[3, 4]] * 2)
    assert seen == [False] and torch.is_grad_enabled()
