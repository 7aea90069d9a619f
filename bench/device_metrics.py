"""What a benchmark step does to the device, counted independently of the compilers.

    from bench.device_metrics import copy_bandwidth, compulsory_bytes, profiler_kernels
    copy_bandwidth("cuda")                 # GB/s of a large device-to-device copy
    compulsory_bytes(inst, outs)           # bytes a step must read and write at least
    profiler_kernels(run, "cuda")          # {"kernels": n, "memcpy": m} launched by run()

* ``profiler_kernels``: torch.profiler's own count of the device kernels one call of
  ``run`` launched (CUPTI's record, not a compiler's claim); copies and fills
  (``Memcpy``/``Memset``) are counted apart. Only on CUDA: a CPU has no kernel launches
  to count (``None``).
* ``compulsory_bytes``: every input read once (the arguments and, for a module, its
  parameters) and every result written once (outputs, gradients, inputs updated in
  place). No schedule moves fewer bytes, so ``compulsory_bytes / step time`` is a lower
  bound of the bandwidth a variant achieved, comparable between variants.
* ``copy_bandwidth``: the machine's reference, a copy of ``nbytes`` between two buffers
  (read plus write: ``2 * nbytes / time``), median of ``repeat`` runs after a warm-up.
"""
from __future__ import annotations

import time

__all__ = ["copy_bandwidth", "compulsory_bytes", "count_device_kernels", "profiler_kernels"]

# Names CUPTI gives the device events that are no kernel launch of a compiler's.
_COPY_PREFIXES = ("Memcpy", "Memset", "memcpy", "memset")


def copy_bandwidth(device: str = "cpu", nbytes: int | None = None, repeat: int = 20) -> float:
    """GB/s (1e9 bytes) of ``dst.copy_(src)`` over ``nbytes`` (default 1 GiB on CUDA,
    256 MiB on CPU: well past the caches), counting the read and the write."""
    import torch

    from bench.timing import percentile
    cuda = str(device).startswith("cuda")
    nbytes = nbytes or (1 << 30 if cuda else 1 << 28)
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dst.copy_(src)
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        dst.copy_(src)
        sync()
        times.append(time.perf_counter() - start)
    return 2 * src.numel() * 4 / percentile(times, 50) / 1e9


def _tensor_bytes(tensors, seen: set) -> int:
    """Bytes of the tensors not counted yet (``seen``: storage pointers already counted)."""
    import torch
    total = 0
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel())
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def compulsory_bytes(inst, outs: list) -> int:
    """Bytes one step of workload instance ``inst`` must move at least: its tensor
    arguments and parameters read once, and ``outs`` (``bench.workloads.step``'s result:
    outputs, gradients, then clones of the inputs updated in place) written once."""
    reads: set = set()
    params = list(inst.fn.parameters()) if hasattr(inst.fn, "parameters") else []
    read = _tensor_bytes(list(inst.args) + params + list(inst.grad_params), reads)
    written = _tensor_bytes(outs, set())
    return read + written


def count_device_kernels(events) -> dict:
    """``{"kernels", "memcpy"}``: the device events among profiler ``events`` (objects
    with ``device_type`` and ``name``, as ``torch.profiler``'s ``events()`` gives),
    copies and fills apart from kernels."""
    from torch.autograd import DeviceType
    kernels = memcpy = 0
    for e in events:
        if e.device_type != DeviceType.CUDA:
            continue
        if e.name.startswith(_COPY_PREFIXES):
            memcpy += 1
        else:
            kernels += 1
    return {"kernels": kernels, "memcpy": memcpy}


def profiler_kernels(run, device: str) -> dict | None:
    """The device kernels and copies that one call of ``run`` launched, as torch.profiler
    (CUPTI) records them; ``None`` off CUDA."""
    if not str(device).startswith("cuda"):
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return count_device_kernels(prof.events())
