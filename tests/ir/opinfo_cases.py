"""OpInfo-style cases for the op table: how to call each IR op, and the same thing in torch.

Imported by `tests/ir/test_ops.py` as `from opinfo_cases import CASES` (pytest puts this
folder on sys.path). The machinery is in opinfo_core.py, the elementwise cases in
opinfo_elementwise.py; this file holds the other categories and the coverage lists.
"""
from __future__ import annotations

import math
from typing import Any, Callable  # noqa: F401

import torch
import torch.nn.functional as F

import opinfo_elementwise  # noqa: F401  (registers the elementwise cases)
from fusionstitch.ir.ops import ATTENTION
from opinfo_core import (  # noqa: F401
    Args, Bool, CASES, Const, Cplx, F32, FLOATS, Fl, IF, Idx, InferTypeMismatch,
    InputMutated, Int, OpCase, Perm, Special, UniqueIdx, Xfail, _all, _uniform,
    add_case, case, grad_of, source_case)


# ===== BROADCAST ==========================================================================

case("expand.default", "new_dims", [Fl(4, 1)], lambda x: Args(x, [3, 4, 5]),
     lambda x: x.expand(3, 4, 5))
case("expand.default", "minus_one", [Fl(4, 1)], lambda x: Args(x, [-1, 6]),
     lambda x: x.expand(-1, 6))
case("expand.default", "0d", [Fl()], lambda x: Args(x, [2, 3]), lambda x: x.expand(2, 3))
case("expand.default", "zero_size", [Fl(1, 3)], lambda x: Args(x, [0, 3]),
     lambda x: x.expand(0, 3), dtypes=F32)
case("expand.default", "bool", [Bool(1, 3)], lambda x: Args(x, [2, 3]),
     lambda x: x.expand(2, 3), dtypes=("bool",))
case("expand_copy.default", "basic", [Fl(4, 1)], lambda x: Args(x, [2, 4, 3]),
     lambda x: torch.expand_copy(x, (2, 4, 3)))
case("prims.broadcast_in_dim.default", "basic", [Fl(4)], lambda x: Args(x, [3, 4], [1]),
     lambda x: torch.broadcast_to(x, (3, 4)))

# ===== RESHAPE ============================================================================

case("view.default", "basic", [Fl(2, 3, 4)], lambda x: Args(x, [6, 4]), lambda x: x.view(6, 4))
case("view.default", "minus_one", [Fl(2, 3, 4)], lambda x: Args(x, [-1, 2]),
     lambda x: x.view(-1, 2))
case("view.default", "0d_to_1d", [Fl()], lambda x: Args(x, [1]), lambda x: x.view(1), dtypes=F32)
case("view.default", "zero_size", [Fl(0, 4)], lambda x: Args(x, [2, 0, 2]),
     lambda x: x.view(2, 0, 2), dtypes=F32)
case("_unsafe_view.default", "basic", [Fl(2, 3, 4)], lambda x: Args(x, [4, 6]),
     lambda x: x.view(4, 6))
case("reshape.default", "contiguous", [Fl(2, 3, 4)], lambda x: Args(x, [3, -1]),
     lambda x: x.reshape(3, -1))


def _transposed(*shape):
    return lambda dt, g: _uniform(shape, -2, 2, g).to(dt).transpose(0, 1)


case("reshape.default", "non_contiguous", [_transposed(3, 4)], lambda x: Args(x, [12]),
     lambda x: x.reshape(12))
case("view_copy.default", "basic", [Fl(2, 3, 4)], lambda x: Args(x, [6, 4]),
     lambda x: torch.view_copy(x, (6, 4)))
case("alias.default", "basic", [Fl(3, 4)], ref=lambda x: x.view_as(x))
case("squeeze.default", "basic", [Fl(1, 3, 1, 4)], ref=torch.squeeze)
case("squeeze.dim", "basic", [Fl(3, 1, 4)], lambda x: Args(x, 1), lambda x: x.squeeze(1))
case("squeeze.dim", "not_one", [Fl(3, 1, 4)], lambda x: Args(x, 0), lambda x: x.squeeze(0))
case("squeeze.dims", "basic", [Fl(1, 3, 1, 4)], lambda x: Args(x, [0, -2]),
     lambda x: x.squeeze((0, -2)))
case("unsqueeze.default", "neg", [Fl(3, 4)], lambda x: Args(x, -1), lambda x: x.unsqueeze(-1))
case("unsqueeze.default", "0d", [Fl()], lambda x: Args(x, 0), lambda x: x.unsqueeze(0),
     dtypes=F32)
case("flatten.using_ints", "middle", [Fl(2, 3, 4, 5)], lambda x: Args(x, 1, 2),
     lambda x: x.flatten(1, 2))
case("flatten.using_ints", "all", [Fl(2, 3, 4)], ref=torch.flatten)
case("flatten.using_ints", "0d", [Fl()], ref=torch.flatten, dtypes=F32)
case("unflatten.int", "basic", [Fl(3, 8)], lambda x: Args(x, 1, [2, -1]),
     lambda x: x.unflatten(1, (2, -1)))

def _view_dtype_make(dt, g):
    x = _uniform((3, 4), -2, 2, g).to(dt)
    to = {torch.float32: torch.int32, torch.float16: torch.int16,
          torch.bfloat16: torch.int16}[dt]
    return [x], [x], lambda p: Args(p, to)


add_case("view.dtype", "same_size", _view_dtype_make,
         lambda x: x.view({torch.float32: torch.int32}.get(x.dtype, torch.int16)))
case("view.dtype", "to_bytes", [Fl(3, 4)], lambda x: Args(x, torch.uint8),
     lambda x: x.view(torch.uint8), dtypes=F32)
case("view_as_real.default", "basic", [Cplx(3, 4)], ref=torch.view_as_real,
     dtypes=("complex64",))
case("view_as_complex.default", "basic", [Fl(3, 4, 2)], ref=torch.view_as_complex, dtypes=F32)

# ===== TRANSPOSE ==========================================================================

case("permute.default", "3d", [Fl(2, 3, 4)], lambda x: Args(x, [2, 0, 1]),
     lambda x: x.permute(2, 0, 1))
case("permute.default", "neg_dims", [Fl(2, 3, 4)], lambda x: Args(x, [-1, -3, -2]),
     lambda x: torch.permute(x, (-1, -3, -2)))
case("permute.default", "0d", [Fl()], lambda x: Args(x, []), lambda x: x.permute(()),
     dtypes=F32)
case("t.default", "2d", [Fl(3, 4)], ref=torch.t)
case("t.default", "1d", [Fl(5)], ref=torch.t, dtypes=F32)
case("transpose.int", "basic", [Fl(2, 3, 4)], lambda x: Args(x, 0, -1),
     lambda x: x.transpose(0, -1))
case("transpose.int", "int", [Int(2, 3)], lambda x: Args(x, 0, 1), lambda x: x.transpose(0, 1),
     dtypes=("int64",))
case("permute_copy.default", "basic", [Fl(2, 3, 4)], lambda x: Args(x, [1, 2, 0]),
     lambda x: torch.permute_copy(x, (1, 2, 0)))

# ===== DATA_MOVEMENT ======================================================================

_BIG = 9223372036854775807  # what FX/AOTAutograd put for x[a:]
case("slice.Tensor", "step", [Fl(4, 9)], lambda x: Args(x, 1, 1, 7, 2), lambda x: x[:, 1:7:2])
case("slice.Tensor", "to_end", [Fl(5, 3)], lambda x: Args(x, 0, 2, _BIG), lambda x: x[2:])
case("slice.Tensor", "negative", [Fl(5, 3)], lambda x: Args(x, 0, -3, -1), lambda x: x[-3:-1])
case("slice.Tensor", "none", [Fl(5, 3)], lambda x: Args(x, 1, None, None),
     lambda x: x[:, :], dtypes=F32)
case("slice.Tensor", "empty", [Fl(5, 3)], lambda x: Args(x, 0, 3, 3), lambda x: x[3:3])
case("select.int", "basic", [Fl(3, 4, 5)], lambda x: Args(x, 1, 2), lambda x: x[:, 2])
case("select.int", "negative", [Fl(3, 4)], lambda x: Args(x, 0, -1), lambda x: x[-1])
case("select.int", "to_0d", [Fl(4)], lambda x: Args(x, 0, 3), lambda x: x[3], dtypes=F32)
case("cat.default", "dim1", [Fl(3, 2), Fl(3, 4), Fl(3, 1)], lambda *t: Args(list(t), 1),
     lambda *t: torch.cat(t, dim=1))
case("cat.default", "dim0_default", [Fl(2, 3), Fl(1, 3)], lambda *t: Args(list(t)),
     lambda *t: torch.cat(t))
case("cat.default", "zero_size", [Fl(0, 3), Fl(2, 3)], lambda *t: Args(list(t), 0),
     lambda *t: torch.cat(t, 0))
case("cat.default", "promote", [Fl(2, 3), Int(2, 3, dtype=torch.int64)],
     lambda *t: Args(list(t), -1), lambda *t: torch.cat(t, -1))
case("cat.default", "bool", [Bool(2, 3), Bool(1, 3)], lambda *t: Args(list(t)),
     lambda *t: torch.cat(t), dtypes=("bool",))
case("stack.default", "dim1", [Fl(3, 4), Fl(3, 4), Fl(3, 4)], lambda *t: Args(list(t), 1),
     lambda *t: torch.stack(t, dim=1))
case("stack.default", "0d", [Fl(), Fl()], lambda *t: Args(list(t)), lambda *t: torch.stack(t),
     dtypes=F32)
case("index.Tensor", "dim0", [Fl(5, 4), Idx(3, n=5)], lambda x, i: Args(x, [i]),
     lambda x, i: x[i])
case("index.Tensor", "dim1_none", [Fl(3, 5), Idx(2, 2, n=5, lo=-5)],
     lambda x, i: Args(x, [None, i]), lambda x, i: x[:, i])
case("index.Tensor", "two_bcast", [Fl(4, 5, 2), Idx(3, 1, n=4), Idx(2, n=5)],
     lambda x, i, j: Args(x, [i, j]), lambda x, i, j: x[i, j])
case("index.Tensor", "bool_mask", [Fl(3, 4), Bool(3, 4)], lambda x, m: Args(x, [m]),
     lambda x, m: x[m], dtypes=F32,
     xfail=Xfail("data-dependent output shape: infer_type runs on meta tensors, which "
                 "cannot size a boolean-mask index (nonzero has no meta kernel)", TypeError))
case("index_select.default", "dim1", [Fl(3, 5), Idx(4, n=5)], lambda x, i: Args(x, 1, i),
     lambda x, i: torch.index_select(x, 1, i))
case("index_select.default", "int32_index", [Fl(5, 3), lambda dt, g: Idx(4, n=5)(dt, g).int()],
     lambda x, i: Args(x, 0, i), lambda x, i: torch.index_select(x, 0, i), dtypes=F32)
case("gather.default", "dim1", [Fl(3, 5), Idx(3, 4, n=5)], lambda x, i: Args(x, 1, i),
     lambda x, i: torch.gather(x, 1, i))
case("gather.default", "dim0", [Fl(4, 3), Idx(2, 3, n=4)], lambda x, i: Args(x, 0, i),
     lambda x, i: torch.gather(x, 0, i))
case("scatter.src", "dim1", [Fl(3, 6), UniqueIdx(3, 4, 6), Fl(3, 4)],
     lambda x, i, s: Args(x, 1, i, s), lambda x, i, s: torch.scatter(x, 1, i, s))
case("scatter.value", "dim1", [Fl(3, 6), UniqueIdx(3, 2, 6)],
     lambda x, i: Args(x, 1, i, 1.5), lambda x, i: torch.scatter(x, 1, i, 1.5))
case("scatter_add.default", "dup", [Fl(3, 4), Idx(3, 6, n=4), Fl(3, 6)],
     lambda x, i, s: Args(x, 1, i, s), lambda x, i, s: torch.scatter_add(x, 1, i, s))
for _red, _self in [("sum", True), ("amax", False), ("amin", True), ("mean", True),
                    ("prod", False)]:
    case("scatter_reduce.two", f"{_red}_self{int(_self)}", [Fl(3, 4), Idx(3, 6, n=4), Fl(3, 6)],
         lambda x, i, s, r=_red, b=_self: Args(x, 1, i, s, r, include_self=b),
         lambda x, i, s, r=_red, b=_self: torch.scatter_reduce(x, 1, i, s, r, include_self=b))
def _setitem(x, key, value):
    y = x.clone()
    y[key] = value
    return y


case("index_put.default", "unique", [Fl(5, 3), Perm(5, 3), Fl(3, 3)],
     lambda x, i, v: Args(x, [i], v), lambda x, i, v: torch.index_put(x, (i,), v))
case("index_put.default", "accumulate", [Fl(5, 3), Idx(6, n=5), Fl(6, 3)],
     lambda x, i, v: Args(x, [i], v, True),
     lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True))
case("index_put.default", "bcast_value", [Fl(5, 3), Perm(5, 2), Fl()],
     lambda x, i, v: Args(x, [i], v), lambda x, i, v: x.index_put((i,), v))
case("index_put.default", "bool_mask", [Fl(3, 4), Bool(3, 4), Fl()],
     lambda x, m, v: Args(x, [m], v), lambda x, m, v: x.index_put((m,), v))
case("index_put.default", "none_dim1", [Fl(3, 5), Perm(5, 2), Fl(3, 2)],
     lambda x, i, v: Args(x, [None, i], v), lambda x, i, v: _setitem(x, (slice(None), i), v))
case("index_add.default", "alpha", [Fl(5, 3), Idx(6, n=5), Fl(6, 3)],
     lambda x, i, s: Args(x, 0, i, s, alpha=2),
     lambda x, i, s: torch.index_add(x, 0, i, s, alpha=2))
case("_unsafe_index.Tensor", "dim0", [Fl(5, 4), Idx(3, n=5)], lambda x, i: Args(x, [i]),
     lambda x, i: x[i])
case("_unsafe_index.Tensor", "upsample", [Fl(1, 2, 3, 3),
                                          Const([[0], [0], [1], [1], [2], [2]]),
                                          Const([0, 0, 1, 1, 2, 2])],
     lambda x, i, j: Args(x, [None, None, i, j]),
     lambda x, i, j: F.interpolate(x, scale_factor=2, mode="nearest"))
case("_unsafe_index_put.default", "accumulate", [Fl(5, 3), Idx(6, n=5), Fl(6, 3)],
     lambda x, i, v: Args(x, [i], v, True),
     lambda x, i, v: x.index_put((i,), v, accumulate=True))
case("embedding.default", "basic", [Fl(10, 4), Idx(2, 3, n=10)], ref=lambda w, i: F.embedding(i, w))
case("embedding.default", "padding_idx", [Fl(10, 4), Idx(5, n=10)], lambda w, i: Args(w, i, 0),
     lambda w, i: F.embedding(i, w, padding_idx=0))


def _embedding_bw(padding_idx, scale):
    def make(dt, g):
        w = _uniform((8, 3), -1, 1, g).to(dt)
        idx = torch.randint(0, 8, (2, 5), generator=g)
        grad = _uniform((2, 5, 3), -1, 1, g).to(dt)
        call = lambda gr, i: Args(gr, i, 8, -1 if padding_idx is None else padding_idx, scale)
        return [grad, idx], [grad, idx, w], call

    def ref(grad, idx, w):
        return grad_of(lambda w_: F.embedding(idx, w_, padding_idx=padding_idx,
                                              scale_grad_by_freq=scale), [w], grad)
    return make, ref


add_case("embedding_dense_backward.default", "basic", *_embedding_bw(None, False))
add_case("embedding_dense_backward.default", "padding_scale", *_embedding_bw(1, True))
case("constant_pad_nd.default", "value", [Fl(2, 3, 4)], lambda x: Args(x, [1, 2, 0, 1], 0.5),
     lambda x: F.pad(x, (1, 2, 0, 1), value=0.5))
case("constant_pad_nd.default", "negative", [Fl(3, 5)], lambda x: Args(x, [-1, 2]),
     lambda x: F.pad(x, (-1, 2)))
case("constant_pad_nd.default", "int", [Int(3, 4)], lambda x: Args(x, [1, 1], 7),
     lambda x: F.pad(x, (1, 1), value=7), dtypes=("int64",))
case("slice_scatter.default", "step", [Fl(3, 6), Fl(3, 2)],
     lambda x, s: Args(x, s, 1, 1, 5, 2),
     lambda x, s: torch.slice_scatter(x, s, dim=1, start=1, end=5, step=2))
case("slice_scatter.default", "dim0", [Fl(5, 3), Fl(2, 3)], lambda x, s: Args(x, s, 0, 3),
     lambda x, s: torch.slice_scatter(x, s, start=3))
case("select_scatter.default", "basic", [Fl(3, 4), Fl(3)], lambda x, s: Args(x, s, 1, 2),
     lambda x, s: torch.select_scatter(x, s, 1, 2))
case("diagonal_scatter.default", "offset", [Fl(4, 5), Fl(4)], lambda x, s: Args(x, s, 1),
     lambda x, s: torch.diagonal_scatter(x, s, offset=1))
case("split.Tensor", "uneven", [Fl(3, 7)], lambda x: Args(x, 3, 1),
     lambda x: torch.split(x, 3, dim=1))
case("split.Tensor", "dim0", [Fl(4, 3)], lambda x: Args(x, 2), lambda x: x.split(2))
case("split_with_sizes.default", "basic", [Fl(6, 3)], lambda x: Args(x, [1, 3, 2]),
     lambda x: torch.split(x, [1, 3, 2]))
case("split_with_sizes.default", "zero_part", [Fl(3, 4)], lambda x: Args(x, [0, 4], 1),
     lambda x: torch.split(x, [0, 4], dim=1), dtypes=F32)
case("unbind.int", "dim1", [Fl(3, 4)], lambda x: Args(x, 1), lambda x: torch.unbind(x, 1))
case("unbind.int", "dim0", [Fl(2, 3)], ref=torch.unbind)
case("flip.default", "two_dims", [Fl(2, 3, 4)], lambda x: Args(x, [0, 2]),
     lambda x: torch.flip(x, (0, 2)))
case("flip.default", "bool", [Bool(3, 4)], lambda x: Args(x, [1]), lambda x: x.flip(1),
     dtypes=("bool",))
case("roll.default", "dims", [Fl(3, 4)], lambda x: Args(x, [1, -2], [0, 1]),
     lambda x: torch.roll(x, shifts=(1, -2), dims=(0, 1)))
case("roll.default", "flat", [Fl(3, 4)], lambda x: Args(x, [5]), lambda x: torch.roll(x, 5))
case("repeat.default", "extra_dims", [Fl(2, 3)], lambda x: Args(x, [2, 1, 3]),
     lambda x: x.repeat(2, 1, 3))
case("repeat.default", "0d", [Fl()], lambda x: Args(x, [3]), lambda x: x.repeat(3), dtypes=F32)
case("as_strided.default", "offset", [Fl(4, 4)], lambda x: Args(x, [2, 3], [1, 4], 1),
     lambda x: torch.as_strided(x, (2, 3), (1, 4), 1))
case("as_strided.default", "overlap", [Fl(8)], lambda x: Args(x, [3, 4], [2, 1]),
     lambda x: x.as_strided((3, 4), (2, 1)))
case("as_strided_scatter.default", "basic", [Fl(4, 4), Fl(2, 3)],
     lambda x, s: Args(x, s, [2, 3], [1, 4], 1),
     lambda x, s: torch.as_strided_scatter(x, s, (2, 3), (1, 4), 1))
case("narrow.default", "basic", [Fl(3, 6)], lambda x: Args(x, 1, 2, 3),
     lambda x: torch.narrow(x, 1, 2, 3))
case("diagonal.default", "offset", [Fl(4, 5)], lambda x: Args(x, -1),
     lambda x: torch.diagonal(x, offset=-1))
case("diagonal.default", "dims", [Fl(2, 3, 3)], lambda x: Args(x, 0, 1, 2),
     lambda x: torch.diagonal(x, dim1=1, dim2=2))
case("unfold.default", "basic", [Fl(3, 8)], lambda x: Args(x, 1, 3, 2),
     lambda x: x.unfold(1, 3, 2))
case("masked_fill.Scalar", "bcast_mask", [Fl(3, 4), Bool(4)],
     lambda x, m: Args(x, m, -math.inf), lambda x, m: x.masked_fill(m, -math.inf))
case("masked_fill.Scalar", "int", [Int(3, 4), Bool(3, 4)], lambda x, m: Args(x, m, 9),
     lambda x, m: torch.masked_fill(x, m, 9), dtypes=("int64",))
case("masked_fill.Tensor", "0d_value", [Fl(3, 4), Bool(3, 4), Fl()],
     ref=lambda x, m, v: x.masked_fill(m, v))
case("tril.default", "neg", [Fl(2, 4, 5)], lambda x: Args(x, -1), lambda x: torch.tril(x, -1))
case("tril.default", "defaults", [Fl(4, 4)], ref=torch.tril)
case("triu.default", "pos", [Fl(2, 4, 5)], lambda x: Args(x, 1), lambda x: torch.triu(x, 1))
case("triu.default", "bool", [Bool(4, 4)], ref=torch.triu, dtypes=("bool",))
case("slice_copy.Tensor", "step", [Fl(4, 9)], lambda x: Args(x, 1, 0, 9, 3),
     lambda x: torch.slice_copy(x, 1, 0, 9, 3))
case("select_copy.int", "basic", [Fl(3, 4)], lambda x: Args(x, 1, 0),
     lambda x: torch.select_copy(x, 1, 0))

# ===== REDUCE =============================================================================

case("sum.default", "2d", [Fl(3, 5)], ref=torch.sum)
case("sum.default", "0d", [Fl()], ref=torch.sum, dtypes=F32)
case("sum.default", "zero_size", [Fl(0, 3)], ref=torch.sum, dtypes=F32)
case("sum.default", "int32_promotes", [Int(3, 5)], ref=torch.sum, dtypes=("int32",))
case("sum.default", "bool", [Bool(3, 5)], ref=torch.sum, dtypes=("bool",))
case("sum.default", "dtype_f64", [Fl(3, 5)], lambda x: Args(x, dtype=torch.float64),
     lambda x: torch.sum(x, dtype=torch.float64))
case("sum.default", "nan_inf", [Special(3, 5)], ref=torch.sum, dtypes=F32)
case("sum.dim_IntList", "keepdim", [Fl(3, 5, 4)], lambda x: Args(x, [1], True),
     lambda x: x.sum(dim=1, keepdim=True))
case("sum.dim_IntList", "two_dims", [Fl(3, 5, 4)], lambda x: Args(x, [0, -1]),
     lambda x: x.sum(dim=(0, -1)))
case("sum.dim_IntList", "dim_none", [Fl(3, 5)], lambda x: Args(x, None),
     lambda x: torch.sum(x, dim=None))
case("sum.dim_IntList", "zero_size", [Fl(0, 4)], lambda x: Args(x, [0]),
     lambda x: x.sum(0), dtypes=F32)
case("sum.dim_IntList", "int_dtype", [Int(3, 5)], lambda x: Args(x, [1], dtype=torch.int32),
     lambda x: x.sum(1, dtype=torch.int32), dtypes=("int64",))
case("mean.default", "2d", [Fl(3, 5)], ref=torch.mean)
case("mean.default", "zero_size", [Fl(0, 4)], ref=torch.mean, dtypes=F32)
case("mean.default", "dtype", [Fl(3, 5)], lambda x: Args(x, dtype=torch.float32),
     lambda x: torch.mean(x, dtype=torch.float32))
case("mean.dim", "keepdim", [Fl(3, 5, 4)], lambda x: Args(x, [0, 2], True),
     lambda x: x.mean(dim=(0, 2), keepdim=True))
case("mean.dim", "last", [Fl(3, 5)], lambda x: Args(x, [-1]), lambda x: torch.mean(x, -1))
for _name in ("amax", "amin"):
    _fn = getattr(torch, _name)
    case(f"{_name}.default", "dim1", [Fl(3, 5)], lambda x: Args(x, [1]),
         lambda x, f=_fn: f(x, dim=1))
    case(f"{_name}.default", "all_keepdim", [Fl(3, 5)], lambda x: Args(x, [], True),
         lambda x, f=_fn: f(x, dim=(), keepdim=True))
    case(f"{_name}.default", "nan", [Special(4, 5)], lambda x: Args(x, [1]),
         lambda x, f=_fn: f(x, dim=1))
    case(f"{_name}.default", "int", [Int(3, 5)], lambda x: Args(x, [0]),
         lambda x, f=_fn: f(x, 0), dtypes=("int64",))
for _name in ("max", "min"):
    _fn = getattr(torch, _name)
    case(f"{_name}.default", "2d", [Fl(3, 5)], ref=_fn)
    case(f"{_name}.default", "nan", [Special(3, 5)], ref=_fn, dtypes=F32)
    case(f"{_name}.default", "bool", [Bool(3, 5)], ref=_fn, dtypes=("bool",))
    case(f"{_name}.dim", "keepdim", [Fl(3, 5)], lambda x: Args(x, 1, True),
         lambda x, f=_fn: f(x, 1, keepdim=True))
    case(f"{_name}.dim", "dim0", [Int(4, 3)], lambda x: Args(x, 0),
         lambda x, f=_fn: f(x, dim=0), dtypes=("int64",))
for _name in ("argmax", "argmin"):
    _fn = getattr(torch, _name)
    case(f"{_name}.default", "flat", [Fl(3, 5)], ref=_fn)
    case(f"{_name}.default", "dim_keepdim", [Fl(3, 5)], lambda x: Args(x, 1, True),
         lambda x, f=_fn: f(x, dim=1, keepdim=True))
    case(f"{_name}.default", "nan", [Special(4, 5)], lambda x: Args(x, 1),
         lambda x, f=_fn: f(x, 1), dtypes=F32)
case("prod.default", "2d", [Fl(3, 4, lo=0.5, hi=1.5)], ref=torch.prod)
case("prod.default", "int", [Int(3, 4, lo=-3, hi=4)], ref=torch.prod, dtypes=("int64", "int32"))
case("prod.default", "bool", [Bool(6, p=0.9)], ref=torch.prod, dtypes=("bool",))
case("prod.dim_int", "keepdim", [Fl(3, 4, lo=0.5, hi=1.5)], lambda x: Args(x, 1, True),
     lambda x: torch.prod(x, 1, keepdim=True))
case("prod.dim_int", "dtype", [Int(3, 4, lo=-3, hi=4)], lambda x: Args(x, 0, dtype=torch.float32),
     lambda x: torch.prod(x, 0, dtype=torch.float32), dtypes=("int64",))
case("var.correction", "dim1_c0", [Fl(3, 6)], lambda x: Args(x, [1], correction=0),
     lambda x: torch.var(x, dim=1, correction=0))
case("var.correction", "all_default", [Fl(3, 6)], ref=torch.var)
case("var.correction", "keepdim_c2", [Fl(3, 6, 2)], lambda x: Args(x, [0, 2], correction=2,
                                                                     keepdim=True),
     lambda x: torch.var(x, dim=(0, 2), correction=2, keepdim=True))
case("var.correction", "one_elem", [Fl(3, 1)], lambda x: Args(x, [1]),
     lambda x: torch.var(x, dim=1), dtypes=F32)  # n - 1 = 0: NaN (or inf)
case("var.dim", "biased_keepdim", [Fl(3, 6)], lambda x: Args(x, [1], False, True),
     lambda x: torch.var(x, 1, unbiased=False, keepdim=True))
case("var.dim", "unbiased", [Fl(3, 6)], lambda x: Args(x, [0]), lambda x: x.var(0))
case("var_mean.correction", "dim1", [Fl(3, 6)], lambda x: Args(x, [1], correction=1),
     lambda x: torch.var_mean(x, dim=1, correction=1))
case("var_mean.correction", "all_c0", [Fl(3, 6)], lambda x: Args(x, correction=0),
     lambda x: torch.var_mean(x, correction=0))
case("std.correction", "keepdim", [Fl(3, 6)], lambda x: Args(x, [0, 1], correction=0,
                                                             keepdim=True),
     lambda x: torch.std(x, dim=(0, 1), correction=0, keepdim=True))
case("std.correction", "default", [Fl(3, 6)], ref=torch.std)
for _name in ("any", "all"):
    _fn = getattr(torch, _name)
    case(f"{_name}.default", "bool", [Bool(3, 5, p=0.2 if _name == "any" else 0.9)], ref=_fn,
         dtypes=("bool",))
    case(f"{_name}.default", "float", [IF(3, 5, lo=0, hi=2)], ref=_fn)
    case(f"{_name}.default", "zero_size", [Bool(0, 3)], ref=_fn, dtypes=("bool",))
    case(f"{_name}.dim", "keepdim", [Bool(3, 5)], lambda x: Args(x, 1, True),
         lambda x, f=_fn: f(x, 1, keepdim=True), dtypes=("bool",))
    case(f"{_name}.dim", "int", [Int(3, 5, lo=0, hi=2)], lambda x: Args(x, 0),
         lambda x, f=_fn: f(x, 0), dtypes=("int64",))
case("any.dims", "two", [Bool(3, 4, 5, p=0.05)], lambda x: Args(x, [0, 2]),
     lambda x: torch.any(x, dim=(0, 2)), dtypes=("bool",))
case("any.dims", "none", [IF(3, 4, lo=0, hi=2)], lambda x: Args(x, None),
     lambda x: torch.any(x))
case("logsumexp.default", "dim1", [Fl(3, 6, lo=-5, hi=5)], lambda x: Args(x, [1]),
     lambda x: torch.logsumexp(x, dim=1))
case("logsumexp.default", "neg_inf", [lambda dt, g: Fl(3, 4)(dt, g).masked_fill(
    torch.tensor([[True, False, False, False], [True] * 4, [False] * 4]), -math.inf)],
     lambda x: Args(x, [1], True), lambda x: torch.logsumexp(x, 1, keepdim=True))
case("logsumexp.default", "int", [Int(3, 4, lo=-3, hi=4)], lambda x: Args(x, [0]),
     lambda x: torch.logsumexp(x, 0), dtypes=("int64",))
case("norm.ScalarOpt_dim", "p3", [Fl(3, 5)], lambda x: Args(x, 3, [1]),
     lambda x: torch.norm(x, p=3, dim=1), tol={"float16": (2e-3, 2e-3)})
case("norm.ScalarOpt_dim", "p2_keepdim", [Fl(3, 5)], lambda x: Args(x, 2, [0], True),
     lambda x: torch.norm(x, p=2, dim=0, keepdim=True))
case("linalg_vector_norm.default", "l2_all", [Fl(3, 5)], ref=torch.linalg.vector_norm)
case("linalg_vector_norm.default", "inf_dim", [Fl(3, 5)], lambda x: Args(x, math.inf, [1]),
     lambda x: torch.linalg.vector_norm(x, ord=math.inf, dim=1))
case("linalg_vector_norm.default", "l1_keepdim", [Fl(3, 5)], lambda x: Args(x, 1, [0], True),
     lambda x: torch.linalg.vector_norm(x, 1, dim=0, keepdim=True))
case("linalg_vector_norm.default", "dtype_f64", [Fl(3, 5)],
     lambda x: Args(x, 2, None, dtype=torch.float64),
     lambda x: torch.linalg.vector_norm(x, dtype=torch.float64), dtypes=F32)
case("_softmax.default", "last", [Fl(3, 6, lo=-5, hi=5)], lambda x: Args(x, -1, False),
     lambda x: torch.softmax(x, -1))
case("_softmax.default", "dim0", [Fl(4, 3, lo=-5, hi=5)], lambda x: Args(x, 0, False),
     lambda x: F.softmax(x, dim=0))
case("_softmax.default", "neg_inf", [lambda dt, g: Fl(3, 4)(dt, g).masked_fill(
    torch.tensor([[True, False, False, False], [False] * 4, [False, True, True, False]]),
    -math.inf)], lambda x: Args(x, 1, False), lambda x: torch.softmax(x, 1))
case("_log_softmax.default", "last", [Fl(3, 6, lo=-5, hi=5)], lambda x: Args(x, -1, False),
     lambda x: torch.log_softmax(x, -1))
case("_log_softmax.default", "dim0", [Fl(4, 3, lo=-5, hi=5)], lambda x: Args(x, 0, False),
     lambda x: F.log_softmax(x, dim=0))


def _softmax_bw(fn):
    def make(dt, g):
        x = _uniform((3, 6), -3, 3, g).to(dt)
        grad = _uniform((3, 6), -1, 1, g).to(dt)
        out = fn(x, 1)
        return [grad, out], [grad, x], lambda gr, o: Args(gr, o, 1, dt)
    return make, lambda grad, x: grad_of(lambda t: fn(t, 1), [x], grad)


add_case("_softmax_backward_data.default", "dim1", *_softmax_bw(torch.softmax))
add_case("_log_softmax_backward_data.default", "dim1", *_softmax_bw(torch.log_softmax))


def _ln_stats(x, dims, eps):
    """mean and rstd as native_layer_norm returns them, through public ops (in float32)."""
    xf = x.float()
    mean = xf.mean(dim=dims, keepdim=True)
    rstd = torch.rsqrt(xf.var(dim=dims, correction=0, keepdim=True) + eps)
    return mean.to(x.dtype), rstd.to(x.dtype)


_LN_STATS_DTYPE = Xfail(
    "infer_type (torch's meta kernel) types mean/rstd of a float16/bfloat16 input as float32, "
    "but the CPU kernel returns them in the input dtype", InferTypeMismatch,
    dtypes=("float16", "bfloat16"))


def _layer_norm_case(variant, shape, norm_shape, affine):
    dims = tuple(range(-len(norm_shape), 0))

    def make(dt, g):
        x = _uniform(shape, -2, 2, g).to(dt)
        ts = [x]
        if affine:
            ts += [_uniform(norm_shape, 0.5, 1.5, g).to(dt), _uniform(norm_shape, -1, 1, g).to(dt)]
            call = lambda x, w, b: Args(x, list(norm_shape), w, b, 1e-5)
        else:
            call = lambda x: Args(x, list(norm_shape), None, None, 1e-5)
        return ts, ts, call

    def ref(x, w=None, b=None):
        mean, rstd = _ln_stats(x, dims, 1e-5)
        return F.layer_norm(x, norm_shape, w, b, eps=1e-5), mean, rstd

    add_case("native_layer_norm.default", variant, make, ref, xfail=_LN_STATS_DTYPE,
             tol={"float32": (1e-5, 1e-5), "float16": (4e-3, 4e-3),
                  "bfloat16": (3e-2, 3e-2)})


_layer_norm_case("affine", (3, 8), (8,), True)
_layer_norm_case("no_affine_2d", (2, 3, 4), (3, 4), False)


def _layer_norm_bw_make(mask):
    def make(dt, g):
        x = _uniform((3, 8), -2, 2, g).to(dt)
        w = _uniform((8,), 0.5, 1.5, g).to(dt)
        b = _uniform((8,), -1, 1, g).to(dt)
        grad = _uniform((3, 8), -1, 1, g).to(dt)
        # the saved statistics, exactly as autograd saves them for the backward
        _, mean, rstd = torch.ops.aten.native_layer_norm.default(x, [8], w, b, 1e-5)
        call = lambda gr, x_, m, r, w_, b_: Args(gr, x_, [8], m, r, w_, b_, list(mask))
        return [grad, x, mean, rstd, w, b], [grad, x, w, b], call

    def ref(grad, x, w, b):
        gs = grad_of(lambda x_, w_, b_: F.layer_norm(x_, (8,), w_, b_, eps=1e-5), [x, w, b],
                     grad, wrt=(0, 1, 2))
        return tuple(gi if m else None for gi, m in zip(gs, mask))
    return make, ref


add_case("native_layer_norm_backward.default", "all", *_layer_norm_bw_make((True, True, True)),
         tol={"float16": (2e-3, 2e-3)})
add_case("native_layer_norm_backward.default", "input_only",
         *_layer_norm_bw_make((True, False, False)), tol={"float16": (2e-3, 2e-3)})


def _nll_make(weighted, reduction, ignore_index=-100):
    def make(dt, g):
        logp = torch.log_softmax(_uniform((5, 4), -2, 2, g).to(dt), 1)
        target = torch.randint(0, 4, (5,), generator=g)
        target[1] = ignore_index
        ts = [logp, target] + ([_uniform((4,), 0.5, 2, g).to(dt)] if weighted else [])
        if weighted:
            call = lambda lp, t, w: Args(lp, t, w, reduction, ignore_index)
        else:
            call = lambda lp, t: Args(lp, t, None, reduction, ignore_index)
        return ts, ts, call
    return make


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _nll_ref(reduction, ignore_index=-100):
    def ref(logp, target, weight=None):
        out = F.nll_loss(logp, target, weight, ignore_index=ignore_index,
                         reduction=_REDUCTIONS[reduction])
        keep = target != ignore_index
        if reduction == 0:
            total = torch.zeros((), dtype=logp.dtype)
        elif weight is None:
            total = keep.sum().to(logp.dtype)
        else:
            total = weight[target[keep]].sum()
        return out, total
    return ref


for _red in (0, 1, 2):
    add_case("nll_loss_forward.default", f"{_REDUCTIONS[_red]}_weighted", _nll_make(True, _red),
             _nll_ref(_red))
add_case("nll_loss_forward.default", "mean_unweighted", _nll_make(False, 1), _nll_ref(1))


def _nll_bw(reduction, weighted):
    def make(dt, g):
        logp = torch.log_softmax(_uniform((5, 4), -2, 2, g).to(dt), 1)
        target = torch.randint(0, 4, (5,), generator=g)
        target[2] = -100
        w = _uniform((4,), 0.5, 2, g).to(dt) if weighted else None
        _, total = torch.ops.aten.nll_loss_forward.default(logp, target, w, reduction, -100)
        grad = (_uniform((), 0.5, 2, g) if reduction else _uniform((5,), -1, 1, g)).to(dt)
        ts = [grad, logp, target] + ([w] if weighted else []) + [total]
        if weighted:
            call = lambda gr, lp, t, w_, tw: Args(gr, lp, t, w_, reduction, -100, tw)
        else:
            call = lambda gr, lp, t, tw: Args(gr, lp, t, None, reduction, -100, tw)
        return ts, [grad, logp, target, w], call

    def ref(grad, logp, target, w):
        return grad_of(lambda lp: F.nll_loss(lp, target, w, reduction=_REDUCTIONS[reduction]),
                       [logp], grad)
    return make, ref


add_case("nll_loss_backward.default", "mean_weighted", *_nll_bw(1, True))
add_case("nll_loss_backward.default", "sum", *_nll_bw(2, False))
add_case("nll_loss_backward.default", "none", *_nll_bw(0, True))

case("log_sigmoid_forward.default", "basic", [Fl(3, 5, lo=-6, hi=6)],
     ref=lambda x: (F.logsigmoid(x), torch.exp(-x.abs())))


def _log_sigmoid_bw_make(dt, g):
    x = _uniform((3, 5), -6, 6, g).to(dt)
    grad = _uniform((3, 5), -1, 1, g).to(dt)
    _, buffer = torch.ops.aten.log_sigmoid_forward.default(x)
    return [grad, x, buffer], [grad, x], _all


add_case("log_sigmoid_backward.default", "basic", _log_sigmoid_bw_make,
         lambda grad, x: grad_of(F.logsigmoid, [x], grad))

_STATS_DTYPE = Xfail(
    "infer_type (torch's meta kernel) types the saved mean/rstd of a float16/bfloat16 input "
    "as float32, but the CPU kernel returns them in the input dtype", InferTypeMismatch,
    dtypes=("float16", "bfloat16"))
_EVAL_STATS = Xfail(
    "infer_type (torch's meta kernel) types the eval-mode save_mean/save_invstd as "
    "[C] float32, but the CPU kernel returns empty [0] tensors", InferTypeMismatch)
_BN_TOL = {"float32": (1e-5, 1e-5), "float16": (4e-3, 4e-3), "bfloat16": (3e-2, 3e-2)}


def _bn_inputs(dt, g, shape=(4, 3, 5, 5)):
    c = shape[1]
    x = _uniform(shape, -2, 2, g).to(dt)
    w = _uniform((c,), 0.5, 1.5, g).to(dt)
    b = _uniform((c,), -1, 1, g).to(dt)
    rm = _uniform((c,), -0.5, 0.5, g).to(dt)
    rv = _uniform((c,), 0.5, 2, g).to(dt)
    return x, w, b, rm, rv


def _bn_train_ref(x, w, b, rm, rv, momentum=0.1, eps=1e-5):
    """(out, save_mean, save_invstd, new_running_mean, new_running_var) via public ops."""
    rm, rv = rm.clone(), rv.clone()
    out = F.batch_norm(x, rm, rv, w, b, training=True, momentum=momentum, eps=eps)
    dims = [0] + list(range(2, x.dim()))
    xf = x.float()
    mean = xf.mean(dims)
    invstd = torch.rsqrt(xf.var(dims, correction=0) + eps)
    return out, mean.to(x.dtype), invstd.to(x.dtype), rm, rv


def _bn_functional_make(dt, g):
    ts = list(_bn_inputs(dt, g))
    return ts, ts, lambda x, w, b, rm, rv: Args(x, w, b, rm, rv, True, 0.1, 1e-5)


add_case("_native_batch_norm_legit_functional.default", "train", _bn_functional_make,
         _bn_train_ref, tol=_BN_TOL, xfail=_STATS_DTYPE)


def _bn_eval_make(op_args):
    def make(dt, g):
        ts = list(_bn_inputs(dt, g))
        return ts, ts, op_args
    return make


def _bn_eval_ref(x, w, b, rm, rv):
    out = F.batch_norm(x, rm.clone(), rv.clone(), w, b, training=False, eps=1e-5)
    return out, x.new_empty(0), x.new_empty(0)


add_case("_native_batch_norm_legit_no_training.default", "basic",
         _bn_eval_make(lambda x, w, b, rm, rv: Args(x, w, b, rm, rv, 0.1, 1e-5)), _bn_eval_ref,
         tol=_BN_TOL, xfail=_EVAL_STATS)
add_case("native_batch_norm.default", "eval",
         _bn_eval_make(lambda x, w, b, rm, rv: Args(x, w, b, rm, rv, False, 0.1, 1e-5)),
         _bn_eval_ref, tol=_BN_TOL, xfail=_EVAL_STATS)
add_case("native_batch_norm.default", "train",
         _bn_eval_make(lambda x, w, b, rm, rv: Args(x, w, b, rm, rv, True, 0.1, 1e-5)),
         lambda *ts: _bn_train_ref(*ts)[:3], tol=_BN_TOL,
         xfail=Xfail("native_batch_norm(training=True) updates running_mean/running_var in "
                     "place: a table op of the functional IR mutates the graph's inputs "
                     "(and for float16/bfloat16 its stats are mistyped like "
                     "_native_batch_norm_legit_functional)", InputMutated))


def _bn_bw_make(dt, g):
    x, w, b, rm, rv = _bn_inputs(dt, g, (4, 3, 3, 3))
    grad = _uniform(x.shape, -1, 1, g).to(dt)
    # save_mean / save_invstd exactly as the forward saves them for autograd
    _, sm, si = torch.ops.aten.native_batch_norm.default(x, w, b, rm.clone(), rv.clone(), True,
                                                         0.1, 1e-5)
    call = lambda gr, x_, w_, rm_, rv_, sm_, si_: Args(gr, x_, w_, rm_, rv_, sm_, si_, True, 1e-5,
                                                        [True, True, True])
    return [grad, x, w, rm, rv, sm, si], [grad, x, w, b, rm, rv], call


def _bn_bw_ref(grad, x, w, b, rm, rv):
    return grad_of(lambda x_, w_, b_: F.batch_norm(x_, rm.clone(), rv.clone(), w_, b_,
                                                   training=True, momentum=0.1, eps=1e-5),
                   [x, w, b], grad, wrt=(0, 1, 2))


add_case("native_batch_norm_backward.default", "train", _bn_bw_make, _bn_bw_ref, tol=_BN_TOL)

# ===== DOT ================================================================================

case("mm.default", "basic", [Fl(3, 4), Fl(4, 5)], ref=torch.mm)
case("mm.default", "k0", [Fl(3, 0), Fl(0, 5)], ref=torch.mm, dtypes=F32)
case("mm.default", "int", [Int(3, 4), Int(4, 2)], ref=torch.mm, dtypes=("int64",))
case("bmm.default", "basic", [Fl(2, 3, 4), Fl(2, 4, 5)], ref=torch.bmm)
case("addmm.default", "bias_beta_alpha", [Fl(5), Fl(3, 4), Fl(4, 5)],
     lambda c, a, b: Args(c, a, b, beta=0.5, alpha=2),
     lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2))
case("addmm.default", "full_c", [Fl(3, 5), Fl(3, 4), Fl(4, 5)], ref=torch.addmm)
case("baddbmm.default", "bcast", [Fl(1, 3, 5), Fl(2, 3, 4), Fl(2, 4, 5)],
     lambda c, a, b: Args(c, a, b, beta=2, alpha=0.5),
     lambda c, a, b: torch.baddbmm(c, a, b, beta=2, alpha=0.5))
case("dot.default", "basic", [Fl(7), Fl(7)], ref=torch.dot)
case("dot.default", "empty", [Fl(0), Fl(0)], ref=torch.dot, dtypes=F32)
case("mv.default", "basic", [Fl(3, 4), Fl(4)], ref=torch.mv)

# ===== LIBRARY: convolution only ==========================================================

_CONV_TOL = {"float32": (1e-5, 1e-5)}
case("convolution.default", "conv2d", [Fl(2, 4, 7, 7), Fl(6, 2, 3, 3), Fl(6)],
     lambda x, w, b: Args(x, w, b, [2, 2], [1, 1], [1, 1], False, [0, 0], 2),
     lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2), tol=_CONV_TOL)
case("convolution.default", "conv1d_dilated_nobias", [Fl(2, 3, 10), Fl(4, 3, 3)],
     lambda x, w: Args(x, w, None, [1], [2], [2], False, [0], 1),
     lambda x, w: F.conv1d(x, w, padding=2, dilation=2), tol=_CONV_TOL)
case("convolution.default", "conv_transpose2d", [Fl(1, 4, 5, 5), Fl(4, 3, 3, 3), Fl(3)],
     lambda x, w, b: Args(x, w, b, [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
     lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     tol=_CONV_TOL)

# ===== SOURCE (non-random creation ops) ===================================================

source_case("full.default", "basic", lambda dt: Args([2, 3], 1.5, dtype=dt),
            lambda dt: torch.full((2, 3), 1.5, dtype=dt))
source_case("full.default", "int", lambda dt: Args([4], 7, dtype=dt),
            lambda dt: torch.full((4,), 7, dtype=dt), dtypes=("int64",))
source_case("full.default", "no_dtype", lambda dt: Args([2], 2.5),
            lambda dt: torch.full((2,), 2.5), dtypes=F32)
source_case("zeros.default", "basic", lambda dt: Args([2, 3], dtype=dt),
            lambda dt: torch.zeros(2, 3, dtype=dt))
source_case("zeros.default", "zero_size", lambda dt: Args([0, 3], dtype=dt),
            lambda dt: torch.zeros(0, 3, dtype=dt), dtypes=F32)
source_case("ones.default", "basic", lambda dt: Args([3], dtype=dt),
            lambda dt: torch.ones(3, dtype=dt), dtypes=FLOATS + ("bool",))
source_case("empty.memory_format", "basic", lambda dt: Args([2, 3], dtype=dt),
            lambda dt: torch.empty(2, 3, dtype=dt), check_values=False)
source_case("empty_strided.default", "basic", lambda dt: Args([2, 3], [1, 2], dtype=dt),
            lambda dt: torch.empty_strided((2, 3), (1, 2), dtype=dt), check_values=False,
            dtypes=F32)
source_case("scalar_tensor.default", "basic", lambda dt: Args(2.5, dtype=dt),
            lambda dt: torch.scalar_tensor(2.5, dtype=dt))
source_case("arange.default", "int", lambda dt: Args(5), lambda dt: torch.arange(5),
            dtypes=("int64",))
source_case("arange.default", "dtype", lambda dt: Args(5, dtype=dt),
            lambda dt: torch.arange(5, dtype=dt))
source_case("arange.start", "neg", lambda dt: Args(-3, 4), lambda dt: torch.arange(-3, 4),
            dtypes=("int64",))
source_case("arange.start_step", "float_step", lambda dt: Args(0.0, 1.0, 0.1, dtype=dt),
            lambda dt: torch.arange(0.0, 1.0, 0.1, dtype=dt), dtypes=F32)
source_case("arange.start_step", "neg_step", lambda dt: Args(10, 0, -3),
            lambda dt: torch.arange(10, 0, -3), dtypes=("int64",))
source_case("prims.iota.default", "step", lambda dt: Args(5, start=2, step=3, dtype=dt,
                                                          device=torch.device("cpu"),
                                                          requires_grad=False),
            lambda dt: torch.arange(2, 17, 3, dtype=dt), dtypes=("int64", "int32"))
source_case("full_like.default", "basic", lambda dt, x: Args(x, 0.25),
            lambda dt, x: torch.full_like(x, 0.25), inputs=[Fl(2, 3)])
source_case("full_like.default", "dtype", lambda dt, x: Args(x, 3, dtype=torch.int64),
            lambda dt, x: torch.full_like(x, 3, dtype=torch.int64), inputs=[Fl(2, 3)],
            dtypes=F32)
source_case("zeros_like.default", "basic", lambda dt, x: Args(x),
            lambda dt, x: torch.zeros_like(x), inputs=[Fl(2, 3)])
source_case("ones_like.default", "int", lambda dt, x: Args(x),
            lambda dt, x: torch.ones_like(x), inputs=[Int(2, 3)], dtypes=("int64",))
source_case("empty_like.default", "basic", lambda dt, x: Args(x),
            lambda dt, x: torch.empty_like(x), inputs=[Fl(2, 3)], check_values=False)
source_case("new_zeros.default", "basic", lambda dt, x: Args(x, [4]),
            lambda dt, x: x.new_zeros(4), inputs=[Fl(2, 3)])
source_case("new_ones.default", "dtype", lambda dt, x: Args(x, [2, 2], dtype=torch.bool),
            lambda dt, x: x.new_ones((2, 2), dtype=torch.bool), inputs=[Fl(2, 3)], dtypes=F32)
source_case("new_full.default", "basic", lambda dt, x: Args(x, [3], -1.5),
            lambda dt, x: x.new_full((3,), -1.5), inputs=[Fl(2, 3)])
source_case("new_empty.default", "basic", lambda dt, x: Args(x, [3, 1]),
            lambda dt, x: x.new_empty((3, 1)), inputs=[Fl(2, 3)], check_values=False)
source_case("new_empty_strided.default", "basic", lambda dt, x: Args(x, [2, 2], [1, 2]),
            lambda dt, x: x.new_empty_strided((2, 2), (1, 2)), inputs=[Fl(2, 3)],
            check_values=False, dtypes=F32)

# ===== what is deliberately not covered ===================================================

# Ops of the table with no case, and why (checked by test_every_op_has_a_case).
NOT_COVERED: dict[str, str] = {}
for _name in """rand.default randn.default rand_like.default randn_like.default bernoulli.p
                bernoulli.default native_dropout.default randint.low randperm.default""".split():
    NOT_COVERED[_name] = "random SOURCE op: draws from the global RNG"
for _name in """convolution_backward.default max_pool2d_with_indices.default
                max_pool2d_with_indices_backward.default avg_pool2d.default
                avg_pool2d_backward.default _adaptive_avg_pool2d.default
                _adaptive_avg_pool2d_backward.default cumsum.default cumprod.default
                sort.default topk.default""".split():
    NOT_COVERED[_name] = "LIBRARY op (run by torch as is; only convolution is swept)"
for _name in sorted(ATTENTION):
    NOT_COVERED[_name] = ("LIBRARY op (fused attention, run by torch as is): "
                          "tests/frontend/test_attention.py")
NOT_COVERED["prims.device_put.default"] = ("LIBRARY op (a copy between devices, run by "
                                          "torch): tests/frontend/test_devices.py")
for _name in ("_assert_async.default", "_assert_async.msg"):
    NOT_COVERED[_name] = ("LIBRARY op called for its effect (no result, run by torch): "
                          "tests/frontend/test_effect_ops.py")
NOT_COVERED["prims.fma.default"] = ("registered by torch._inductor.inductor_prims; emitted by "
                                    "decompositions, covered by the zoo's adam workload")

_ids = [c.id for c in CASES]
assert len(_ids) == len(set(_ids)), sorted({i for i in _ids if _ids.count(i) > 1})
