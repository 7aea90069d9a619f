"""Tests for ``bench/device_metrics.py``: the counts and bandwidths that do not come from
the compilers (torch.profiler's kernels, compulsory bytes, the copy bandwidth)."""
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import workloads as W  # noqa: E402
from bench.device_metrics import (compulsory_bytes, copy_bandwidth,  # noqa: E402
                                  count_device_kernels, profiler_kernels)


def test_count_device_kernels_splits_copies_from_kernels():
    from torch.autograd import DeviceType
    ev = [SimpleNamespace(device_type=DeviceType.CUDA, name="triton_poi_fused_add_0"),
          SimpleNamespace(device_type=DeviceType.CUDA, name="fs_k003"),
          SimpleNamespace(device_type=DeviceType.CUDA, name="Memcpy DtoD (Device -> Device)"),
          SimpleNamespace(device_type=DeviceType.CUDA, name="Memset (Device)"),
          SimpleNamespace(device_type=DeviceType.CPU, name="aten::add"),
          SimpleNamespace(device_type=DeviceType.CPU, name="cudaLaunchKernel")]
    assert count_device_kernels(ev) == {"kernels": 2, "memcpy": 2}


def test_profiler_kernels_is_none_off_cuda():
    calls = []
    assert profiler_kernels(lambda: calls.append(1), "cpu") is None
    assert calls == []   # nothing ran: there is nothing to count


@pytest.mark.gpu
def test_profiler_kernels_counts_launches():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.randn(1 << 16, device="cuda")
    got = profiler_kernels(lambda: ((x + 1) * 2).sum(), "cuda")
    assert got["kernels"] == 3 and got["memcpy"] == 0


def test_compulsory_bytes_adam_reads_everything_once_and_writes_the_updates():
    inst = W.make("adam", "small")
    outs = W.step(inst)
    args = [a for a in inst.args if isinstance(a, torch.Tensor)]
    read = sum(a.numel() * 4 for a in args)
    written = sum(m.numel() * 4 for m in inst.mutated)   # params, exp_avg, exp_avg_sq
    assert compulsory_bytes(inst, outs) == read + written


def test_compulsory_bytes_of_a_module_counts_its_parameters_once():
    inst = W.make("layernorm_softmax_gelu", "small")
    outs = W.step(inst)
    params = sum(p.numel() * 4 for p in inst.fn.parameters())
    args = sum(a.numel() * 4 for a in inst.args)
    out_bytes = sum(o.numel() * 4 for o in outs)   # the loss and one gradient per parameter
    assert compulsory_bytes(inst, outs) == params + args + out_bytes
    assert out_bytes == 4 + params


def test_copy_bandwidth_is_positive_and_counts_read_and_write(monkeypatch):
    import bench.device_metrics as M
    ticks = iter(range(100))
    monkeypatch.setattr(M.time, "perf_counter", lambda: float(next(ticks)))  # 1 s per copy
    assert copy_bandwidth("cpu", nbytes=1 << 20, repeat=3) == pytest.approx(2 * (1 << 20) / 1e9)
    monkeypatch.undo()
    assert copy_bandwidth("cpu", nbytes=1 << 20, repeat=3) > 0
