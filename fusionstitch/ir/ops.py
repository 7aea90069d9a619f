"""The op table: category, shape/dtype rule and reference implementation of each op.

IR op names are aten overload names without the namespace (`add.Tensor`,
`sum.dim_IntList`), or `ns.op.overload` for other namespaces
(`prims.convert_element_type.default`). The reference implementation is the
aten overload itself, so the reference interpreter *is* eager PyTorch at the
aten level; the shape/dtype rule runs the same overload on meta tensors.

Ops that are not in the table are still representable: `lookup` gives them a
`library` definition flagged `fallback=True` (run by torch, never fused), which
the runtime counts in `stats()["fallbacks"]` on every call and the frontend logs per graph.
"""
from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import torch

from .graph import (CONSTANT, GETITEM, PARAMETER, Ref, TensorLiteral, TensorType,
                    TupleType, Type, dtype_name)

# How an op, or a group of ops, runs (fusion/plan.py's group kinds, node_kind): one
# generated kernel, one library call (torch / a vendor library), or for free (views)
KERNEL, LIBRARY, FREE = "kernel", "library", "free"


class Category(str, enum.Enum):
    """Op categories, in the papers' words (XLA HLO classes)."""

    ELEMENTWISE = "elementwise"      # same-shape pointwise math, casts, compares, where
    BROADCAST = "broadcast"          # expand: replicate along new/size-1 dims
    RESHAPE = "reshape"              # view/bitcast of a contiguous buffer: free
    TRANSPOSE = "transpose"          # permute/transpose: a layout change
    DATA_MOVEMENT = "data_movement"  # slice, concat, gather, scatter, pad, index
    REDUCE = "reduce"                # sum/mean/max/var... and softmax-like row ops
    DOT = "dot"                      # mm, bmm, addmm: GEMMs (library calls on GPU)
    LIBRARY = "library"              # convolution and anything run by torch / vendor libs
    SOURCE = "source"                # parameters, constants, creation ops (full, arange, rand)
    TUPLE = "tuple"                  # getitem on a multi-result op: free


@dataclass(frozen=True)
class OpDef:
    name: str
    category: Category
    random: bool = False      # draws from the global RNG: never CSE'd or folded
    view: bool = False        # result aliases its first input (must stay a real view)
    fallback: bool = False    # not in the table: run by torch, logged, counted
    # op kinds the planners and code generators ask about (the tables below say which
    # ops have each; SIMPLE_REDUCTIONS etc. are views of these flags):
    # a reduction whose reduced dims are read from its arguments ("dim") or that reduces
    # every dim ("full"), which schedules and lowerings handle; None for the others
    reduction: str | None = None
    two_pass: bool = False      # a reduction lowered in two passes (mean, then squares)
    fusible_dot: bool = False   # a GEMM a planner may compose into a kernel when small
    scatter: bool = False       # writes data-dependent positions: a kernel of its own
    expensive: bool = False     # too costly to recompute (XLA's IsExpensive)
    branching: bool = False     # selects between sources per element (concat, pad):
                                # a fused consumer recomputes both branches
    logical_reshape: bool = False   # result holds the input's elements in the same order

    @property
    def simple_reduction(self) -> bool:
        return self.reduction is not None

    @property
    def is_library(self) -> bool:
        return self.category in (Category.LIBRARY, Category.DOT)

    @property
    def impl(self) -> Callable:
        return resolve_overload(self.name)


def _names(text: str) -> list[str]:
    return text.split()


_ELEMENTWISE = _names("""
    abs.default neg.default exp.default exp2.default log.default log2.default log10.default
    log1p.default expm1.default sqrt.default rsqrt.default sin.default cos.default tan.default
    asin.default acos.default atan.default sinh.default cosh.default tanh.default
    asinh.default acosh.default atanh.default
    sigmoid.default relu.default gelu.default silu.default erf.default erfc.default erfinv.default
    reciprocal.default sign.default sgn.default floor.default ceil.default round.default trunc.default
    frac.default square.default
    pow.Tensor_Scalar pow.Tensor_Tensor pow.Scalar
    add.Tensor add.Scalar sub.Tensor sub.Scalar rsub.Scalar rsub.Tensor mul.Tensor mul.Scalar
    div.Tensor div.Scalar div.Tensor_mode div.Scalar_mode
    maximum.default minimum.default fmax.default fmin.default
    clamp.default clamp.Tensor clamp_min.default clamp_max.default clamp_min.Tensor clamp_max.Tensor
    where.self where.ScalarOther where.ScalarSelf where.Scalar
    eq.Tensor eq.Scalar ne.Tensor ne.Scalar lt.Tensor lt.Scalar le.Tensor le.Scalar
    gt.Tensor gt.Scalar ge.Tensor ge.Scalar
    logical_and.default logical_or.default logical_not.default logical_xor.default
    bitwise_and.Tensor bitwise_and.Scalar bitwise_or.Tensor bitwise_or.Scalar
    bitwise_xor.Tensor bitwise_not.default
    isnan.default isinf.default isfinite.default atan2.default fmod.Tensor fmod.Scalar
    remainder.Tensor remainder.Scalar hypot.default copysign.Tensor nan_to_num.default
    lerp.Scalar lerp.Tensor addcmul.default addcdiv.default
    sigmoid_backward.default tanh_backward.default threshold_backward.default
    gelu_backward.default silu_backward.default hardtanh.default leaky_relu.default
    elu.default softplus.default mish.default hardsigmoid.default hardswish.default
    logit.default xlogy.Tensor heaviside.default
    _to_copy.default clone.default copy.default alias_copy.default
    prims.convert_element_type.default prims.fma.default lift_fresh_copy.default
""")
_BROADCAST = _names("expand.default expand_copy.default prims.broadcast_in_dim.default")
_RESHAPE = _names("""
    view.default _unsafe_view.default reshape.default view_copy.default alias.default
    squeeze.default squeeze.dim squeeze.dims unsqueeze.default flatten.using_ints
    unflatten.int view.dtype view_as_real.default view_as_complex.default
""")
_VIEWS = frozenset(_names("""
    view.default alias.default squeeze.default squeeze.dim squeeze.dims
    unsqueeze.default expand.default permute.default t.default transpose.int slice.Tensor
    select.int as_strided.default diagonal.default unfold.default view.dtype split.Tensor
    split_with_sizes.default unbind.int view_as_real.default view_as_complex.default
    flatten.using_ints unflatten.int narrow.default
"""))
_TRANSPOSE = _names("permute.default t.default transpose.int permute_copy.default")
_DATA_MOVEMENT = _names("""
    slice.Tensor select.int cat.default stack.default index.Tensor index_select.default
    gather.default scatter.src scatter.value scatter_add.default scatter_reduce.two
    index_put.default index_add.default _unsafe_index.Tensor _unsafe_index_put.default
    embedding.default embedding_dense_backward.default constant_pad_nd.default
    slice_scatter.default select_scatter.default diagonal_scatter.default split.Tensor
    split_with_sizes.default unbind.int flip.default roll.default repeat.default
    as_strided.default as_strided_scatter.default narrow.default diagonal.default
    unfold.default masked_fill.Scalar masked_fill.Tensor tril.default triu.default
    slice_copy.Tensor select_copy.int
""")
_REDUCE = _names("""
    sum.default sum.dim_IntList mean.default mean.dim amax.default amin.default
    max.default max.dim min.default min.dim argmax.default argmin.default prod.default prod.dim_int
    var.correction var.dim var_mean.correction std.correction any.default any.dim any.dims
    all.default all.dim logsumexp.default norm.ScalarOpt_dim linalg_vector_norm.default
    _softmax.default _log_softmax.default _softmax_backward_data.default
    _log_softmax_backward_data.default native_layer_norm.default
    native_layer_norm_backward.default nll_loss_forward.default nll_loss_backward.default
    log_sigmoid_forward.default log_sigmoid_backward.default
    _native_batch_norm_legit_functional.default _native_batch_norm_legit_no_training.default
    native_batch_norm.default native_batch_norm_backward.default
""")
_DOT = _names("mm.default bmm.default addmm.default baddbmm.default dot.default mv.default")
_LIBRARY = _names("""
    convolution.default convolution_backward.default max_pool2d_with_indices.default
    max_pool2d_with_indices_backward.default avg_pool2d.default avg_pool2d_backward.default
    _adaptive_avg_pool2d.default _adaptive_avg_pool2d_backward.default
    cumsum.default cumprod.default sort.default topk.default
""") + _names("""
    _scaled_dot_product_flash_attention_for_cpu.default
    _scaled_dot_product_flash_attention_for_cpu_backward.default
    _scaled_dot_product_flash_attention.default _scaled_dot_product_flash_attention_backward.default
    _scaled_dot_product_efficient_attention.default
    _scaled_dot_product_efficient_attention_backward.default
    _scaled_dot_product_cudnn_attention.default _scaled_dot_product_cudnn_attention_backward.default
    _scaled_dot_product_fused_attention_overrideable.default
    _scaled_dot_product_fused_attention_overrideable_backward.default
    _flash_attention_forward.default _flash_attention_backward.default
    _efficient_attention_forward.default _efficient_attention_backward.default
""") + _names("prims.device_put.default") + _names("""
    _assert_async.default _assert_async.msg
""")   # a copy between devices (frontend/devices.py); a check of a tensor's truth (EFFECTS)
# torch's fused attention kernels (every scaled_dot_product_attention backend, forward and
# backward) run as library calls, as Inductor keeps them as fallback kernels: their outputs
# (the logsumexp, the RNG state of dropout) are what their backward reads, so a
# decomposition must not stand in for them (frontend/decompositions.py keeps them whole)
ATTENTION = frozenset(n for n in _LIBRARY if "attention" in n)
_SOURCE = _names("""
    full.default zeros.default ones.default empty.memory_format empty_strided.default
    scalar_tensor.default arange.default arange.start arange.start_step
    full_like.default zeros_like.default ones_like.default empty_like.default new_zeros.default
    new_ones.default new_full.default new_empty.default new_empty_strided.default
    rand.default randn.default rand_like.default randn_like.default bernoulli.p bernoulli.default
    native_dropout.default randint.low randperm.default
    prims.iota.default
""")


def _seeded(name: str) -> bool:
    """torch tags the op as drawing from the RNG (an attention op's dropout, when
    dropout_p > 0): it must be neither merged with a twin nor dropped."""
    packet, overload = name.split(".")
    op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
    return op is None or torch.Tag.nondeterministic_seeded in op.tags


# Ops called for their effect alone (no result; their schema returns nothing): a check
# that raises, as eager's does, when a tensor is false (an MoE router's `torch._assert_async`).
# Library calls that stand where the graph has them, never dropped, merged or folded
# (passes/_effects.py); their IR type is the empty tuple (`effect_type`).
EFFECTS = frozenset(_names("_assert_async.default _assert_async.msg"))
_RANDOM = frozenset(_names("""
    rand.default randn.default rand_like.default randn_like.default bernoulli.p bernoulli.default
    native_dropout.default randint.low randperm.default
""")) | frozenset(n for n in ATTENTION if _seeded(n))


# -- op kinds (OpDef's flags) -------------------------------------------------------------
# Reductions whose reduced dims we can read from the arguments, and those of every dim.
_DIM_REDUCTIONS = _names("""
    sum.dim_IntList mean.dim amax.default amin.default max.dim min.dim
    argmax.default argmin.default prod.dim_int var.correction var.dim
    var_mean.correction std.correction any.dim any.dims all.dim
    logsumexp.default linalg_vector_norm.default
""")
_FULL_REDUCTIONS = _names("""
    sum.default mean.default max.default min.default prod.default any.default all.default
""")
_TWO_PASS = _names("var_mean.correction var.correction var.dim std.correction")
# GEMMs a planner may compose into a kernel when small (fusion/legality decides "small").
_FUSIBLE_DOTS = _names("bmm.default mm.default addmm.default")
# Ops that write data-dependent positions (scatter-like): each runs as its own kernel,
# since fusing them needs atomics or a second pass the code generators do not have.
_SCATTER = _names("""
    scatter.src scatter.value scatter_add.default scatter_reduce.two
    index_put.default index_add.default _unsafe_index_put.default
    embedding_dense_backward.default as_strided_scatter.default
""")
# XLA's ops too costly to recompute (instruction_fusion.cc IsExpensive: divide,
# power, sqrt/rsqrt, exp/log, trigonometric, tanh, logistic, erf, atan2,
# remainder), in our IR's names, plus composite activations built from them.
_EXPENSIVE = _names("""
    exp.default exp2.default expm1.default log.default log2.default log10.default log1p.default
    sqrt.default rsqrt.default reciprocal.default sin.default cos.default tan.default
    asin.default acos.default atan.default sinh.default cosh.default tanh.default
    asinh.default acosh.default atanh.default sigmoid.default erf.default erfc.default
    erfinv.default pow.Tensor_Scalar pow.Tensor_Tensor pow.Scalar div.Tensor div.Scalar
    div.Tensor_mode div.Scalar_mode atan2.default fmod.Tensor fmod.Scalar remainder.Tensor
    remainder.Scalar hypot.default gelu.default gelu_backward.default silu.default
    silu_backward.default softplus.default mish.default elu.default logit.default
    xlogy.Tensor addcdiv.default
""")
_BRANCHING = _names("cat.default constant_pad_nd.default")
# Pure logical reshapes: the result holds the input's elements in the same order.
_LOGICAL_RESHAPES = _names("""
    view.default _unsafe_view.default reshape.default alias.default
    squeeze.default squeeze.dim squeeze.dims unsqueeze.default
""")
_KINDS = (("two_pass", _TWO_PASS), ("fusible_dot", _FUSIBLE_DOTS), ("scatter", _SCATTER),
          ("expensive", _EXPENSIVE), ("branching", _BRANCHING),
          ("logical_reshape", _LOGICAL_RESHAPES))


def _build_table() -> dict[str, OpDef]:
    table: dict[str, OpDef] = {}
    for cat, names in ((Category.ELEMENTWISE, _ELEMENTWISE), (Category.BROADCAST, _BROADCAST),
                       (Category.RESHAPE, _RESHAPE), (Category.TRANSPOSE, _TRANSPOSE),
                       (Category.DATA_MOVEMENT, _DATA_MOVEMENT), (Category.REDUCE, _REDUCE),
                       (Category.DOT, _DOT), (Category.LIBRARY, _LIBRARY),
                       (Category.SOURCE, _SOURCE)):
        for n in names:
            assert n not in table, f"op {n} listed twice in the op table"
            table[n] = OpDef(n, cat, random=n in _RANDOM, view=n in _VIEWS)
    from dataclasses import replace
    flags = [("reduction", _DIM_REDUCTIONS, "dim"), ("reduction", _FULL_REDUCTIONS, "full")]
    flags += [(kind, names, True) for kind, names in _KINDS]
    for kind, names, value in flags:
        for n in names:
            assert n in table, f"op kind {kind}: {n} is not in the op table"
            table[n] = replace(table[n], **{kind: value})
    table[PARAMETER] = OpDef(PARAMETER, Category.SOURCE)
    table[CONSTANT] = OpDef(CONSTANT, Category.SOURCE)
    table[GETITEM] = OpDef(GETITEM, Category.TUPLE)
    return table


OP_TABLE: dict[str, OpDef] = _build_table()


def ops_where(flag: str) -> frozenset[str]:
    """The ops of the table whose OpDef has `flag` (a field or property) set."""
    return frozenset(n for n, d in OP_TABLE.items() if getattr(d, flag))


# views of the flags, for membership tests (`node.op in SIMPLE_REDUCTIONS`)
SIMPLE_REDUCTIONS = ops_where("simple_reduction")
FULL_REDUCTIONS = frozenset(n for n, d in OP_TABLE.items() if d.reduction == "full")
TWO_PASS_REDUCTIONS = ops_where("two_pass")
FUSIBLE_DOTS = ops_where("fusible_dot")
SCATTER_OPS = ops_where("scatter")
# scatters that `one_write_scatter` may find elementwise
_ONE_WRITE = frozenset({"scatter.value", "scatter.src"})
EXPENSIVE_OPS = ops_where("expensive")
BRANCHING_OPS = ops_where("branching")
LOGICAL_RESHAPES = ops_where("logical_reshape")


def op_name(overload: Any) -> str:
    """IR name of a torch OpOverload: `add.Tensor`, or `prims.iota.default`."""
    ns = overload.namespace
    base = f"{overload._opname}.{overload._overloadname}"
    return base if ns == "aten" else f"{ns}.{base}"


@lru_cache(maxsize=None)
def resolve_overload(name: str) -> Callable:
    """The torch OpOverload for an IR op name (structural ops have none)."""
    if name in (PARAMETER, CONSTANT, GETITEM):
        raise KeyError(f"{name} is structural and has no torch overload")
    parts = name.split(".")
    if len(parts) == 2:
        ns, packet, overload = "aten", parts[0], parts[1]
    elif len(parts) == 3:
        ns, packet, overload = parts
    else:
        raise KeyError(f"malformed op name {name!r}: expected 'op.overload' or 'ns.op.overload'")
    for attempt in range(2):
        try:
            return getattr(getattr(getattr(torch.ops, ns), packet), overload)
        except (AttributeError, RuntimeError):
            if attempt == 0 and ns == "prims":
                # some prims (e.g. prims.fma, which decompositions emit) are registered
                # by Inductor's module of extra prims, imported on demand
                importlib.import_module("torch._inductor.inductor_prims")
    raise KeyError(f"unknown op {name!r}: no torch.ops.{ns}.{packet}.{overload}")


def lookup(name: str) -> OpDef:
    """The op's definition; an op outside the table is a fallback library op."""
    d = OP_TABLE.get(name)
    if d is not None:
        return d
    resolve_overload(name)  # raises with the op named if torch does not know it either
    return OpDef(name, Category.LIBRARY, fallback=True)


def category(name: str) -> Category:
    return lookup(name).category


def view_root(graph, name: str) -> str:
    """The value whose memory `name` is in `graph`: through chains of views, their first
    argument (runtime/inplace.py, passes/distinct_outputs.py)."""
    node = graph[name]
    while lookup(node.op).view and node.args and isinstance(node.args[0], Ref):
        node = graph[node.args[0].name]
    return node.name


# --- reference semantics and the shape/dtype rule --------------------------------------

def _materialise(value: Any, env: dict[str, Any]) -> Any:
    if isinstance(value, Ref):
        return env[value.name]
    if isinstance(value, TensorLiteral):
        return value.value
    if isinstance(value, tuple):
        return [_materialise(v, env) for v in value]  # aten takes lists for Tensor[] / int[]
    return value


def call_reference(op: str, args: tuple, kwargs: tuple, env: dict[str, Any]) -> Any:
    """Run one op on the values in `env` (real or meta tensors)."""
    if op == GETITEM:
        return _materialise(args[0], env)[args[1]]
    if op == CONSTANT:
        return dict(kwargs)["value"].value
    fn = resolve_overload(op)
    return fn(*[_materialise(a, env) for a in args],
              **{k: _materialise(v, env) for k, v in kwargs})


_NUMBERS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


def effect_type(op: str) -> Type | None:
    """The IR type of the None an op called for its effect returns (its schema returns
    nothing: `_assert_async`): the empty tuple; None for any other op."""
    if op in (PARAMETER, CONSTANT, GETITEM):
        return None
    try:
        returns = resolve_overload(op)._schema.returns
    except Exception:          # not an aten op
        return None
    return TupleType(()) if not returns else None


def type_of_value(value: Any, op: str = "?") -> Type:
    """The IR type of a torch result (tensor, or tuple/list of tensors and Nones).

    A number inside a tuple (flash attention's max_q / max_k) has no tensor type: its
    element is None, as for a None result, and the frontend reads the number itself."""
    if isinstance(value, torch.Tensor):
        return TensorType(tuple(int(d) for d in value.shape), dtype_name(value.dtype))
    if isinstance(value, (tuple, list)):
        return TupleType(tuple(None if v is None or isinstance(v, _NUMBERS)
                               else type_of_value(v, op) for v in value))
    effect = effect_type(op) if value is None else None
    if effect is not None:
        return effect
    raise TypeError(f"op {op} returned {type(value).__name__}; expected a tensor or a tuple "
                    "of tensors")


def _meta(t: TensorType) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.torch_dtype, device="meta")


def infer_type(op: str, args: tuple, kwargs: tuple, types) -> Type:
    """Shape/dtype rule: the op's result type from its argument types (`types[name]`).

    Runs the aten overload on meta tensors, so the rule is torch's own.
    Raises TypeError naming the op when the arguments do not fit its schema.
    """
    if op == GETITEM:
        src = types[args[0].name]
        if not isinstance(src, TupleType):
            raise TypeError(f"getitem on %{args[0].name}: expected a tuple, got {src}")
        elem = src.elements[args[1]]
        if elem is None:
            raise TypeError(f"getitem {args[1]} of %{args[0].name} is None")
        return elem
    if op == CONSTANT:
        return dict(kwargs)["value"].type
    from .graph import walk_refs
    needed = {r.name for r in walk_refs(args)}
    for _, v in kwargs:
        needed.update(r.name for r in walk_refs(v))
    env = {}
    for name in needed:
        t = types[name]
        if isinstance(t, TensorType):
            env[name] = _meta(t)
        else:
            env[name] = [None if e is None else _meta(e) for e in t.elements]
    # creation ops allocate for real unless told otherwise: type them on meta too
    kwargs = tuple((k, "meta" if k == "device" else v) for k, v in kwargs)
    try:
        out = call_reference(op, args, kwargs, env)
    except Exception as e:  # torch's message says which argument is wrong
        raise TypeError(f"op {op}: arguments do not fit its schema or shapes: {e}") from e
    return type_of_value(out, op)


def one_write_scatter(graph, node) -> bool:
    """Whether `node` is a scatter that writes at most one element of each line along its
    dim: `scatter(x, dim, index, value|src)` with `index` of size 1 along `dim` and of
    `x`'s size along every other dim (the one-hot of a loss's backward: nll_loss's
    `scatter(zeros, 1, target[:, None], -1)`). Then it is elementwise,
    `out[.., j, ..] = j == index[.., 0, ..] ? value (src[.., 0, ..]) : x[.., j, ..]`, and
    a kernel computes it like any other elementwise op (codegen/lowerings.py); any other
    scatter writes data-dependent positions that may collide."""
    if node.op not in _ONE_WRITE or node.kwargs or len(node.args) != 4:
        return False
    x, dim, index = node.args[:3]
    if not (isinstance(x, Ref) and isinstance(index, Ref) and isinstance(dim, int)):
        return False
    tx, ti = graph[x.name].type, graph[index.name].type
    if not (isinstance(tx, TensorType) and isinstance(ti, TensorType)) or tx.rank == 0 \
            or tx.rank != ti.rank:
        return False
    d = dim % tx.rank
    return ti.shape[d] == 1 and all(ti.shape[k] == tx.shape[k]
                                    for k in range(tx.rank) if k != d)
