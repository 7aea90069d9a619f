"""Recycling dead intermediates' memory for later kernel outputs of the same call.

A fresh large CPU allocation comes from the operating system: glibc serves it
with mmap (or regrows a heap it trimmed), and every 4 KiB page then faults and
is zeroed on first touch. Capsule routing's step took 3,600 page faults this
way per call (~5 ms of a 15 ms single-threaded step; Inductor's code, which
reuses dead buffers, took 24). So a Program call keeps the memory of values that
died (a pool of storages, by byte size) and gives it to later kernel outputs of
the same size in the same call (Inductor's buffer reuse, decided at run time where
aliasing is known exactly).

"Nothing else can see it" is checked, not assumed: the tensor object has no
other Python reference (so no caller, list or closure holds it) and its storage
has no other tensor (no view of it is alive: a free view group, a library op
that returned a view, an output aliasing it). The whole storage is kept,
whatever view of it died last.

What is kept is bounded so that it never raises the peak for nothing: a dead value
is kept only while the rest of the call still has more kernel outputs of its size
than the pool holds (`room`: the Program passes, after each step, the count of the
later ones), else it is freed at once, as eager frees it; only sizes of at least
MIN_BYTES take part (smaller blocks come from malloc's free lists, already warm).
Nothing is kept between calls: each call has its own Pool, gone when the call
returns (an earlier version kept it for the next call: 512 MiB still held after
the caller had dropped every output, and a training step's forward activations
beside its backward's peak). `held_bytes()` is what the pools of running calls
hold (the runtime's own accounting; tests read it).

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


def _refs_as_argument(o) -> int:
    return sys.getrefcount(o)


def _sole_refs() -> int:
    """What getrefcount gives in `offer` for a tensor nothing else holds, measured now on
    an object passed down the same way (a caller's local, one call). After a compile that
    failed inside Dynamo, torch leaves its frame evaluator installed and CPython then
    holds one more reference per call to each argument (every later call, any object);
    the fixed count saw every dead value as shared and recycling stopped for the
    process. Measuring a fresh object the same way follows the interpreter; it never
    gives less than a real extra holder would add, as both paths are the same frames."""
    o = object()
    return _SOLE_REFS + _refs_as_argument(o) - 3


def enabled() -> bool:
    return _use_count is not None and env_flag_default("FUSIONSTITCH_RECYCLE", True)


def offer(pool: dict, t, room: dict[int, int]) -> None:
    """Keep the CPU memory of `t` (a value that just died; the caller's last reference to
    it) in `pool` when no one else can see it and `room` (bytes -> how many kernel outputs
    of that size the call has still to make) leaves a place for it. `t` may be the last of several
    views of one storage (a mm's result viewed and permuted): the whole storage is kept."""
    if type(t) is not torch.Tensor or not t.is_cpu or sys.getrefcount(t) > _sole_refs() \
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
    elif len(free) < room.get(n, 0):
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
    """Storages of dead values of one Program call, by byte size (`offer` and `take` use
    it as a dict); registered so that `held_bytes` can count it while it lives."""

    def __init__(self):
        super().__init__()
        _POOLS[id(self)] = self

    def nbytes(self) -> int:
        return sum(st.nbytes() for free in list(self.values()) for st in list(free))


_POOLS: "weakref.WeakValueDictionary[int, Pool]" = weakref.WeakValueDictionary()


def held_bytes() -> int:
    """Bytes the pools of running Program calls hold: memory of dead values kept for a
    later kernel output of the same call (0 between calls)."""
    return sum(p.nbytes() for p in list(_POOLS.values()))
