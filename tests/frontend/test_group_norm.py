"""Group norm goes through the pipeline: forward and backward, no op left to torch.

`native_group_norm` is decomposed (torch's reference, checked against the op by
test_decompositions.py) into the reductions and elementwise ops we lower, as layer and
batch norm are; its backward (`native_group_norm_backward`) likewise. Each case is judged
against eager and against a float64 run: within 1e-4 of eager (norm-wise, relative) and
no more than 3x further from float64 than eager is, on the cpu and interpret targets.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fusionstitch

RTOL = 1e-4


pytestmark = pytest.mark.usefixtures("strict_fresh")   # tests/conftest.py


# name: (input shape, groups, affine)
CASES = {
    "conv_features": ((2, 8, 5, 6), 4, True),   # wav2vec2's first feature convolution
    "sequence": ((3, 6, 10), 3, True),
    "one_group_no_affine": ((2, 4, 7), 1, False),
    "group_per_channel": ((2, 6, 3, 3), 6, True),
}


def _inputs(shape, affine, dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(dtype).requires_grad_()
    if not affine:
        return x, None, None
    w = (1 + 0.3 * torch.randn(shape[1], generator=g)).to(dtype).requires_grad_()
    b = (0.3 * torch.randn(shape[1], generator=g)).to(dtype).requires_grad_()
    return x, w, b


def _run(fn, shape, groups, affine, dtype=torch.float32):
    """The output and the gradients of sum(out * c) for a fixed random c."""
    x, w, b = _inputs(shape, affine, dtype)
    out = fn(x, w, b, groups)
    c = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    (out * c).sum().backward()
    return [out.detach()] + [t.grad for t in (x, w, b) if t is not None]


def _group_norm(x, w, b, groups):
    return torch.tanh(F.group_norm(x, groups, w, b, eps=1e-5))


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("target", ["cpu", "interpret"])
@pytest.mark.parametrize("case", list(CASES))
def test_group_norm_runs_through_the_pipeline(case, target):
    if target == "interpret":
        pytest.importorskip("triton")
    shape, groups, affine = CASES[case]
    eager = _run(_group_norm, shape, groups, affine)
    exact = _run(_group_norm, shape, groups, affine, torch.float64)
    compiled = torch.compile(_group_norm, backend=fusionstitch.backend(target=target))
    for call in range(2):
        got = _run(compiled, shape, groups, affine)
        for what, g, e, x in zip(("out", "dx", "dw", "db"), got, eager, exact):
            assert _rel(g, e) <= RTOL, (case, call, what, _rel(g, e))
            assert _rel(g, x) <= 3 * _rel(e, x) + 1e-6, (case, call, what, _rel(g, x),
                                                          _rel(e, x))
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0, s
    assert s["kernels_launched"] > 0, s
