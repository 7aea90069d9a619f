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
(smaller blocks come from malloc's free lists, already warm). So between calls
a Program holds at most one call's worth of its large kernel outputs.

Knob: FUSIONSTITCH_RECYCLE=0 turns it off (every kernel output a fresh
`torch.empty`, memory as eager holds it).
"""
from __future__ import annotations

import sys

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
