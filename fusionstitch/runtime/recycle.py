"""Recycling dead intermediates' memory for later kernel outputs of the same call.

A fresh large CPU allocation comes from the operating system: glibc serves it
with mmap (or regrows a heap it trimmed), and every 4 KiB page then faults and
is zeroed on first touch. Capsule routing's step took 3,600 page faults this
way per call (~5 ms of a 15 ms single-threaded step; Inductor's code, which
reuses dead buffers, took 24). So a Program keeps the memory of values that
died (a pool of storages, by byte size) and gives it to later kernel outputs of
the same size, in the same call or the next one (Inductor's buffer reuse,
decided at run time where aliasing is known exactly, and kept across calls as
PyTorch's CUDA caching allocator keeps GPU memory).

"Nothing else can see it" is checked, not assumed: the tensor object has no
other Python reference (so no caller, list or closure holds it) and its storage
has no other tensor (no view of it is alive: a free view group, a library op
that returned a view, an output aliasing it). The whole storage is kept,
whatever view of it died last.

What is kept is bounded: a size is kept only as many times as the Program has
kernel outputs of that size, and only sizes of at least MIN_BYTES take part
(smaller blocks come from malloc's free lists, already warm).

And it is kept only while it can serve the next call of the same Program: between
calls, a Pool lives while (1) some tensor the last call returned (not one of its
inputs) is alive, and (2) no other Program has started a call since. Once the caller
has dropped every output (a result consumed, a loss after its backward), or another
graph runs (a training step's backward after its forward: the forward's dead
activations would otherwise sit beside the backward's peak), the pool is released:
its memory goes back as eager's would. A loop that keeps the previous result while it
computes the next (`y = f(x)` in a loop) keeps the pool warm. `held_bytes()` is what
all pools hold now (the runtime's own accounting; tests read it).

Knob: FUSIONSTITCH_RECYCLE=0 turns it off (every kernel output a fresh
`torch.empty`, memory as eager holds it).
"""
from __future__ import annotations

import sys
import weakref

import torch

from ..config import env_flag_default
from . import counters

# glibc's initial mmap threshold: smaller blocks come from the heap's free lists
MIN_BYTES = 128 * 1024
# references to a tensor that only the recycler holds: the caller's local, the
# argument of `offer`, and getrefcount's own argument
_SOLE_REFS = 3
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def enabled() -> bool:
    return _use_count is not None and env_flag_default("FUSIONSTITCH_RECYCLE", True)


def offer(pool: dict, t, room: dict[int, int]) -> None:
    """Keep the CPU memory of `t` (a value that just died; the caller's last reference to
    it) in `pool` when no one else can see it and `room` (bytes -> how many kernel outputs
    of that size the Program has) leaves a place for it. `t` may be the last of several
    views of one storage (a mm's result viewed and permuted): the whole storage is kept."""
    if type(t) is not torch.Tensor or not t.is_cpu or sys.getrefcount(t) > _SOLE_REFS \
            or t._use_count() != 1:        # C++ (an autograd node, a cache) holds it too
        return
    st = t.untyped_storage()
    # 2: the tensor's own reference and the `st` object's: no other tensor views it
    if _use_count(st._cdata) != 2:
        return
    n = st.nbytes()
    free = pool.get(n)
    if free is None:
        if n in room:
            pool[n] = [st]
    elif len(free) < room[n]:
        free.append(st)


def take(pool: dict, shape, dtype: torch.dtype, nbytes: int) -> torch.Tensor:
    """A contiguous CPU tensor of `shape` and `dtype`: in a pooled storage of exactly
    `nbytes` bytes when there is one, else a fresh `torch.empty`."""
    free = pool.get(nbytes)
    if free:
        try:
            st = free.pop()   # another thread running the Program may have emptied it
        except IndexError:
            pass
        else:
            counters.bump("buffers_recycled")
            return torch.empty(0, dtype=dtype).set_(st, 0, shape)
    return torch.empty(shape, dtype=dtype)


class Pool(dict):
    """Storages of dead values of one Program, by byte size (`offer` and `take` use it as
    a dict), with what decides how long it lives between calls (see the docstring)."""

    def __init__(self):
        super().__init__()
        self.busy = 0            # calls of the Program running now
        self.generation = 0      # calls finished; the watched outputs are the last one's
        self.watched: list = []  # weak references to that call's outputs
        self.alive = 0           # how many of them are still alive
        _POOLS[id(self)] = self

    def nbytes(self) -> int:
        return sum(st.nbytes() for free in list(self.values()) for st in list(free))


_POOLS: "weakref.WeakValueDictionary[int, Pool]" = weakref.WeakValueDictionary()
_last: list = [None]   # a weak reference to the pool of the Program that started last


def held_bytes() -> int:
    """Bytes all pools hold now: memory of dead values kept for a later kernel output."""
    return sum(p.nbytes() for p in list(_POOLS.values()))


def release(pool: Pool) -> None:
    """Give the pool's memory back (the storages are freed unless someone took one)."""
    pool.clear()
    pool.watched = []
    pool.alive = 0


def begin(pool: Pool) -> None:
    """A call of `pool`'s Program starts: another Program's pool is released (it would
    sit unused beside this call's values)."""
    last = _last[0]
    other = last() if last is not None else None
    if other is not pool:
        if other is not None and not other.busy:
            release(other)
        _last[0] = weakref.ref(pool)
    pool.busy += 1


def end(pool: Pool, outputs: list, inputs: list) -> None:
    """A call finished with `outputs`: keep the pool while one of them (not an input,
    which the caller holds anyway) is alive; release it now when none can be watched."""
    pool.busy -= 1
    pool.generation += 1
    if pool.busy or not pool:
        pool.watched = []
        pool.alive = 0
        return
    given = {id(t) for t in inputs}
    fresh = {id(t): t for t in outputs if isinstance(t, torch.Tensor) and id(t) not in given}
    if not fresh:
        release(pool)
        return
    callback = _output_died(weakref.ref(pool), pool.generation)
    pool.watched = [weakref.ref(t, callback) for t in fresh.values()]
    pool.alive = len(pool.watched)


def _output_died(pool_ref, generation: int):
    def died(_ref) -> None:
        pool = pool_ref()
        # an output of an older call, or one dying while the Program runs (an output
        # passed back in as an input): the running call decides
        if pool is None or pool.generation != generation or pool.busy:
            return
        pool.alive -= 1
        if pool.alive <= 0:
            release(pool)
    return died
