"""Scatter kernels: ops that write data-dependent positions, each a kernel of its own.

`index_put(x, indices, values, accumulate)` (the backward of an embedding or of an
advanced index: `index_put(zeros, [ids], grad, True)`), `index_add(x, dim, index,
source)` and `scatter_add(x, dim, index, src)` write each element of their source at a
position read from data, adding when the op accumulates; positions may repeat. They
are not functions of the output index, so they have no rule in `lowerings.py` and
fuse with nothing (fusion/legality.py); alone, each lowers to a kernel of two parts,
run in order by one launch:

* component 0, "flat": out = x (the copy that makes the op out of place);
* component 1, "scatter": for each point of the source's iteration space in row-major
  order, the destination position (each data index checked, a negative index counted
  from the end where the op allows it) and a store into it, accumulating
  (`Store.accumulate`: out[p] += v) or not.

A scatter component runs on one thread, in order (the C++ target, which reads the
positions once per row of the source and runs along the row after): the sums into each
destination are made in ascending source position, as eager's serial CPU kernel adds
them (eager's sorted or parallel paths on large inputs add in another order: the results
then agree within the usual bound of a sum's rounding), and a repeated position of a
non-accumulating store keeps the last value (eager leaves it unspecified).
A target without such stores refuses the kernel (`Target.scatter_kernels`), and the op
runs through torch, counted with that reason.
"""
from __future__ import annotations

from ..ir.graph import Ref
from . import expr as E
from .kernel import Component, Kernel, Store
from .lower import Lowerer, Scope, Unsupported, compute_dtype, unravel_shape

# ops with a kernel here (`lower_scatter`), and the other ops of ir/ops.py's SCATTER_OPS
# stay with torch; scatter.src/value have a kernel here too, except in their one-write
# form, which has an elementwise rule (lowerings.py) and fuses (`is_scatter_kernel`)
SCATTER_KERNEL_OPS = frozenset({"index_put.default", "_unsafe_index_put.default",
                                "index_add.default", "scatter_add.default"})
_OVERWRITES = frozenset({"scatter.src", "scatter.value"})
_INDEX_DTYPES = frozenset({"i64", "i32"})


def is_scatter_kernel(graph, node) -> bool:
    """Whether op `node` lowers to a scatter kernel of its own (`lower_scatter`)."""
    if node.op in SCATTER_KERNEL_OPS:
        return True
    if node.op not in _OVERWRITES:     # (before the import: planners ask per node)
        return False
    from ..ir.ops import one_write_scatter
    return not one_write_scatter(graph, node)


def lower_scatter(graph, name: str, kernel_name: str) -> Kernel:
    """The two-component Kernel of scatter op %name; raises Unsupported with the reason."""
    from .lowerings import bind
    node = graph[name]
    if node.op not in _RULES:
        raise Unsupported(f"%{name} ({node.op}): no scatter kernel rule")
    t = node.type
    b = bind(node)
    x = b["self"]
    if not isinstance(x, Ref) or t.numel == 0:
        raise Unsupported(f"%{name} ({node.op}): an empty or literal destination")
    accumulate = node.op not in _OVERWRITES and bool(b.get("accumulate", True))
    if accumulate and t.dtype == "b8":
        raise Unsupported(f"%{name} ({node.op}): accumulating into booleans")
    L = Lowerer(graph, [name], kernel_name)
    L.index_dtype = "i64"     # positions are products of data indices and strides
    out = L.output_buffer(name, None, t)

    # component 0: out = x, in parallel like any flat kernel
    L.scope, L.mask = Scope(), "xmask"
    idx = unravel_shape(L, E.Var("x"), t.shape)
    v = L.value(x.name, idx)
    v = L.op("cast", (v,), t.dtype) if L.dtype_of[v] != t.dtype else v
    L.scope.stmts.append(Store(out.name, _offset(idx, out), v, "xmask"))
    copy = Component("flat", L.size(t.numel), E.ONE, (), tuple(L.scope.stmts))

    # component 1: the stores at data-dependent positions, in order (no mask: x < xnumel)
    L.scope, L.mask = Scope(), None
    shape, where = _RULES[node.op](L, node, b)
    numel = 1
    for d in shape:
        numel *= d
    idx = unravel_shape(L, E.Var("x"), shape)
    pos, v = where(idx)
    v = L.cast(v, compute_dtype(t.dtype))
    v = L.op("cast", (v,), t.dtype) if L.dtype_of[v] != t.dtype else v
    L.scope.stmts.append(Store(out.name, _offset(pos, out), v, None, accumulate=accumulate))
    writes = Component("scatter", L.size(numel), E.ONE, (), tuple(L.scope.stmts))

    syms = tuple(sorted(L.syms.values(), key=lambda s: s.name))
    return Kernel(kernel_name, tuple(L.inputs.values()) + (out,), syms, (copy, writes),
                  L.index_dtype, tuple(sorted(L.bindings.items())), checks=tuple(L.checks))


def _offset(idx, buf) -> E.Expr:
    return E.add(*(E.mul(i, s) for i, s in zip(idx, buf.strides)))


def _index_type(L: Lowerer, node, ref):
    if not isinstance(ref, Ref):
        raise Unsupported(f"%{node.name} ({node.op}) with a literal index")
    t = L.graph[ref.name].type
    if t.dtype not in _INDEX_DTYPES:
        raise Unsupported(f"%{node.name} ({node.op}) with an index of dtype {t.dtype} "
                          "(a boolean mask has a data-dependent shape)")
    return t


def _dim(node, d, rank: int) -> int:
    if not isinstance(d, int) or not -max(rank, 1) <= d < max(rank, 1) or rank == 0:
        raise Unsupported(f"%{node.name} ({node.op}) along dim {d!r} of a rank-{rank} tensor")
    return d % rank


def _source(L: Lowerer, node, ref, what: str):
    if not isinstance(ref, Ref):
        raise Unsupported(f"%{node.name} ({node.op}) with a literal {what}")
    return L.graph[ref.name].type


def _index_put(L: Lowerer, node, b):
    """x[indices] = values (+=): the iteration space is x[indices]'s shape (numpy's rules,
    as `index.Tensor`'s rule reads it), values broadcast to it."""
    from .lowerings import advanced_position, broadcast_index, indexed_shape
    src = L.graph[b["self"].name].type.shape
    indices = list(b["indices"])
    for v in indices:
        if v is not None:
            _index_type(L, node, v)
    if not any(v is not None for v in indices) or len(indices) > len(src):
        raise Unsupported(f"%{node.name} ({node.op}) without index tensors")
    shape = indexed_shape(L.graph, src, indices)
    vt = _source(L, node, b["values"], "value")
    if len(vt.shape) > len(shape) or any(
            n not in (1, m) for n, m in zip(vt.shape[::-1], shape[::-1])):
        raise Unsupported(f"%{node.name} ({node.op}): values of shape {list(vt.shape)} do "
                          f"not broadcast to {list(shape)}")
    checked = node.op != "_unsafe_index_put.default"

    def where(idx):
        pos = advanced_position(L, node.op, src, indices, idx, checked)
        return pos, L.value(b["values"].name, broadcast_index(idx, shape, vt.shape))
    return shape, where


def _index_add(L: Lowerer, node, b):
    """out.select(dim, index[i]) += source.select(dim, i): the iteration space is source's."""
    if b.get("alpha", 1) != 1:   # eager adds alpha * source with a fused multiply-add
        raise Unsupported(f"%{node.name} ({node.op}) with alpha {b['alpha']!r}")
    src = L.graph[b["self"].name].type.shape
    d = _dim(node, b["dim"], len(src))
    it = _index_type(L, node, b["index"])
    st = _source(L, node, b["source"], "source")
    if len(st.shape) != len(src) or len(it.shape) != 1 or it.shape[0] != st.shape[d]:
        raise Unsupported(f"%{node.name} ({node.op}): source {list(st.shape)} and index "
                          f"{list(it.shape)} do not match the destination {list(src)}")

    def where(idx):
        k = L.value(b["index"].name, (idx[d],))
        pos = list(idx)
        pos[d] = E.Value(L.checked_index(k, src[d], f"{node.op}: an index along dim {d}"))
        return tuple(pos), L.value(b["source"].name, idx)
    return tuple(st.shape), where


def _scatter(L: Lowerer, node, b):
    """out[.., index[i, j, ..], ..] (+)= src[i, j, ..] (or the scalar value of
    scatter.value) along dim: the iteration space is index's; scatter.src/value keep, at a
    position written twice, the last value in row-major order of index (eager leaves it
    unspecified), scatter_add adds."""
    src = L.graph[b["self"].name].type.shape
    d = _dim(node, b["dim"], len(src))
    it = _index_type(L, node, b["index"])
    st = _source(L, node, b["src"], "source").shape if node.op != "scatter.value" else None
    if len(it.shape) != len(src) or st is not None and (len(st) != len(src) or any(
            i > s for i, s in zip(it.shape, st))) or any(
            i > s for k, (i, s) in enumerate(zip(it.shape, src)) if k != d):
        raise Unsupported(f"%{node.name} ({node.op}): index {list(it.shape)} does not fit "
                          f"source {list(st) if st is not None else None} and destination "
                          f"{list(src)}")
    if st is None and not isinstance(b["value"], (int, float, bool)):
        raise Unsupported(f"%{node.name} ({node.op}) with a value {b['value']!r}")
    dtype = L.graph[node.name].type.dtype

    def where(idx):
        k = L.value(b["index"].name, idx)
        pos = list(idx)
        pos[d] = E.Value(L.checked_index(k, src[d], f"{node.op}: an index along dim {d}"))
        v = L.value(b["src"].name, idx) if st is not None else L.const(b["value"], dtype)
        return tuple(pos), v
    return tuple(it.shape), where


_RULES = {"index_put.default": _index_put, "_unsafe_index_put.default": _index_put,
          "index_add.default": _index_add, "scatter_add.default": _scatter,
          "scatter.src": _scatter, "scatter.value": _scatter}
