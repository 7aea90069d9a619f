"""The decomposition table AOTAutograd applies before the frontend sees a graph.

torch's core-aten table, plus the composite ops we want to see inside (softmax, layer,
batch and group norm: the planner fuses the reductions and elementwise ops they are made
of, as XLA's HLO and the papers do), less the ops that must stay whole.

A decomposition stands in for its op everywhere below autograd: the op's backward
formula reads the decomposition's outputs (`_scaled_dot_product_flash_attention_for_cpu`'s
backward reads its second output as the logsumexp; torch's decomposition of it returned
the attention matrix there, and every SDPA gradient was wrong). So every entry we rely
on is checked against the op itself, outputs (count, shapes, dtypes, values) and
gradients, by tests/frontend/test_decompositions.py; an op whose decomposition is not
its op stays whole and runs as a library call (ir/ops.py).
"""
from __future__ import annotations

from functools import lru_cache

import torch

from ..ir.ops import ATTENTION, op_name

# Composite ops decomposed beyond core aten so the planner sees the reductions and
# elementwise ops inside them.
EXTRA = (
    "_softmax", "_log_softmax", "native_layer_norm", "native_batch_norm",
    "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
    "_native_batch_norm_legit_no_training", "native_group_norm", "linalg_vector_norm",
)

# Decompositions of torch's tables that are not their op (found by the checks of
# tests/frontend/test_decompositions.py), with the reason: the op runs whole instead.
WRONG = {
    # torch registers baddbmm's decomposition for every overload of the packet; on the
    # out_dtype overload (CUDA only) it takes out_dtype for beta
    "baddbmm.dtype": "binds out_dtype to beta",
}

# Ops torch runs whole, as library calls: every fused attention kernel (forward and
# backward, each SDPA backend), whose extra outputs (logsumexp, dropout RNG state) are
# what its backward reads (Inductor keeps them as fallback kernels too); and the above.
KEEP_WHOLE = ATTENTION | frozenset(WRONG)


def _keep_whole(op: torch._ops.OpOverload) -> bool:
    return op_name(op) in KEEP_WHOLE


def _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """ATen's own analytic formula of the fused weight-norm backward (the one its
    double backward uses), made of ops we lower; torch's tables have none."""
    return torch.ops.aten._weight_norm_differentiable_backward.default(
        grad_w, saved_v, saved_g, saved_norms, dim)


def _native_group_norm(x, weight, bias, n, c, hw, group, eps):
    """Group norm as `(x - mean) * rstd * weight + bias`. torch's decomposition folds the
    statistics into one scale and shift first (`x * (rstd * w) + (b - mean * rstd * w)`,
    as its CPU kernel does): on a group of one value the two products differ by their
    roundings, times rstd = 1/sqrt(eps) (a group of 7.1 came out 0.03 off its bias, eager
    0.2 off). Subtracting the mean first is exact there and closer to float64 elsewhere,
    as our layer and batch norm are. Statistics in float32 for half types, outputs in the
    input's dtype, as torch's."""
    from torch._prims_common import get_computation_dtype
    compute = get_computation_dtype(x.dtype)
    rows = x.reshape(n, group, -1).to(compute)
    var, mean = torch.var_mean(rows, dim=-1, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    y = ((rows - mean) * rstd).reshape(x.shape)
    per_channel = (1, c) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.reshape(per_channel)
    if bias is not None:
        y = y + bias.reshape(per_channel)
    return (y.to(x.dtype), mean.reshape(n, group).to(x.dtype),
            rstd.reshape(n, group).to(x.dtype))


# Decompositions of ours, for ops torch's tables leave whole or decompose less precisely
# (checked like the others)
OURS = {
    "_weight_norm_interface_backward.default": _weight_norm_interface_backward,
    "native_group_norm.default": _native_group_norm,
}


@lru_cache(maxsize=1)
def _table() -> dict:
    from torch._decomp import core_aten_decompositions, get_decompositions
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([getattr(torch.ops.aten, n) for n in EXTRA
                                     if hasattr(torch.ops.aten, n)]))
    for name, fn in OURS.items():
        packet, overload = name.split(".")
        table[getattr(getattr(torch.ops.aten, packet), overload)] = fn
    return {op: fn for op, fn in table.items() if not _keep_whole(op)}


def decompositions() -> dict:
    """{OpOverload: decomposition} for AOTAutograd (a fresh dict: callers may change it)."""
    return dict(_table())


def partitioner(target=None) -> dict:
    """AOTAutograd's `partition_fn` for training graphs, as keyword arguments, for a graph
    whose kernels `target` (a Target, or None: unknown) generates.

    FUSIONSTITCH_PARTITION picks it:
    - `auto` (the default): `exact` where the target's kernels give a value the same bits
      wherever they compute it (`Target.exact_arithmetic`: cpu), else `default`;
    - `exact`: AOTAutograd's min-cut rematerialisation partitioner (Inductor's), the
      backward recomputing only values it gets back bit for bit (frontend/recompute.py);
      the forward saves fewer activations (lstm 0.287 -> 0.271 ms, gpt2_train 0.904 ->
      0.825 ms, birnn 0.372 -> 0.355 ms);
    - `mincut`: the min-cut partitioner as Inductor runs it, recomputing transcendentals
      too. Unsafe with our kernels: a value recomputed one ulp off where the backward
      compares it with a saved one is a wrong gradient (the fuzzer's amin/xlogy program
      in tests/fuzz/regressions.py: NaN). For comparisons only;
    - `default`: AOTAutograd's default partitioner (every value the backward needs is
      saved)."""
    import importlib.util
    import os
    choice = os.environ.get("FUSIONSTITCH_PARTITION", "auto")
    if choice not in ("auto", "exact", "mincut", "default"):
        raise ValueError(f"FUSIONSTITCH_PARTITION={choice!r}: expected 'auto', 'exact', "
                         "'mincut' or 'default'")
    if choice == "auto":
        # (`exact` was opt-in from bc0a0d5 to 6c5087a: kernels computed a libm function
        # with different libmvec variants in a loop's body, epilogue and tail, so a value
        # computed twice could differ from itself, and `exact` moves comparisons into the
        # forward's kernels; targets/cpp/vecmath.py now calls one variant everywhere)
        choice = "exact" if getattr(target, "exact_arithmetic", False) else "default"
    if choice == "default" or importlib.util.find_spec("networkx") is None:
        return {}       # (the min-cut solver needs networkx, a dependency of ours)
    if choice == "exact":
        from .recompute import partition
        return {"partition_fn": partition}
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    return {"partition_fn": min_cut_rematerialization_partition}
