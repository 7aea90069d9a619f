"""Buffer recycling (runtime/recycle.py): kernel outputs take the memory of dead values,
never memory that a caller, an output or a live view can still see."""
import contextlib

import pytest
import torch

import fusionstitch
from bench import workloads as W
from fusionstitch.runtime import recycle


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()


def _chain(x, w):
    # kernel, GEMM, kernel, GEMM, kernel: the second kernel's output can take the first's
    # memory (dead once the first GEMM has read it)
    y = torch.mm(torch.relu(x * 2), w)
    z = torch.mm(torch.tanh(y + 1), w)
    return z * 3


def _close(got, want, what=""):
    # relative to the largest magnitude, as the zoo's numerics tests measure
    err = (got.double() - want.double()).abs().max().item()
    assert err <= 1e-4 * max(want.double().abs().max().item(), 1e-6), f"{what} error {err}"


def _compiled(fn):
    return torch.compile(fn, backend=fusionstitch.backend(target="cpu"))


def test_dead_kernel_outputs_are_reused_and_results_match():
    x, w = torch.randn(256, 256), torch.randn(256, 256)     # 256 KiB values
    fn = _compiled(_chain)
    fusionstitch.reset_stats()
    first = fn(x, w)
    _close(first, _chain(x, w))
    hits_one_call = fusionstitch.stats()["buffers_recycled"]
    kept = first.clone()
    second = fn(x * -1, w)
    _close(second, _chain(x * -1, w))
    assert fusionstitch.stats()["buffers_recycled"] > hits_one_call >= 1
    assert torch.equal(first, kept), "a returned output was overwritten by the next call"
    assert second.data_ptr() != first.data_ptr()


def test_knob_turns_recycling_off(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_RECYCLE", "0")
    x, w = torch.randn(256, 256), torch.randn(256, 256)
    fn = _compiled(_chain)
    fusionstitch.reset_stats()
    for _ in range(2):
        _close(fn(x, w), _chain(x, w))
    assert fusionstitch.stats()["buffers_recycled"] == 0


def test_memory_a_live_view_or_a_caller_sees_is_not_taken():
    t = torch.randn(64, 1024)          # 256 KiB
    pool, room = {}, {t.numel() * 4: 4}
    view = t.view(-1)
    recycle.offer(pool, t, room)       # the view is alive: not offered
    assert not pool
    holder = [t]
    del view
    recycle.offer(pool, t, room)       # `holder` still refers to it
    assert not pool
    del holder
    recycle.offer(pool, t, room)
    assert sum(map(len, pool.values())) == 1


def test_the_pool_keeps_no_more_than_the_program_can_use():
    pool, room = {}, {256 * 1024: 1}
    for _ in range(3):
        recycle.offer(pool, torch.empty(256 * 256), room)
    recycle.offer(pool, torch.empty(512 * 256), room)     # no kernel output of this size
    assert {n: len(v) for n, v in pool.items()} == {256 * 1024: 1}
    t = recycle.take(pool, (256, 256), torch.float32, 256 * 1024)
    assert t.shape == (256, 256) and t.is_contiguous() and not pool[256 * 1024]


def _perturbed(args):
    return tuple(a * 0.5 + 0.25 if isinstance(a, torch.Tensor) and a.is_floating_point()
                 else a for a in args)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in W.names() if n != "adam"])
def test_zoo_outputs_survive_the_next_call(name, monkeypatch):
    # every size takes part, so the small workloads exercise recycling everywhere
    monkeypatch.setattr(recycle, "MIN_BYTES", 0)
    inst, ref = W.make(name, "small"), W.make(name, "small")
    fn = _compiled(inst.fn)
    train = inst.workload.mode == "train"
    grad = contextlib.nullcontext() if train else torch.no_grad()

    def call(f, params, args):
        for p in params:
            p.grad = None
        with grad:
            outs = W._flatten(f(*args))
        if train:
            sum(o.float().sum() for o in outs if o.is_floating_point()).backward()
            outs = outs + [p.grad for p in params]
        return outs

    fusionstitch.reset_stats()
    first = call(fn, inst.grad_params, inst.args)
    kept = [o.detach().clone() for o in first]
    args2 = _perturbed(inst.args)
    second = call(fn, inst.grad_params, args2)
    want = call(ref.fn, ref.grad_params, _perturbed(ref.args))
    # softmax_chain is one kernel: nothing dies before another kernel's output. A
    # training step's forward and backward release each other's pool (recycle.py), so
    # there only values dying within one graph are recycled, where there are any
    assert fusionstitch.stats()["buffers_recycled"] > 0 or name == "softmax_chain" or train
    for i, (a, b) in enumerate(zip(first, kept)):
        assert torch.equal(a, b), f"{name}: result {i} of the first call was overwritten"
    for i, (a, b) in enumerate(zip(second, want)):
        _close(a, b, f"{name}: result {i}")


# --- how long the pool lives: while the caller holds an output of the last call ----------
def test_pool_is_released_when_the_caller_drops_every_output():
    x, w = torch.randn(512, 512), torch.randn(512, 512)     # 1 MiB values
    fn = _compiled(_chain)
    fusionstitch.reset_stats()
    out = fn(x, w)
    assert recycle.held_bytes() > 0, "kept for the next call while the output is alive"
    recycled = fusionstitch.stats()["buffers_recycled"]
    out = fn(x, w)     # the previous output is alive during the call: the pool serves it
    # the first kernel of the call takes memory kept from the last call
    assert fusionstitch.stats()["buffers_recycled"] >= 2 * recycled + 1
    _close(out, _chain(x, w))
    del out
    assert recycle.held_bytes() == 0


def test_pool_is_released_when_another_graph_runs():
    x, w = torch.randn(512, 512), torch.randn(512, 512)
    first, second = _compiled(_chain), _compiled(lambda a, b: _chain(a, b) + 1)
    out = first(x, w)
    kept = recycle.held_bytes()
    assert kept > 0
    other = second(x, w)   # the first graph's pool would sit unused beside this call
    assert recycle.held_bytes() <= kept, "only the running graph's pool is kept"
    del other
    assert recycle.held_bytes() == 0
    _close(out, _chain(x, w))


def test_outputs_that_are_inputs_or_die_during_the_next_call():
    pool = recycle.Pool()
    a, b = torch.empty(256 * 256), torch.empty(256 * 256)
    recycle.begin(pool)
    recycle.offer(pool, torch.empty(256 * 256), {256 * 1024: 2})
    recycle.end(pool, [a], [a])       # the only output is an input: nothing to watch
    assert pool.nbytes() == 0
    recycle.begin(pool)
    recycle.offer(pool, torch.empty(256 * 256), {256 * 1024: 2})
    recycle.end(pool, [b, 3, None], [a])
    assert pool.nbytes() == 256 * 1024
    recycle.begin(pool)                # b is passed back in and dies during the call
    del b
    assert pool.nbytes() == 256 * 1024, "the running call decides, not the old output"
    c = torch.empty(1)
    recycle.end(pool, [c], [])
    assert pool.nbytes() == 256 * 1024
    del c
    assert pool.nbytes() == 0


def _malloc_in_use() -> int | None:
    """Bytes glibc's malloc has handed out and not had back (main arena and mmapped
    blocks: every allocation made on this thread), or None without glibc's mallinfo2."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        return None
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def test_dropped_outputs_give_the_memory_back_to_malloc():
    """An independent measure: malloc's own count of bytes in use drops by the output and
    everything the pool held, once the output is dropped."""
    if _malloc_in_use() is None:
        pytest.skip("needs glibc's mallinfo2")
    x, w = torch.randn(1024, 1024), torch.randn(1024, 1024)   # 4 MiB values
    fn = _compiled(_chain)
    with torch.no_grad():
        fn(x, w)                          # compiled, warmed up, the output dropped
        import gc
        gc.collect()
        before = _malloc_in_use()
        out = fn(x, w)
        held = recycle.held_bytes()
        assert held >= 4 * 2 ** 20
        holding = _malloc_in_use()
        del out
        after = _malloc_in_use()
    assert holding - after >= held + 4 * 2 ** 20, "the output and the pool went back"
    # what a call leaves behind once its output is gone: not a buffer's worth
    assert after - before < 2 ** 20
