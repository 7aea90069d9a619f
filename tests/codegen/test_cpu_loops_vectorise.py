"""Loops that call libmvec's functions vectorise.

A loop GCC leaves scalar calls the one-element wrapper of a libmvec function
(`fs_lane_sinf`: a whole vector call for one element) once per point; a vectorised
loop calls the vector variant (`_ZGVeN16v_fs_lane_sinf`, `_ZGVdN8v_...`: the width
GCC picked), and the scalar wrapper only in its epilogue. So each function of the
kernels' own code (`fs_<hash>` and its OpenMP bodies `fs_<hash>._omp_fn.N`) that
calls a scalar wrapper must call a vector variant too, where every libmvec call sits
in a loop over many points. Read from the library's disassembly (objdump, binutils,
which g++ comes with): this holds on any x86-64 with libmvec, whatever vector width
GCC picks.

The case that broke it: GCC's jump threading duplicated the blocks of the `where`
resets of a batched simulation step (sin, cos, compares and selects over 65536
environments), and the loop over r lost the form the vectoriser needs ("number of
iterations cannot be computed"): the whole step ran scalar, 14x slower
(targets/cpp/printer.BOOL_LOGIC_ATTRIBUTE now turns jump threading off too).
"""
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
from fusionstitch.targets.cpp import vecmath as cpu_vecmath

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.corpus import simulation  # noqa: E402

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None or shutil.which("objdump") is None,
                       reason="needs g++ and objdump"),
    pytest.mark.skipif(not cpu_vecmath._exported(tuple(cpu_build.compiler())),
                       reason="no libmvec (or not GCC on x86-64)"),
]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FUSIONSTITCH_CXX", raising=False)
    monkeypatch.delenv("FUSIONSTITCH_CPU_VECMATH", raising=False)
    cpu_build.clear_memory_cache()
    torch._dynamo.reset()


def kernel_disassembly() -> dict[str, str]:
    """The instructions of each kernel function of the libraries built in this test's
    cache (`fs_<hash>` and its OpenMP bodies)."""
    out: dict[str, list[str]] = {}
    for so in cache_dir("cpu").glob("*.so"):
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(so)],
                              capture_output=True, text=True, check=True).stdout
        fn = None
        for line in text.splitlines():
            head = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
            if head:
                fn = head.group(1) if re.match(r"fs_[0-9a-f]{20}(\._omp_fn\.\d+)?$",
                                               head.group(1)) else None
            elif fn:
                out.setdefault(fn, []).append(line)
    return {fn: "\n".join(lines) for fn, lines in out.items()}


def lane_calls() -> tuple[dict[str, set[str]], set[str]]:
    """Of the kernel functions of the libraries built in this test's cache: those that
    call `fs_lane_*` functions (scalar) and no vector variant, with the functions they
    call; and those that call a vector variant."""
    scalar: dict[str, set[str]] = {}
    vector: set[str] = set()
    for fn, code in kernel_disassembly().items():
        for call in re.finditer(r"call\s+[0-9a-f]+ <(_ZGV\w+_)?(fs_lane_\w+)>", code):
            if call.group(1):
                vector.add(fn)
            else:
                scalar.setdefault(fn, set()).add(call.group(2))
    return {fn: calls for fn, calls in scalar.items() if fn not in vector}, vector


@pytest.mark.parametrize("envs", [65536, 1000])
def test_simulation_steps_vectorise(envs):
    """Two steps of the corpus's simulation (sin, cos, clamp, `where` resets, a reward
    count and its mean): in one parallel loop over the environments (65536) or a serial
    one (1000, with a tail)."""
    fn = simulation(2)
    g = torch.Generator().manual_seed(0)
    # (states as the corpus's, far from the reset thresholds: no comparison flips with
    # one ulp of sin or cos)
    state = torch.randn(envs, 4, generator=g) * 0.05
    force = torch.randn(2, envs, generator=g)
    want = fn(state, force)
    got = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))(state, force)
    for w, o in zip(want, got):
        torch.testing.assert_close(o, w, rtol=1e-4, atol=1e-5)
    scalar_only, vector = lane_calls()
    assert not scalar_only, f"loops left scalar call libmvec once per point: {scalar_only}"
    assert vector, "no kernel calls a vector variant of sin or cos"


def test_a_causal_mask_of_loaded_bools_and_checked_indices_vectorises():
    """A causal mask as transformers builds it (llama): a loaded bool and a padding mask
    gathered at checked indices, and-ed with int64 comparisons of positions. GCC 12 left
    the loop scalar twice: `&` of a loaded bool (byte data) with a comparison (a mask),
    and the atomic store of check_index's error per element. Loaded bools are now
    comparisons of their byte (fs::load_bool) and a bad index sets a reduced flag
    (fs_bad): the loop compares int64 lanes as vectors (pcmpgtq / vpcmpq, on SSE4.2,
    AVX2 and AVX-512 alike)."""
    def fn(full, pos, am, batch):
        causal = full & (pos[None, :] <= pos[:, None])
        keep = causal[None, None] & am.bool()[batch[:, None, None, None], pos[None, None, None, :]]
        return torch.where(keep, 0.0, -1e9)

    g = torch.Generator().manual_seed(0)
    full = torch.tensor(True)
    pos = torch.arange(64)
    am = (torch.rand(4, 64, generator=g) > 0.2).long()
    batch = torch.arange(4)
    want = fn(full, pos, am, batch)
    got = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))(full, pos, am, batch)
    assert torch.equal(got, want)
    code = kernel_disassembly()
    assert code and any("pcmp" in text for text in code.values()), \
        "no kernel compares int64 lanes as vectors"
