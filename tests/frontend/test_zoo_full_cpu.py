"""Every zoo workload at FULL size, compiled for target="cpu" (generated C++), matches eager.

A result matches when its relative error (max |diff| / max |ref|) against eager fp32
is at most 1e-4, or when it is at least as close to the float64 result as eager
fp32 itself is (within 2x): large reductions (batch-norm gradients over 100k
elements) are summed in another order than torch's, and there eager fp32 is
itself ~1e-2 away from the exact value (Inductor lands at the same distance).
"""
import pytest
import torch

import fusionstitch
from bench import workloads as W

# one definition of the error measure and of the strict-mode fixture (autouse here too)
from test_zoo_numerics import RTOL, _strict, rel_err  # noqa: E402,F401


@pytest.mark.parametrize("name", W.names())
def test_full_size_cpu_matches_eager(name):
    ref = W.step(W.make(name, "full"))
    compiled = W.make(name, "full")
    sink: list = []
    fn = torch.compile(compiled.fn, backend=fusionstitch.backend(target="cpu", _sink=sink))
    fusionstitch.reset_stats()
    got = W.step(compiled, fn)
    launched = fusionstitch.stats()
    assert launched["fallbacks"] == 0
    exact = None
    for i, (g, r) in enumerate(zip(got, ref)):
        assert g.shape == r.shape and g.dtype == r.dtype, f"{name}: result {i}"
        err = rel_err(g, r)
        if err <= RTOL:
            continue
        if exact is None:
            exact = W.step(W.make(name, "full", dtype=torch.float64))
        ours, eager = rel_err(g, exact[i]), rel_err(r, exact[i])
        assert ours <= 2 * eager, (f"{name}: result {i}: {err:.2e} from eager fp32, "
                                   f"{ours:.2e} from fp64 (eager fp32: {eager:.2e})")
    # the plans that ran (what explain() reports) are what was launched
    plans = [e.plan for cg in sink for e in cg.specialisations.values()]
    assert launched["kernels_launched"] == sum(p.num_kernels for p in plans) > 0
    assert launched["library_calls"] == sum(p.num_library_calls for p in plans)
