"""The preamble's helpers (fs::exp_f32, fs::erf_f32, fs::maximum, ...) never stay calls.

A helper GCC leaves out of line is a call in the loop that reads it, and a loop with a
call in it does not vectorise. GCC's inliner gives up on `static inline` functions in a
caller that is already long: a 128-op elementwise chain of 16384 elements (the corpus's
`chain-L128/16k`), whose kernel function holds the loop twice (dense and strided), kept
`fs::exp_f32` a call and ran scalar, 18.5 ms against 1.4 ms for the same chain at 32768
elements, where `omp parallel` outlines the loop into a function of its own. The
helpers are `always_inline` now (targets/cpp/preamble.FS_INLINE): a helper that cannot
be inlined is a compile error, not a slow kernel.

Read from the library's symbols (nm, binutils, which g++ comes with): a helper left out
of line is a local function `fs::<name>` in the library. Holds on any machine with g++,
whatever it vectorises with.
"""
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fusionstitch
from fusionstitch.runtime.cache import cache_dir
from fusionstitch.targets.cpp import build as cpu_build

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import corpus  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nm") is None,
                                reason="needs g++ and nm")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    monkeypatch.delenv("FUSIONSTITCH_CXX", raising=False)
    cpu_build.clear_memory_cache()
    torch._dynamo.reset()


def out_of_line_helpers() -> set[str]:
    """The preamble's functions (namespace fs) that a library built in this test's cache
    defines as functions of their own: each one a call somewhere."""
    found = set()
    libs = list(cache_dir("cpu").glob("*.so"))
    assert libs, "no library was built"
    for so in libs:
        text = subprocess.run(["nm", "-C", str(so)], capture_output=True, text=True,
                              check=True).stdout
        for line in text.splitlines():
            m = re.match(r"^[0-9a-f]+ [tTwW] (fs::\S+?)(\(|$)", line)
            if m:
                found.add(m.group(1))
    return found


def chain(length: int, seed: int):
    return corpus._chain(random.Random(f"inline/{seed}"), length, masks=False)


@pytest.mark.parametrize("numel", [16384, 1000])
@pytest.mark.parametrize("vecmath", ["0", "1"])
def test_a_long_chain_calls_no_helper(numel, vecmath, monkeypatch):
    """128 ops of sin, cos, tanh, sigmoid, erf, exp, log, sqrt and arithmetic in one
    serial loop (too small for threads), with libmvec's functions and with the
    preamble's own exp/tanh/erf."""
    monkeypatch.setenv("FUSIONSTITCH_CPU_VECMATH", vecmath)
    fn = chain(128, 0)
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(numel // 8, 8, generator=g) for _ in range(2))
    got = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))(x, y)
    want = fn(x, y)
    for o, w in zip(got, want):
        assert o.shape == w.shape and bool(o.isfinite().all()) == bool(w.isfinite().all())
    assert not out_of_line_helpers(), "helpers left out of line (calls in a loop)"
