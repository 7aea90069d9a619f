"""Lowering rules of reductions (a part of lowerings.py's rules): the body of each loop
over r of a reduction and the finishing step (mean's division, the variance's
correction) applied where the result is read; var / var_mean as a shifted two-pass
scheme (`_variance_passes`).
"""
from __future__ import annotations

from ..ir.graph import TensorType
from ..schedule.propagate import SIMPLE_REDUCTIONS, reduced_dims
from . import expr as E
from .lower import Lowerer, Unsupported, canonical_index, compute_dtype

# the reduce kind (codegen/kernel.py's REDUCTIONS) of each reduction op with a rule here
REDUCTION_KINDS = {"sum.dim_IntList": "sum", "sum.default": "sum", "mean.dim": "sum",
                   "mean.default": "sum", "amax.default": "max", "max.default": "max",
                   "amin.default": "min", "min.default": "min",
                   "any.dim": "max", "any.dims": "max", "any.default": "max",
                   "all.dim": "min", "all.default": "min", "var_mean.correction": "sum",
                   "var.correction": "sum"}


def reduction_layout(L: Lowerer, names):
    """(input shape, reduced dims) of the component's first reduction."""
    for n in names:
        node = L.graph[n]
        if node.op in SIMPLE_REDUCTIONS:
            shape, dims = reduced_dims(L.graph, node)
            return tuple(shape), tuple(dims)
    return None


def reduction_loop_bodies(L: Lowerer, name: str, p: int, idx=None):
    """Emit pass `p` of reduction `name` into the current loop; return what it defines:
    [(key, var, dtype, finish)] where finish(L, var) turns the raw result into the value.
    `idx` is the input's index at the loop point (default: x over kept dims, r over
    reduced ones)."""
    node = L.graph[name]
    kind = REDUCTION_KINDS.get(node.op)
    if kind is None:
        raise Unsupported(f"%{name}: no code generation rule for the reduction {node.op}")
    shape, dims = reduced_dims(L.graph, node)
    if idx is None:
        idx = canonical_index(L, shape, dims)
    src = node.args[0].name
    t = node.type
    out_dtype = (t.elements[0] if not isinstance(t, TensorType) else t).dtype
    acc = compute_dtype(out_dtype)
    if node.op in ("any.dim", "any.dims", "any.default", "all.dim", "all.default"):
        acc = "i32"
    count = 1
    for d in dims:
        count *= shape[d]
    v = L.cast(L.value(src, idx), acc)
    if node.op in ("var_mean.correction", "var.correction"):
        return _variance_passes(L, name, node, p, v, idx, dims, count, acc)
    var = _reduce(L, v, kind, acc)
    fin = None
    if node.op in ("mean.dim", "mean.default"):
        n = L.size(count)
        fin = lambda L, s: L.op("truediv", (s, _count(L, n, acc)), acc)  # noqa: E731
    elif acc != compute_dtype(out_dtype):
        fin = lambda L, s: L.cast(s, compute_dtype(out_dtype))  # noqa: E731
    return [((name, None), var, acc, fin)]


def _variance_passes(L: Lowerer, name: str, node, p: int, v: str, idx, dims, count: int,
                     acc: str):
    """var / var_mean as a shifted two-pass scheme: with d = x - pivot, where the pivot is
    the row's first element, pass 0 sums d, and pass 1 sums (d - sum(d) / n)**2; the mean
    is pivot + sum(d) / n.

    Why shifted: sum(x) / n rounds to within a few ulps of |mean| (a float32 sum of 768
    copies of 12345.678 is off by 5 ulps), and a mean off by delta leaves x - mean = delta
    on a constant row, so layer norm's (x - mean) * rsqrt(var + eps) gives delta / sqrt(eps)
    (0.84 there) where eager gives exactly 0. With the pivot subtracted, every d of a
    constant row is exactly 0: the mean is exactly the pivot and the variance exactly 0.
    In general the rounding of sum(d) scales with the spread of the row (|x - pivot|), not
    with |mean|, and pass 1 centres d on the mean of d, a number of the size of the spread:
    even a float mean rounded by ulp(mean) / 2 (what a float can hold of it) does not add
    its square to the variance, which stays accurate when |mean| >> std, as Welford's does.
    Why not Welford: its update divides per element and needs its own combine (OpenMP
    reductions, Triton's tl.reduce, the split partials); a shifted pass is a plain sum, so
    every target's summation (the cpu target's blocked float/double sums, Triton's
    lane-wise sums and tree combine) applies to it unchanged, and it vectorises. Why two
    passes (not sum(d**2) - sum(d)**2 / n in one): that cancels when the pivot is far from
    the mean (an outlier as first element); the second pass around the mean does not.

    An infinite pivot would turn a finite element's d into -inf and an infinite mean into
    NaN (inf + -inf), so a pivot of +-inf is replaced by 0 (the plain sum: the mean is
    then +-inf or NaN, as torch.mean's). A pivot of NaN makes the mean NaN, as the row's
    NaN does. d overflows only when |x - pivot| exceeds the float range (elements of
    opposite signs beyond half of it)."""
    pivot_idx = tuple(E.ZERO if k in dims else e for k, e in enumerate(idx))
    src = node.args[0].name

    def pivot(L: Lowerer) -> str:
        if count == 0:     # an empty row has no first element (and its mean is NaN)
            return L.const(0, acc)
        # under xmask alone: element 0 of row x exists, and a load that does not depend on
        # r is loop-invariant (the C++ compiler hoists it out of the loop over r)
        saved, L.mask = L.mask, "xmask"
        try:
            first = L.cast(L.value(src, pivot_idx), acc)
        finally:
            L.mask = saved
        return L.op("where", (L.op("isinf", (first,), "b8"), L.const(0, acc), first), acc)

    n = L.size(count)

    def shifted_mean(L: Lowerer, s: str) -> str:      # the mean of d
        return L.op("truediv", (s, _count(L, n, acc)), acc)

    def mean(L: Lowerer, s: str) -> str:
        return L.op("add", (pivot(L), shifted_mean(L, s)), acc)

    d = L.op("sub", (v, pivot(L)), acc)
    if p == 0:
        shifted = _reduce(L, d, "sum", acc)
        out = [((name, "sum"), shifted, acc, shifted_mean)]
        if node.op == "var_mean.correction":
            out.append(((name, 1), shifted, acc, mean))
        return out
    from .lowerings import bind
    corr = bind(node).get("correction")
    corr = 1 if corr is None else corr
    s_var, _, fin = L.reduced[(name, "sum")]
    dev = L.op("sub", (d, fin(L, s_var)), acc)
    q = _reduce(L, L.op("mul", (dev, dev), acc), "sum", acc)

    def var_finish(L: Lowerer, q: str) -> str:
        denom = L.op("maximum", (L.op("sub", (_count(L, n, acc), L.const(corr, acc)),
                                      acc), L.const(0, acc)), acc)
        return L.op("truediv", (q, denom), acc)
    key = (name, 0) if node.op == "var_mean.correction" else (name, None)
    return [(key, q, acc, var_finish)]


def _count(L: Lowerer, n, dtype):
    return L.cast(L.index(n), dtype)


def _reduce(L: Lowerer, v: str, kind: str, dtype: str) -> str:
    from .kernel import Reduce, identity
    masked = L.op("where", (L.mask, v, L.const(identity(kind, dtype), dtype)), dtype)
    var = L.fresh("red")
    L.scope.stmts.append(Reduce(var, kind, masked, dtype))
    return var
