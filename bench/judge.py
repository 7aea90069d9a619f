"""Judge a compiled step's tensors against eager and a float64 run of the same step.

Used by tests/models/model_judge.py (the model suite in CI) and by ``bench/run.py``
(whether a variant matches eager). Per tensor (an output, the loss, a parameter's
gradient, a floating buffer):

* against eager in the same dtype: ``|c - e| <= rtol * scale`` (norm-wise), where the
  scale is ``|e|``, or, for a gradient that is zero in exact arithmetic (its float64 norm
  below ZERO_GRADIENT of the step's largest), the step's largest gradient norm: what is
  left of such a gradient is rounding of the model's sums, and an element-wise or
  per-tensor relative error of it is noise (a BERT training step's is ~1 for eager's and
  Inductor's results alike); a result at least as close to the float64 run as eager's
  passes this rule (the difference is then eager's own error: cuDNN's TF32
  convolutions on a GPU are 1e-3 from exact);
* against the float64 run ``f``: ``|c - f| <= slack * max(|e - f|, 16 u |f|)``: no further
  from it than `slack` times eager's own error. Where eager is within a few roundings of
  exact, any other order of the same sums may be too: the floor is the worst case of a
  pairwise summation of up to 2^16 terms, log2(n) u |f| (Higham, Accuracy and Stability,
  4.2), with u the unit roundoff of the dtype (2^-24 for IEEE single). For a gradient
  the floor is at least that of the step's largest gradient norm, ``16 u max|g|``, and a
  gradient within `slack` times it of float64 passes the first rule too: a gradient that
  nearly cancels in exact arithmetic (a convolution's weight before a training batch
  norm of one channel, a batch norm's scale before another batch norm: invariant to
  their scale but for the norm's epsilon) is a sum of terms of the step's gradient
  scale, and float32 sums of them carry that scale's rounding (Higham 4.2: the error of
  a sum is bounded by its terms' magnitudes, not its result's). tests/fuzz/cnn.py's
  random networks (2026-12-03): a 1x1 convolution's weight gradient of norm 1.2e-6
  beside a largest one of 38, 1.2e-6 from float64 in eager's decomposed float32 run,
  2.6e-6 in Inductor's, 5.9e-6 in ours, where torch's batch-norm kernel, which
  accumulates in double, is 2.2e-7 away.

Eager may run the same step in more than one way: a convolutional network in NCHW or in
channels-last memory, where oneDNN sums in other orders (mobilenet_v2's stem batch-norm
weight gradient: 8.0e-5 from float64 NCHW, 3.0e-4 channels-last, 2026-12-02). A tensor
may come with eager's values of its other ways; then "eager" above is the nearest of
them for the first rule and the farthest from float64 for the second: a compiled step
that runs its convolutions channels-last is held to eager's channels-last error, not to
the luck of its NCHW one.

Infinities and NaNs must be where eager has them (a masked score's -inf); the finite
part is judged.
"""
from __future__ import annotations

import torch

RTOL = 1e-4
SLACK = 3.0
PAIRWISE_LEVELS = 16     # log2 of the longest sum the floor allows for
ZERO_GRADIENT = 1e-10   # of the step's largest gradient norm, in float64


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def _norm(t) -> float:
    return t.detach().double().norm().item()


def _diff(a, b) -> float:
    return (a.detach().double() - b.detach().double()).norm().item()


def judge_tensors(items, rtol: float = RTOL, slack: float = SLACK) -> list[str]:
    """Every tensor of `items` that breaks a rule, as a readable line (empty: all good).

    `items`: (what, compiled, eager, exact, is_grad) of one step, optionally followed by
    eager's values of its other ways of running the step (see the module docstring); a
    gradient may be None (no gradient: the compiled one must be None or zero where eager's
    is None)."""
    items = list(items)
    grads = [(it[2], it[3]) for it in items
             if it[4] and it[2] is not None and it[3] is not None]
    largest = max((_norm(f) for _, f in grads), default=0.0)
    largest32 = max((_norm(e) for e, _ in grads), default=0.0)
    bad = []
    for what, cv, ev, fv, is_grad, *others in items:
        others = [o for o in (others[0] if others else ()) if o is not None]
        if ev is None or fv is None:
            if cv is not None and _norm(cv) > 0:
                bad.append(f"{what}: a gradient where eager has none")
            continue
        if cv is None:
            bad.append(f"{what}: no gradient where eager has one")
            continue
        if cv.shape != ev.shape or cv.dtype != ev.dtype:
            bad.append(f"{what}: {cv.dtype}{list(cv.shape)}, eager {ev.dtype}{list(ev.shape)}")
            continue
        if not cv.is_floating_point():
            if not torch.equal(cv, ev):
                bad.append(f"{what}: differs from eager")
            continue
        cv, ev, fv = (t.detach().cpu() for t in (cv, ev, fv))
        finite = torch.isfinite(ev)
        if not torch.equal(torch.isfinite(cv), finite) or not torch.equal(
                cv[~finite], ev[~finite]) and not bool(cv[~finite].isnan().all()):
            bad.append(f"{what}: infinities or NaNs where eager has none, or other ones")
            continue
        others = [o.detach().cpu() for o in others if o.shape == ev.shape]
        if not bool(finite.all()):
            cv, ev, fv = cv[finite], ev[finite], fv[finite]
            others = [o[finite] for o in others]
        scale, exact_scale = _norm(ev), _norm(fv)
        if is_grad and exact_scale <= ZERO_GRADIENT * largest:
            scale, exact_scale = largest32, largest
        err = min(_diff(cv, e) for e in (ev, *others))
        mine, theirs = _diff(cv, fv), max(_diff(e, fv) for e in (ev, *others))
        # a gradient's rounding noise is of the step's gradient scale, not its own
        noise = PAIRWISE_LEVELS * unit_roundoff(ev.dtype) * largest if is_grad else 0.0
        if err > rtol * scale and mine > max(theirs, slack * noise):
            bad.append(f"{what}: {err / max(scale, 1e-30):.2e} from eager "
                       f"(relative, norm-wise; allowed {rtol:.0e})")
        floor = PAIRWISE_LEVELS * unit_roundoff(ev.dtype) * exact_scale
        if mine > slack * max(theirs, floor, noise):
            bad.append(f"{what}: {mine:.3e} from float64, eager {theirs:.3e} "
                       f"({mine / max(theirs, 1e-300):.1f}x; allowed {slack:.0f}x)")
    return bad


def judge_step(got: list, eager: list, exact: list, n_grads: int, n_buffers: int,
               rtol: float = RTOL, slack: float = SLACK) -> list[str]:
    """`judge_tensors` of three flat results of `bench.workloads.step` (outputs, then
    `n_grads` gradients, then `n_buffers` buffers)."""
    if not (len(got) == len(eager) == len(exact)):
        return [f"{len(got)} tensors, eager {len(eager)}, float64 {len(exact)}"]
    n_out = len(got) - n_grads - n_buffers
    kinds = ["output"] * n_out + ["grad"] * n_grads + ["buffer"] * n_buffers
    items = [(f"{k} {i}", c, e, f, k == "grad")
             for i, (k, c, e, f) in enumerate(zip(kinds, got, eager, exact))]
    return judge_tensors(items, rtol, slack)
