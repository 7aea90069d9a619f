"""Every kernel the stitch plan of every zoo workload generates for the cuda target, in
fp32 and bf16, compiled by Triton for sm_90 with no GPU: the GPU path's sources type-check
and lower to a cubin (the interpreter, which CI runs them on, forgives more), including
both stages of a split reduction; and each binary fits sm_90's shared memory (Triton
refuses a kernel that does not only when it loads it, on the GPU)."""
import pytest
import torch

from bench import workloads as W
from bench.plan_table import capture
from fusionstitch.targets.triton import split as S
from fusionstitch.fusion.lowered import lower_plan
from fusionstitch.fusion import make_plan
from fusionstitch.targets.triton.resources import SHARED_LIMIT
from tests.codegen._sm90 import compile_sm90


def _variants(k):
    """Constexpr overrides to compile: as the sizes pick, and each split stage."""
    yield {}
    tags = [f"{i}" for i, c in enumerate(k.components) if S.splittable(c)]
    if tags:
        for stage in (1, 2):
            yield {**{f"SPLIT{t}": 4 for t in tags}, "STAGE": stage}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", W.names())
def test_zoo_kernels_compile_for_sm90(name, dtype):
    compiled = 0
    for g in capture(name, "small", dtype=dtype):
        plan = make_plan(g, "stitch", "cuda")
        for gid, k in lower_plan(plan, "cuda").kernels.items():
            for meta in _variants(k):
                src, out = compile_sm90(k, **meta)
                assert "cubin" in out.asm, (name, gid, meta)
                assert out.metadata.shared <= SHARED_LIMIT[90], (name, gid, meta)
                compiled += 1
    assert compiled > 0
