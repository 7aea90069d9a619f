"""The kernel caches: what `clear_memory_caches` forgets and what the disk keeps."""
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.runtime.cache import clear_memory_caches

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])


@pytest.mark.parametrize("target", TARGETS)
def test_a_new_compile_after_clearing_memory_loads_from_disk(target, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))

    def f(x):
        return torch.softmax(x * 3, -1) + 1

    x = torch.randn(6, 33)
    for expect_compiled in (True, False):
        torch._dynamo.reset()
        clear_memory_caches()
        fusionstitch.reset_stats()
        got = torch.compile(f, backend=fusionstitch.backend(target=target))(x)
        torch.testing.assert_close(got, f(x))
        s = fusionstitch.stats()
        assert (s["kernels_compiled"] > 0) == expect_compiled
        if not expect_compiled:
            assert s["cache_hits"] >= 1
