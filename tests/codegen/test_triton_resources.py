"""Every `cuda` kernel fits the GPU's shared memory: compiled here, for sm_80 and sm_90,
without a GPU (targets/triton/resources.py).

A kernel whose binary needs more shared memory than the device has fails at its first
launch on the GPU only (ViT's training step did, at 299008 bytes on an H100, before dot
kernels compiled with one pipeline stage). The graphs: ViT's small training step
(`graphs/vit_train_small.ir`, traced from bench/models.py's vit_train: attention forward
and backward as batch kernels of several dot stages). And a launch that does not fit all
the same is configured again with smaller blocks (`TritonKernel.first_launch`).
"""
import os

import pytest

pytest.importorskip("triton")

from fusionstitch.codegen.kernel import hinted_value  # noqa: E402
from fusionstitch.fusion import make_plan  # noqa: E402
from fusionstitch.fusion.lowered import lower_plan  # noqa: E402
from fusionstitch.ir.text import parse  # noqa: E402
from fusionstitch.targets.triton import printer as P  # noqa: E402
from fusionstitch.targets.triton.resources import SHARED_LIMIT, launch_resources  # noqa: E402

from tests.codegen._sm90 import or_skip  # noqa: E402
from tests.codegen.test_golden_sources import split_graphs  # noqa: E402

HERE = os.path.dirname(__file__)
# (the zoo's kernels: tests/codegen/test_zoo_sm90.py, for sm_90)
SOURCES = {"vit_train_small": os.path.join(HERE, "graphs", "vit_train_small.ir")}


def kernels(name: str):
    with open(SOURCES[name]) as f:
        graphs = [parse(g) for g in split_graphs(f.read())]
    for g in graphs:
        for gid, k in lower_plan(make_plan(g, "stitch", "cuda"), "cuda").kernels.items():
            yield f"{g.name}#{gid}", P.TritonKernel(k, interpret=False)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_launch_fits_the_shared_memory_of_sm80_and_sm90(name):
    checked = 0
    for where, tk in kernels(name):
        syms = [hinted_value(s) for s in tk.kernel.syms]
        for arch in (80, 90):
            for r in or_skip(lambda: launch_resources(tk, syms, arch)):
                assert r.shared <= SHARED_LIMIT[arch], \
                    f"{name} {where} sm_{arch}: {r.shared} bytes of shared memory " \
                    f"(limit {SHARED_LIMIT[arch]}), launch {r.meta}"
                checked += 1
    assert checked


def test_dot_kernels_compile_without_software_pipelining():
    dots = [(w, tk) for w, tk in kernels("vit_train_small") if P.has_dot(tk.kernel)]
    assert dots
    for where, tk in dots:
        syms = [hinted_value(s) for s in tk.kernel.syms]
        assert {r.num_stages for r in or_skip(lambda: launch_resources(tk, syms, 90))} \
            == {1}, where


def test_a_launch_that_does_not_fit_runs_again_with_halved_blocks(monkeypatch):
    """The first try of each kernel raises what Triton raises for a binary over the
    device's shared memory; the kernel runs again with halved blocks, once, and the
    results are eager's."""
    import torch
    from triton.runtime.errors import OutOfResources

    import fusionstitch
    tries = []
    real = P.TritonKernel.launch

    def launch(self, launch, buffers, syms):
        meta = launch[0][0][2]
        tries.append((self.name, meta))
        if sum(1 for n, _ in tries if n == self.name) == 1:
            raise OutOfResources(299008, 232448, "shared memory")
        return real(self, launch, buffers, syms)

    monkeypatch.setattr(P.TritonKernel, "launch", launch)

    def f(x):
        return torch.softmax(x * 2.0, dim=-1) + 1.0
    x = torch.randn(64, 300)
    fusionstitch.reset_stats()
    got = torch.compile(f, backend=fusionstitch.backend(target="interpret"))(x)
    torch.testing.assert_close(got, f(x))
    assert tries and fusionstitch.stats()["triton_blocks_shrunk"] >= 1
    first, second = tries[0][1], tries[1][1]
    assert tries[0][0] == tries[1][0]
    blocks = [n for n in first if "BLOCK" in n]
    assert blocks and all(second[n] <= first[n] for n in blocks)
    assert any(second[n] < first[n] for n in blocks)
