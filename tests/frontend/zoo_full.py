"""One full-size zoo step compiled by fusionstitch against eager: the check shared by
``test_zoo_full_cpu.py`` (target cpu, fp32) and ``test_zoo_full_cuda.py`` (target cuda,
fp32 and bf16, on a GPU).

A result matches when its relative error (max |diff| / max |ref|) against eager in the
same dtype is at most ``rtol``, or when it is at least as close to the float64 result
as eager itself is (within 2x): large reductions (batch-norm gradients over 100k
elements) are summed in another order than torch's, and there eager fp32 is itself
~1e-2 away from the exact value (Inductor lands at the same distance); in bf16 every
intermediate eager rounds is a place where the two differ.
"""
import torch

import fusionstitch
import known_fallbacks
from bench import workloads as W
from fusionstitch.report.explain import sink_report
from test_zoo_numerics import rel_err


def _steps(inst, fn, n):
    """The results of the last of ``n`` steps (in-place updates carry over)."""
    for _ in range(n - 1):
        W.step(inst, fn)
    return W.step(inst, fn)


def check_full_size(name: str, target: str, dtype=torch.float32, rtol: float = 1e-4,
                    backend_options: dict | None = None, steps: int = 1) -> None:
    """``steps``: compare the last of this many steps (CUDA graphs replay from the third)."""
    device = "cuda" if target == "cuda" else "cpu"
    eager = W.make(name, "full", device=device, dtype=dtype)
    ref = _steps(eager, eager.fn, steps)
    compiled = W.make(name, "full", device=device, dtype=dtype)
    sink: list = []
    fn = torch.compile(compiled.fn, backend=fusionstitch.backend(
        target=target, _sink=sink, **(backend_options or {})))
    for _ in range(steps - 1):
        W.step(compiled, fn)
    fusionstitch.reset_stats()
    got = W.step(compiled, fn)
    launched = fusionstitch.stats()
    known_fallbacks.check(launched, sink_report(sink, "stitch", target), name)
    exact = None
    for i, (g, r) in enumerate(zip(got, ref)):
        assert g.shape == r.shape and g.dtype == r.dtype, f"{name}: result {i}"
        err = rel_err(g, r)
        if err <= rtol:
            continue
        if exact is None:
            inst = W.make(name, "full", device=device, dtype=torch.float64)
            exact = _steps(inst, inst.fn, steps)
        ours, eager = rel_err(g, exact[i]), rel_err(r, exact[i])
        assert ours <= 2 * eager, (f"{name}: result {i}: {err:.2e} from eager {dtype}, "
                                   f"{ours:.2e} from fp64 (eager {dtype}: {eager:.2e})")
    # the plans that ran (what explain() reports) are what was launched
    plans = [e.plan for cg in sink for e in cg.specialisations.values()]
    assert launched["kernels_launched"] == sum(p.num_kernels for p in plans) > 0
    assert launched["library_calls"] == sum(p.num_library_calls for p in plans)
