"""Which forward values a training graph's backward may recompute: only those it gets
back bit for bit.

AOTAutograd's min-cut rematerialisation partitioner (Inductor's) saves fewer activations
and lets the backward recompute cheap elementwise ones inside its own kernels. That is
sound only if the recomputed value equals the forward's exactly: the backward compares
some values with saved ones (amin's gradient goes to the elements equal to the saved
minimum, divided by their count; max pooling, hardtanh and threshold backward compare
too). A value one ulp off there is a wrong gradient, or NaN (the fuzzer's program in
tests/fuzz/regressions.py: a recomputed xlogy one ulp off the forward's left amin's
gradient a zero count).

Across our kernels, a value is reproduced exactly when it is made of IEEE operations
(each result correctly rounded, the same in vector and scalar code: the C++ kernels are
compiled with -ffp-contract=off, so nothing is fused into an FMA in one kernel and not
in another). It is not when it goes through a transcendental (exp, log, tanh, erf, pow:
vector polynomials in one kernel, libm in a scalar tail or loop of another), a reduction
(another kernel may sum in another order), or a float type narrower than 32 bits (a
kernel may keep an intermediate in float32 where another rounds it).

`mark_saved(joint)` tags every other forward tensor that the backward reads, directly or
through other forward values, with `CheckpointPolicy.MUST_SAVE`, which the partitioner
never recomputes (torch itself tags effectful ops and collectives so); `partition` is the
min-cut partitioner run on a graph so tagged.
"""
from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten
prims = torch.ops.prims

# elementwise ops whose lowering is IEEE arithmetic, comparisons, selection or copying
# (correctly rounded, or exact), plus layout ops and factories: the same bits in any
# kernel. Anything else (transcendentals, reductions, library calls, random ops) is
# saved for the backward, never recomputed.
EXACT = frozenset({
    # arithmetic, correctly rounded (IEEE 754: + - * / sqrt)
    aten.add, aten.sub, aten.rsub, aten.mul, aten.div, aten.neg, aten.abs, aten.sqrt,
    aten.rsqrt, aten.reciprocal, aten.square,
    # selection and comparisons: exact
    aten.maximum, aten.minimum, aten.clamp, aten.clamp_min, aten.clamp_max, aten.relu,
    aten.where, aten.eq, aten.ne, aten.lt, aten.le, aten.gt, aten.ge, aten.logical_and,
    aten.logical_or, aten.logical_not, aten.logical_xor, aten.bitwise_and,
    aten.bitwise_or, aten.bitwise_not, aten.bitwise_xor, aten.sign, aten.floor,
    aten.ceil, aten.trunc, aten.round, aten.masked_fill, aten.isnan, aten.isinf,
    aten.hardtanh, aten.threshold,
    # copies, layouts and casts (a cast is correctly rounded; narrow types are refused
    # by dtype below)
    aten._to_copy, prims.convert_element_type, aten.clone, aten.copy, aten.alias,
    aten.view, aten._unsafe_view, aten.reshape, aten.permute, aten.expand, aten.squeeze,
    aten.unsqueeze, aten.slice, aten.select, aten.t, aten.transpose, aten.cat,
    aten.constant_pad_nd, aten.index, aten.gather, aten.repeat,
    # factories of constants (not arange: torch steps a float range in double, a kernel
    # may not; not empty: its contents are whatever the memory held)
    aten.full, aten.full_like, aten.zeros, aten.zeros_like, aten.ones, aten.ones_like,
    aten.scalar_tensor,
})

# float types wide enough that a kernel computes in them, never above them
WIDE = frozenset({torch.float32, torch.float64})


def exact(node: torch.fx.Node) -> bool:
    """Whether every kernel of ours computes `node`'s value with the same bits."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    if packet not in EXACT or packet is aten.div and len(node.args) > 2 \
            or "rounding_mode" in node.kwargs:     # (floor and trunc divisions)
        return False
    # add/sub with alpha: torch's own kernel fuses alpha * b + a into an FMA (where a
    # part runs through torch); round to decimals scales by a power of ten
    if node.kwargs.get("alpha", 1) != 1 or node.kwargs.get("decimals", 0) != 0:
        return False
    vals = node.meta.get("val")
    for v in vals if isinstance(vals, (tuple, list)) else (vals,):
        if isinstance(v, torch.Tensor) and v.dtype.is_floating_point and v.dtype not in WIDE:
            return False
        if isinstance(v, torch.Tensor) and v.dtype.is_complex:
            return False
    return True


def _backward_nodes(graph: torch.fx.Graph) -> set:
    """The nodes that depend on a tangent (the backward's computation)."""
    seen: set = set()
    for n in graph.nodes:
        if n.op == "placeholder" and n.name.startswith("tangents") \
                or any(i in seen for i in n.all_input_nodes) and n.op != "output":
            seen.add(n)
    return seen


def mark_saved(joint: torch.fx.GraphModule) -> int:
    """Tag the forward values that are not `exact` and that the backward reads, directly
    or through forward values, MUST_SAVE (unless already tagged); the number tagged."""
    from torch.utils.checkpoint import CheckpointPolicy
    graph = joint.graph
    backward = _backward_nodes(graph)
    feeds: set = set()              # forward nodes a backward node depends on
    for n in reversed(list(graph.nodes)):
        if n in backward or n in feeds:
            for i in n.all_input_nodes:
                if i not in backward:
                    feeds.add(i)
    tagged = 0
    for n in graph.nodes:
        # tensors only: a size (SymInt arithmetic) is no kernel's, and a tuple's elements
        # are tagged as its getitems (as torch tags effectful ops' results)
        if n in feeds and n.op == "call_function" and "recompute" not in n.meta \
                and isinstance(n.meta.get("val"), torch.Tensor) and not exact(n):
            n.meta["recompute"] = CheckpointPolicy.MUST_SAVE
            tagged += 1
    return tagged


def partition(joint: torch.fx.GraphModule, joint_inputs, **kwargs):
    """AOTAutograd's `partition_fn`: the min-cut partitioner on `joint` tagged by
    `mark_saved`, so that the backward recomputes only what it gets back exactly."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    mark_saved(joint)
    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
