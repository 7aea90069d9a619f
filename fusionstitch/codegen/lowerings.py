"""Per-op lowering rules: each op as a function from an output index to a value.

Three kinds of rules:
- index maps (views, broadcasts, slices, concatenation, gathers): rewrite the
  index and ask the operand for its value there;
- elementwise ops: ask each operand at the (broadcast) index, promote, combine;
- reductions (reductions.py's `reduction_loop_bodies`): the body of the loop over r and
  the finishing step (mean's division, variance's correction) applied where read.
An op without a rule raises Unsupported: its group is not generated.
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch

from ..ir.graph import GETITEM, Ref, TensorLiteral, TensorType, dtype_name
from ..ir.ops import one_write_scatter, resolve_overload
from ..ir.symbolic import is_symbolic
from ..schedule.propagate import FUSIBLE_DOTS
from . import expr as E
from ..config import elide_half_casts
from .lower import HALF, Lowerer, Unsupported, compute_dtype, unravel_shape
from .reductions import REDUCTION_KINDS


# -- argument binding --------------------------------------------------------------
@lru_cache(maxsize=None)
def _schema(op: str):
    return resolve_overload(op)._schema.arguments


def bind(node) -> dict:
    """The node's arguments by schema name, defaults filled in."""
    out = {}
    schema = _schema(node.op)
    for a, v in zip(schema, node.args):
        out[a.name] = v
    kw = dict(node.kwargs)
    for a in schema[len(node.args):]:
        if a.name in kw:
            out[a.name] = kw[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _type(L: Lowerer, v):
    if isinstance(v, Ref):
        return L.graph[v.name].type
    if isinstance(v, TensorLiteral):
        return v.type
    return None


def _promote(L: Lowerer, args) -> str:
    """torch's result type of two operands (tensors of any rank, literals, scalars)."""
    vals = []
    for a in args:
        t = _type(L, a)
        if isinstance(t, TensorType):
            vals.append(torch.empty((1,) * len(t.shape), dtype=t.torch_dtype, device="meta"))
        elif isinstance(a, (bool, int, float)):
            vals.append(a)
    if len(vals) == 1:
        v = vals[0]
        return dtype_name(v.dtype) if isinstance(v, torch.Tensor) else \
            dtype_name(torch.result_type(torch.empty((), device="meta"), v))
    if len(vals) != 2:
        raise Unsupported(f"type promotion of {len(vals)} operands")
    return dtype_name(torch.result_type(*vals))


def broadcast_index(idx, out_shape, in_shape):
    """Index of a broadcast operand (numpy rules: align right, size-1 dims read 0)."""
    off = len(out_shape) - len(in_shape)
    return tuple(E.ZERO if in_shape[d] == 1 else idx[d + off] for d in range(len(in_shape)))


def operand(L: Lowerer, v, idx, out_shape, dtype: str) -> str:
    """Value of argument `v` (Ref, literal tensor or scalar) at `idx`, as `dtype`."""
    if isinstance(v, Ref):
        t = L.graph[v.name].type
        var = L.value(v.name, broadcast_index(idx, out_shape, t.shape))
        return L.cast(var, dtype)
    if isinstance(v, TensorLiteral):
        if v.value.numel() != 1:
            raise Unsupported("a literal tensor with more than one element")
        return L.const(v.value.item(), dtype)
    if isinstance(v, (bool, int, float)):
        return L.const(v, dtype)
    raise Unsupported(f"operand {v!r}")


# -- elementwise ---------------------------------------------------------------------
_UNARY = {
    "abs.default": "abs", "neg.default": "neg", "exp.default": "exp", "exp2.default": "exp2",
    "log.default": "log", "log2.default": "log2", "log1p.default": "log1p",
    "expm1.default": "expm1", "sqrt.default": "sqrt", "rsqrt.default": "rsqrt",
    "sin.default": "sin", "cos.default": "cos", "tan.default": "tan", "tanh.default": "tanh",
    "sigmoid.default": "sigmoid", "erf.default": "erf", "floor.default": "floor",
    "ceil.default": "ceil", "round.default": "round", "trunc.default": "trunc",
    "sign.default": "sign", "reciprocal.default": "reciprocal",
    "bitwise_not.default": "bitwise_not",
    "asin.default": "asin", "acos.default": "acos", "atan.default": "atan",
    "sinh.default": "sinh", "cosh.default": "cosh", "asinh.default": "asinh",
    "acosh.default": "acosh", "atanh.default": "atanh", "erfc.default": "erfc",
    "log10.default": "log10",
}
_BINARY = {
    "mul.Tensor": "mul", "mul.Scalar": "mul", "div.Tensor": "truediv",
    "div.Scalar": "truediv", "maximum.default": "maximum", "minimum.default": "minimum",
    "pow.Tensor_Scalar": "pow", "pow.Tensor_Tensor": "pow", "pow.Scalar": "pow",
    "remainder.Tensor": "remainder", "remainder.Scalar": "remainder",
    "fmod.Tensor": "fmod", "fmod.Scalar": "fmod",
    "bitwise_and.Tensor": "bitwise_and", "bitwise_and.Scalar": "bitwise_and",
    "bitwise_or.Tensor": "bitwise_or", "bitwise_or.Scalar": "bitwise_or",
    "bitwise_xor.Tensor": "bitwise_xor", "bitwise_xor.Scalar": "bitwise_xor",
    "atan2.default": "atan2", "hypot.default": "hypot", "copysign.Tensor": "copysign",
}
_COMPARE = {f"{c}.{k}": c for c in ("eq", "ne", "lt", "le", "gt", "ge")
            for k in ("Tensor", "Scalar")}
_LOGICAL = {"logical_and.default": "and", "logical_or.default": "or",
            "logical_xor.default": "xor"}
_PREDICATES = {"isnan.default": "isnan", "isinf.default": "isinf",
               "logical_not.default": "not"}


_CLAMPS = frozenset({"clamp.default", "clamp_min.default", "clamp_max.default", "relu.default",
                     "hardtanh.default", "clamp.Tensor", "clamp_min.Tensor",
                     "clamp_max.Tensor"})

# pow with these exponents is exact arithmetic, as in torch's own kernels
_POW_SPECIAL = {
    1: lambda L, v, t: v,
    2: lambda L, v, t: L.op("mul", (v, v), t),
    3: lambda L, v, t: L.op("mul", (L.op("mul", (v, v), t), v), t),
    0.5: lambda L, v, t: L.op("sqrt", (v,), t),
    -0.5: lambda L, v, t: L.op("rsqrt", (v,), t),
    -1: lambda L, v, t: L.op("reciprocal", (v,), t),
    -2: lambda L, v, t: L.op("reciprocal", (L.op("mul", (v, v), t),), t),
}


def _converted(L: Lowerer, src, value: str, dtype: str) -> str:
    """`value` (of operand `src`, in `dtype`'s compute dtype) converted to `dtype`.

    A value of a half type lives in float inside a kernel (lower.compute_dtype), and an
    op computing one is not rounded until it is stored (we round once where eager rounds
    per op). An explicit conversion to a half type from another dtype is different: it
    is the point of the program (`x.half().float()` is x rounded to half, a softmax of
    bf16 inputs rounds its result), so it rounds here as eager does, unless
    FUSIONSTITCH_ELIDE_HALF_CASTS=1."""
    t = _type(L, src)
    src_dtype = t.dtype if isinstance(t, TensorType) else None
    if dtype in HALF and src_dtype != dtype and not elide_half_casts():
        return L.op("cast", (value,), dtype)
    return value


def _elementwise(L: Lowerer, node, idx) -> str | None:
    t = node.type
    out = compute_dtype(t.dtype)
    shape = t.shape
    op = node.op
    a = node.args
    if op in _UNARY:
        return L.op(_UNARY[op], (operand(L, a[0], idx, shape, out),), out)
    if op in ("pow.Tensor_Scalar",) and isinstance(a[1], (int, float)) and \
            a[1] in _POW_SPECIAL and out.startswith("f"):
        return _POW_SPECIAL[a[1]](L, operand(L, a[0], idx, shape, out), out)
    if op in _BINARY:
        if out in ("b8",) and _BINARY[op].startswith("bitwise"):
            name = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor"}[_BINARY[op]]
            return L.op(name, (operand(L, a[0], idx, shape, out),
                               operand(L, a[1], idx, shape, out)), out)
        return L.op(_BINARY[op], (operand(L, a[0], idx, shape, out),
                                  operand(L, a[1], idx, shape, out)), out)
    if op in ("add.Tensor", "add.Scalar", "sub.Tensor", "sub.Scalar", "rsub.Scalar"):
        b = bind(node)
        x, y = operand(L, a[0], idx, shape, out), operand(L, a[1], idx, shape, out)
        alpha = b.get("alpha", 1)
        if op == "rsub.Scalar":
            x, y = y, x
        if alpha not in (1, None):
            y = L.op("mul", (y, L.const(alpha, out)), out)
        return L.op("sub" if op.startswith(("sub", "rsub")) else "add", (x, y), out)
    if op in _COMPARE or op in _LOGICAL:
        if op in _LOGICAL:
            ct = "b8"
        else:
            ct = compute_dtype(_promote(L, a[:2]))
        return L.op(_COMPARE.get(op) or _LOGICAL[op],
                    (operand(L, a[0], idx, shape, ct), operand(L, a[1], idx, shape, ct)), "b8")
    if op in _PREDICATES:
        src = _type(L, a[0])
        ct = "b8" if op == "logical_not.default" else compute_dtype(src.dtype)
        v = operand(L, a[0], idx, shape, ct)
        if op != "logical_not.default" and not ct.startswith("f"):
            return L.const(False, "b8")
        return L.op(_PREDICATES[op], (v,), "b8")
    if op == "div.Tensor_mode":
        mode = bind(node).get("rounding_mode")
        x, y = operand(L, a[0], idx, shape, out), operand(L, a[1], idx, shape, out)
        if mode is None:
            return L.op("truediv", (x, y), out)
        if mode == "floor":
            return L.op("floordiv", (x, y), out)
        if out.startswith("f"):
            return L.op("trunc", (L.op("truediv", (x, y), out),), out)
        raise Unsupported("integer division with rounding_mode='trunc'")
    if op in ("scatter.value", "scatter.src") and one_write_scatter(L.graph, node):
        return _one_write_scatter(L, node, idx, out)
    if op == "where.self":
        c = operand(L, a[0], idx, shape, "b8")
        return L.op("where", (c, operand(L, a[1], idx, shape, out),
                              operand(L, a[2], idx, shape, out)), out)
    if op == "prims.fma.default":
        x, y, z = (operand(L, v, idx, shape, out) for v in a[:3])
        return L.op("add", (L.op("mul", (x, y), out), z), out)
    if op in _CLAMPS:
        # (the Tensor overloads too: torch's vectorised clamp is minimum(maximum(x, lo),
        # hi), NaN from any of the three)
        b = bind(node)
        v = operand(L, a[0], idx, shape, out)
        lo = 0 if op == "relu.default" else b.get("min")
        hi = b.get("max") if not op.startswith("clamp_min") else None
        if op.startswith("clamp_max"):
            lo, hi = None, b.get("max")
        if op == "hardtanh.default":   # relu6 (MobileNet): a clamp, NaN kept as clamp keeps it
            lo, hi = b["min_val"], b["max_val"]
        if lo is not None:
            v = L.op("maximum", (v, operand(L, lo, idx, shape, out)), out)
        if hi is not None:
            v = L.op("minimum", (v, operand(L, hi, idx, shape, out)), out)
        return v
    if op == "gelu.default":
        v = operand(L, a[0], idx, shape, out)
        half = L.const(0.5, out)
        if bind(node).get("approximate", "none") == "tanh":
            inner = L.op("mul", (L.const(math.sqrt(2 / math.pi), out),
                                 L.op("add", (v, L.op("mul", (L.const(0.044715, out),
                                      L.op("mul", (v, L.op("mul", (v, v), out)), out)), out)),
                                      out)), out)
            t1 = L.op("add", (L.const(1.0, out), L.op("tanh", (inner,), out)), out)
        else:
            t1 = L.op("add", (L.const(1.0, out), L.op("erf", (
                L.op("mul", (v, L.const(1 / math.sqrt(2), out)), out),), out)), out)
        return L.op("mul", (L.op("mul", (half, v), out), t1), out)
    if op == "silu.default":
        v = operand(L, a[0], idx, shape, out)
        return L.op("mul", (v, L.op("sigmoid", (v,), out)), out)
    if op == "leaky_relu.default":        # torch's: x > 0 ? x : x * slope
        v = operand(L, a[0], idx, shape, out)
        slope = L.const(bind(node)["negative_slope"], out)
        return L.op("where", (L.op("gt", (v, L.const(0, out)), "b8"), v,
                              L.op("mul", (v, slope), out)), out)
    if op == "elu.default":
        # torch's: x <= 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale
        b = bind(node)
        v = operand(L, a[0], idx, shape, out)
        neg = L.op("mul", (L.op("expm1", (L.op("mul", (v, L.const(b["input_scale"], out)),
                                                out),), out),
                           L.const(b["alpha"] * b["scale"], out)), out)
        return L.op("where", (L.op("le", (v, L.const(0, out)), "b8"), neg,
                              L.op("mul", (v, L.const(b["scale"], out)), out)), out)
    if op in ("fmax.default", "fmin.default"):
        # the larger (smaller) of the two, the other where one is NaN (C's fmax)
        x, y = operand(L, a[0], idx, shape, out), operand(L, a[1], idx, shape, out)
        m = L.op("maximum" if op == "fmax.default" else "minimum", (x, y), out)
        if not out.startswith("f"):
            return m
        return L.op("where", (L.op("isnan", (y,), "b8"), x,
                              L.op("where", (L.op("isnan", (x,), "b8"), y, m), out)), out)
    if op in ("_to_copy.default", "copy.default"):
        src = a[0] if op == "_to_copy.default" else a[1]
        return _converted(L, src, operand(L, src, idx, shape, out), t.dtype)
    if op in ("clone.default", "alias.default", "lift_fresh_copy.default",
              "detach.default", "_conj.default"):
        return operand(L, a[0], idx, shape, out)
    if op in ("full_like.default", "full.default", "fill.Scalar", "scalar_tensor.default"):
        b = bind(node)
        v = b.get("fill_value", b.get("value", b.get("s")))
        if op == "scalar_tensor.default":
            v = a[0]
        if not isinstance(v, (bool, int, float)):
            raise Unsupported(f"{op} with a non-scalar fill value")
        return L.const(v, out)
    if op in ("zeros_like.default", "zeros.default", "new_zeros.default"):
        return L.const(0, out)
    if op in ("ones_like.default", "ones.default", "new_ones.default"):
        return L.const(1, out)
    return None


# -- index maps ------------------------------------------------------------------------
def view_index(L: Lowerer, idx, out_shape, in_shape):
    """Index into the source of a reshape: ravel over the view, unravel over the source.

    Dims are matched in groups of equal products so that untouched dims keep their
    index (a [B,T,C] -> [B*T,C] view only merges B and T)."""
    res = [E.ZERO] * len(in_shape)
    i = j = 0
    no, ni = len(out_shape), len(in_shape)
    while i < no or j < ni:
        # grow a group until the products agree
        gi, gj = [i] if i < no else [], [j] if j < ni else []
        po = out_shape[i] if i < no else 1
        pi = in_shape[j] if j < ni else 1
        while po != pi:
            if po < pi and gi[-1] + 1 < no:
                gi.append(gi[-1] + 1)
                po *= out_shape[gi[-1]]
            elif pi < po and gj[-1] + 1 < ni:
                gj.append(gj[-1] + 1)
                pi *= in_shape[gj[-1]]
            else:
                break
        # trailing size-1 dims join the last group
        i = (gi[-1] + 1) if gi else i
        j = (gj[-1] + 1) if gj else j
        if po != pi:   # should not happen for valid views
            gi, gj = list(range(no)), list(range(ni))
            i, j = no, ni
        flat = E.ravel(*_strip_pair([idx[k] for k in gi], [L.size(out_shape[k]) for k in gi]))
        sub = unravel_shape(L, flat, [in_shape[k] for k in gj])
        for k, e in zip(gj, sub):
            res[k] = e
    return tuple(res)


def _strip_pair(index, sizes):
    keep = [k for k, s in enumerate(sizes) if not (isinstance(s, E.Const) and s.value == 1)]
    return tuple(index[k] for k in keep), tuple(sizes[k] for k in keep)


def norm_dim(d: int, rank: int) -> int | None:
    """Dim `d` of a tensor of rank `rank`, non-negative; None for a 0-d tensor, which aten
    treats as one element along dim 0 or -1 (an index into its empty index is an error)."""
    return d % rank if rank else None


def index_map(L: Lowerer, node, idx, element):
    """(source ref, source element, source index), or a computed var, or None."""
    op = node.op
    g = L.graph
    a = node.args
    out_shape = node.type.shape if isinstance(node.type, TensorType) else None
    if op in ("view.default", "_unsafe_view.default", "reshape.default"):
        src = g[a[0].name].type
        return a[0].name, None, view_index(L, idx, out_shape, src.shape)
    if op == "permute.default":
        dims = [norm_dim(d, len(out_shape)) for d in a[1]]
        res = [E.ZERO] * len(dims)
        for k, d in enumerate(dims):
            res[d] = idx[k]
        return a[0].name, None, tuple(res)
    if op == "transpose.int":
        r = len(out_shape)
        if r == 0:
            return a[0].name, None, idx
        d0, d1 = norm_dim(a[1], r), norm_dim(a[2], r)
        res = list(idx)
        res[d0], res[d1] = idx[d1], idx[d0]
        return a[0].name, None, tuple(res)
    if op in ("t.default", "numpy_T.default"):
        return a[0].name, None, tuple(reversed(idx))
    if op == "flip.default":               # element n - 1 - i along each flipped dim
        res = list(idx)
        for d in {norm_dim(d, len(out_shape)) for d in a[1]} - {None}:    # (None: 0-d)
            res[d] = E.add(L.num(out_shape[d] - 1), E.mul(idx[d], L.num(-1)))
        return a[0].name, None, tuple(res)
    if op == "expand.default":
        src = g[a[0].name].type.shape
        return a[0].name, None, broadcast_index(idx, out_shape, src)
    if op == "unsqueeze.default":
        d = norm_dim(a[1], len(out_shape))
        return a[0].name, None, tuple(idx[:d]) + tuple(idx[d + 1:])
    if op in ("squeeze.dim", "squeeze.dims", "squeeze.default"):
        src = g[a[0].name].type.shape
        return a[0].name, None, view_index(L, idx, out_shape, src)
    if op == "slice.Tensor":
        b = bind(node)
        src = g[a[0].name].type.shape
        d = norm_dim(b["dim"], len(src))
        if d is None:
            raise Unsupported(f"%{node.name}: slice of a 0-d tensor")
        start = b["start"] or 0
        step = b["step"] or 1
        if start < 0:
            start += src[d]
        start = min(max(start, 0), src[d])
        res = list(idx)
        res[d] = E.add(E.mul(idx[d], L.num(step)), L.num(start))
        return a[0].name, None, tuple(res)
    if op == "select.int":
        src = g[a[0].name].type.shape
        d = norm_dim(a[1], len(src))
        if d is None:
            raise Unsupported(f"%{node.name}: select of a 0-d tensor")
        i = a[2] + src[d] if a[2] < 0 else a[2]
        return a[0].name, None, tuple(idx[:d]) + (L.num(i),) + tuple(idx[d:])
    if op == GETITEM:
        src_node = g[a[0].name]
        if src_node.op in ("split_with_sizes.default", "split.Tensor") and \
                src_node.name in L.members:
            return _split_item(L, src_node, a[1], idx)
        return a[0].name, a[1], idx
    if op in ("split_with_sizes.default", "split.Tensor"):
        raise Unsupported(f"{op} read as a whole")
    if op == "cat.default":
        return _cat(L, node, idx)
    if op == "slice_scatter.default":
        return _slice_scatter(L, node, idx)
    if op == "repeat.default":
        # out[.., i_k, ..] = x[.., i_k mod size_k, ..] over x's dims (the trailing ones)
        src = g[a[0].name].type.shape
        lead = len(out_shape) - len(src)
        return a[0].name, None, tuple(
            E.mod(idx[lead + j], L.size(n)) if n != out_shape[lead + j] else idx[lead + j]
            for j, n in enumerate(src))
    if op == "constant_pad_nd.default":
        return _pad(L, node, idx)
    if op == "embedding.default":
        b = bind(node)
        w, ind = b["weight"], b["indices"]
        it = g[ind.name].type
        k = L.value(ind.name, tuple(idx[:len(it.shape)]))
        rows = g[w.name].type.shape[0]
        row = E.Value(L.checked_index(k, rows, f"{op}: an index into the weight's {rows} rows"))
        return w.name, None, (row, idx[-1])
    if op == "gather.default":
        b = bind(node)
        src = g[b["self"].name].type.shape
        d = norm_dim(b["dim"], len(src))
        if d is None:       # a 0-d source: its one element (index 0 is the only valid one)
            return b["self"].name, None, ()
        k = L.value(b["index"].name, idx)
        res = list(idx)
        res[d] = E.Value(L.checked_index(k, src[d], f"{op}: an index along dim {d}"))
        return b["self"].name, None, tuple(res)
    if op == "index_select.default":
        b = bind(node)
        src = g[b["self"].name].type.shape
        d = norm_dim(b["dim"], len(src))
        if d is None:       # a 0-d source: its one element (index 0 is the only valid one)
            return b["self"].name, None, ()
        k = L.value(b["index"].name, (idx[d],))
        res = list(idx)
        res[d] = E.Value(L.checked_index(k, src[d], f"{op}: an index along dim {d}"))
        return b["self"].name, None, tuple(res)
    if op in ("index.Tensor", "_unsafe_index.Tensor"):
        return _advanced_index(L, node, idx)
    if op in ("arange.start_step", "arange.default", "arange.start", "iota.default"):
        raise Unsupported(f"{op}")
    return None


def _one_write_scatter(L: Lowerer, node, idx, out: str) -> str:
    """`scatter(x, dim, index, value|src)` writing one element per line along `dim`
    (ir/ops.py's `one_write_scatter`): x where the line's one index is not this
    position, else the value (src at the index's position, [.., 0, ..]). The index is
    checked against the dim's size, as eager's scatter checks it."""
    x, dim, index, v = node.args
    shape = node.type.shape
    d = dim % len(shape)
    at = tuple(E.Const(0) if k == d else e for k, e in enumerate(idx))
    k = L.checked_index(L.value(index.name, at), shape[d], f"{node.op}: an index along dim {d}")
    hit = L.op("eq", (L.cast(L.index(idx[d]), "i64"), k), "b8")
    return L.op("where", (hit, operand(L, v, at, shape, out), operand(L, x, idx, shape, out)),
                out)


def _advanced_index(L: Lowerer, node, idx):
    """x[i0, i1, ...] with integer index tensors (a padding mask read at [batch, kv]
    positions, position ids): the index tensors broadcast to one shape B; the output is
    x's leading full dims, B, x's trailing dims when the indexed dims are adjacent, else
    B first (numpy's rules). A negative index counts from the end, as in eager."""
    b = bind(node)
    src = L.graph[b["self"].name].type.shape
    indices = list(b["indices"])
    if any(v is not None and not isinstance(v, Ref) for v in indices):
        raise Unsupported(f"{node.op} with a literal index")
    if any(L.graph[v.name].type.dtype in ("b8", "u8") for v in indices if v is not None):
        raise Unsupported(f"{node.op} with a boolean mask (a data-dependent shape)")
    return b["self"].name, None, advanced_position(
        L, node.op, src, indices, idx, node.op != "_unsafe_index.Tensor")


def _index_layout(graph, indices):
    """(indexed dims, their broadcast shape B, where B's dims sit in x[indices])."""
    refs = [(d, v) for d, v in enumerate(indices) if v is not None]
    bshape = tuple(torch.broadcast_shapes(*(graph[v.name].type.shape for _, v in refs)))
    dims = [d for d, _ in refs]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    return dims, bshape, dims[0] if adjacent else 0


def indexed_shape(graph, src, indices) -> tuple:
    """The shape of x[indices] for x of shape `src` (integer index tensors, numpy's rules)."""
    dims, bshape, at = _index_layout(graph, indices)
    rest = [n for d, n in enumerate(src) if d not in dims]
    return tuple(rest[:at]) + bshape + tuple(rest[at:])


def advanced_position(L: Lowerer, op: str, src, indices, idx, checked: bool = True):
    """The position in x (shape `src`) of point `idx` of x[indices]: index tensors read
    there, a negative index counted from the end; `checked`: each must then lie in its dim
    (else the kernel raises IndexError, naming `op`)."""
    dims, bshape, at = _index_layout(L.graph, indices)
    bidx = tuple(idx[at:at + len(bshape)])
    rest = iter(tuple(idx[:at]) + tuple(idx[at + len(bshape):]))
    res = []
    for d in range(len(src)):
        if d not in dims:
            res.append(next(rest))
            continue
        v = indices[d]
        t = L.graph[v.name].type
        k = L.cast(L.value(v.name, broadcast_index(bidx, bshape, t.shape)), "i64")
        n = L.const(src[d], "i64")
        k = L.op("where", (L.op("lt", (k, L.const(0, "i64")), "b8"),
                           L.op("add", (k, n), "i64"), k), "i64")
        if checked:   # (_unsafe_index's indices are computed in range)
            k = L.checked_index(k, src[d], f"{op}: an index of dim {d} (a negative one "
                                           f"counted from the end)")
        res.append(E.Value(k))
    return tuple(res)


def _split_item(L: Lowerer, src_node, i: int, idx):
    b = bind(src_node)
    x = b["self"]
    shape = L.graph[x.name].type.shape
    d = norm_dim(b["dim"], len(shape))
    if d is None:
        raise Unsupported(f"%{src_node.name}: split of a 0-d tensor")
    if src_node.op == "split.Tensor":
        size = b["split_size"]
        sizes = [min(size, shape[d] - k) for k in range(0, shape[d], size)]
    else:
        sizes = list(b["split_sizes"])
    start = sum(sizes[:i])
    res = list(idx)
    res[d] = E.add(idx[d], L.num(start))
    return x.name, None, tuple(res)


def _cat(L: Lowerer, node, idx):
    b = bind(node)
    tensors = [t for t in b["tensors"] if L.graph[t.name].type.numel or
               len(L.graph[t.name].type.shape) != 1]
    out_t = node.type
    d = norm_dim(b["dim"], len(out_t.shape))
    if d is None:
        raise Unsupported(f"%{node.name}: cat of 0-d tensors")
    out = compute_dtype(out_t.dtype)
    pos = L.index(idx[d])
    offset = 0
    branches = []
    for t in tensors:
        size = L.graph[t.name].type.shape[d]
        branches.append((offset, size, t))
        offset += size
    result = None
    # evaluate from the last piece: where(pos < end_k, piece_k, rest)
    for start, size, t in reversed(branches):
        sub = list(idx)
        sub[d] = E.add(idx[d], L.num(-start)) if start else idx[d]
        lo = L.op("ge", (pos, L.index(L.size(start) if start else E.ZERO)), "b8")
        hi = L.op("lt", (pos, L.index(E.add(L.size(start) if start else E.ZERO,
                                            L.size(size)))), "b8")
        inside = L.op("and", (lo, hi), "b8")
        with L.masked(inside):
            v = L.cast(L.value(t.name, tuple(sub)), out)
        result = v if result is None else L.op("where", (inside, v, result), out)
    return result


def _slice_bounds(size: int, start, end, step) -> tuple[int, int, int]:
    """slice.Tensor's start, end, step on a dim of `size` (None, negatives, clamping)."""
    start = 0 if start is None else start
    end = size if end is None else end
    start, end = (v + size if v < 0 else v for v in (start, end))
    start = min(max(start, 0), size)
    return start, min(max(end, start), size), step or 1


def _slice_scatter(L: Lowerer, node, idx):
    """slice_scatter(x, src, dim, start, end, step), the backward of a slice (rotary
    embeddings' halves): src's element where the slice reads, x's elsewhere."""
    b = bind(node)
    shape = node.type.shape
    d = norm_dim(b["dim"], len(shape))
    start, end, step = _slice_bounds(shape[d], b["start"], b["end"], b["step"])
    count = L.graph[b["src"].name].type.shape[d]
    out = compute_dtype(node.type.dtype)
    base = L.cast(L.value(b["self"].name, tuple(idx)), out)
    if count == 0:
        return base
    if is_symbolic(start) or is_symbolic(step):
        raise Unsupported("slice_scatter with a symbolic start or step")
    pos = L.index(idx[d])
    # the end is symbolic where the slice's length is (x[::2] of a dynamic dim): a sym
    inside = L.op("and", (L.op("ge", (pos, L.index(E.Const(start))), "b8"),
                          L.op("lt", (pos, L.index(L.num(start + (count - 1) * step + 1))),
                                "b8")), "b8")
    if step > 1:
        # (i - start) mod step == 0, kept non-negative: add a multiple of step >= start
        shifted = E.add(idx[d], E.Const(-(start % step) + step))
        on_step = L.op("eq", (L.index(E.mod(shifted, E.Const(step))), L.index(E.ZERO)), "b8")
        inside = L.op("and", (inside, on_step), "b8")
    sub = list(idx)
    sub[d] = E.floordiv(E.add(idx[d], E.Const(-start)), E.Const(step))
    with L.masked(inside):
        v = L.cast(L.value(b["src"].name, tuple(sub)), out)
    return L.op("where", (inside, v, base), out)


def _pad(L: Lowerer, node, idx):
    b = bind(node)
    src = L.graph[b["self"].name].type.shape
    pad = list(b["pad"])
    out = compute_dtype(node.type.dtype)
    sub = list(idx)
    conds = []
    for k in range(len(pad) // 2):
        # the source index is idx - lo; a negative pad crops (a pad's backward, MobileNet's
        # "same" padding): no bound to check on that side, the output is inside the source
        d = len(src) - 1 - k
        lo, hi = pad[2 * k], pad[2 * k + 1]
        if not (isinstance(lo, int) and isinstance(hi, int)):
            raise Unsupported("constant_pad_nd with a symbolic pad")
        sub[d] = E.add(idx[d], L.num(-lo)) if lo else idx[d]
        p = L.index(idx[d])
        if lo > 0:
            conds.append(L.op("ge", (p, L.index(L.num(lo))), "b8"))
        if hi > 0:
            conds.append(L.op("lt", (p, L.index(E.add(L.num(lo), L.size(src[d])))), "b8"))
    inside = conds[0] if conds else None
    for c in conds[1:]:
        inside = L.op("and", (inside, c), "b8")
    with L.masked(inside):
        v = L.cast(L.value(b["self"].name, tuple(sub)), out)
    if inside is None:
        return v
    return L.op("where", (inside, v, L.const(b.get("value", 0) or 0, out)), out)


def lower_node(L: Lowerer, node, idx, element) -> str:
    if element is not None and node.op != GETITEM:
        raise Unsupported(f"%{node.name} ({node.op}): multi-result op")
    mapped = index_map(L, node, idx, element)
    if mapped is not None:
        if isinstance(mapped, str):
            return mapped
        src, el, sub = mapped
        var = L.value(src, sub, el)
        t = node.type
        return L.cast(var, compute_dtype(t.dtype)) if isinstance(t, TensorType) else var
    if isinstance(node.type, TensorType):
        var = _elementwise(L, node, idx)
        if var is not None:
            return var
    raise Unsupported(f"%{node.name}: no code generation rule for {node.op}")


# Ops with a rule above, in reductions.py or in codegen/batch.py (the GEMMs of block
# composition): the
# planner's quick check; lowering itself has the last word.
SUPPORTED_OPS = frozenset(
    FUSIBLE_DOTS |
    set(_UNARY) | set(_BINARY) | set(_COMPARE) | set(_LOGICAL) | set(_PREDICATES) | set(REDUCTION_KINDS)
    | _CLAMPS | {"add.Tensor", "add.Scalar", "sub.Tensor", "sub.Scalar", "rsub.Scalar",
       "div.Tensor_mode", "where.self", "prims.fma.default", "slice_scatter.default",
       "repeat.default",
       "scatter.value", "scatter.src",    # the one-write form alone (ir/ops.py)
       "gelu.default", "leaky_relu.default", "elu.default", "fmax.default", "fmin.default",
       "flip.default",
       "silu.default", "_to_copy.default", "clone.default", "alias.default",
       "lift_fresh_copy.default", "detach.default", "_conj.default", "copy.default",
       "full_like.default", "full.default", "fill.Scalar", "scalar_tensor.default",
       "zeros_like.default", "zeros.default", "new_zeros.default", "ones_like.default",
       "ones.default", "new_ones.default", "view.default", "_unsafe_view.default",
       "reshape.default", "permute.default", "transpose.int", "t.default", "numpy_T.default",
       "expand.default", "unsqueeze.default", "squeeze.dim", "squeeze.dims",
       "squeeze.default", "slice.Tensor", "select.int", GETITEM, "split_with_sizes.default",
       "split.Tensor", "cat.default", "constant_pad_nd.default", "embedding.default",
       "gather.default", "index_select.default", "index.Tensor", "_unsafe_index.Tensor"})
