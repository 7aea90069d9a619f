"""Every zoo workload at FULL size, compiled for target="cuda" (generated Triton), matches
eager on the GPU in fp32 and bf16, with and without CUDA graphs (the measure:
``zoo_full.py``; bf16 within 2e-2 of eager bf16, or as close to float64 as eager is).
Skipped without a CUDA GPU."""
import pytest
import torch

from bench import workloads as W

from test_zoo_numerics import RTOL, _strict  # noqa: E402,F401
from zoo_full import check_full_size  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="needs a CUDA GPU")]


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, RTOL), (torch.bfloat16, 2e-2)],
                         ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", W.names())
def test_full_size_cuda_matches_eager(name, dtype, rtol):
    check_full_size(name, "cuda", dtype, rtol)


@pytest.mark.parametrize("name", W.names())
def test_full_size_cuda_graphs_matches_eager(name):
    """Three steps: the first runs uncaptured, the second captures, the third replays."""
    check_full_size(name, "cuda", torch.float32, RTOL, {"cuda_graphs": True}, steps=3)
