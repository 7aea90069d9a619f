"""Outputs of a flat component that are layout copies of one value: computed once.

A flat component iterates x over [0, xnumel) and stores each output at x in its own
row-major order, computing the value there (`lower._lower_flat`). When two outputs hold
the same values in two orders (a value and `clone(permute(value))`: the NHWC copy a
channels-last convolution reads, a transposed copy for a GEMM), each store asks for the
value at its own index, the two indices differ, and the whole chain behind the value is
computed twice, once with reads across the grain of the input's memory.

Here such outputs form a class around their root (the value the layout ops start from,
computed in the group): the loop runs in the order of one of them, the leader, the root's
index follows from the leader's through the layout ops (their index maps, the same ones
a read through them takes), the chain is computed once at that index and every output of
the class is stored from that one value, at the position the layout ops map the root's
index to (a store across the grain where the orders differ).

Which output leads decides which accesses run along memory: the lowering tries each
(a class has two or three outputs), and keeps the one whose loads touch the fewest cache
lines, then whose stores do (`access_cost`: per access, the lines a window of
consecutive x touches, at the strides the inputs are expected to have).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.graph import ITEMSIZE, Ref, TensorType
from ..ir.symbolic import hint
from . import expr as E
from .kernel import Load, Store

# ops that only move elements (a bijection between the source's and the result's indices)
LAYOUT_OPS = frozenset({
    "view.default", "_unsafe_view.default", "reshape.default", "permute.default",
    "transpose.int", "t.default", "numpy_T.default", "unsqueeze.default", "squeeze.dim",
    "squeeze.dims", "squeeze.default", "clone.default", "alias.default", "detach.default"})

_LINE = 64          # bytes of a cache line
_WINDOW = 64        # consecutive x of a window (a vector loop's stretch: 4 lines of f32)
_SAMPLES = 8        # windows, spread over the range


@dataclass(frozen=True)
class CopyClass:
    """Outputs holding `root`'s values in other orders (`root` itself may be one)."""
    root: str
    members: tuple[str, ...]      # output names in the component's store order


def layout_root(L, name: str) -> tuple[str, tuple]:
    """The value `name` copies through layout ops computed in the group, and those ops
    (from `name` back towards the root); (name, ()) when it is not such a copy."""
    chain = []
    node = L.graph[name]
    while node.op in LAYOUT_OPS and isinstance(node.type, TensorType) and node.args \
            and isinstance(node.args[0], Ref) and node.args[0].name in L.members:
        src = L.graph[node.args[0].name]
        if not isinstance(src.type, TensorType) or src.type.dtype != node.type.dtype:
            break
        chain.append(node)
        node = src
    return node.name, tuple(chain)


def copy_classes(L, parts, numel) -> list[CopyClass]:
    """The classes of the outputs `parts` ((name, element, type), in store order) of a
    flat component of `numel` elements that share a computed root: two or more each."""
    by_root: dict[str, list[str]] = {}
    for name, element, t in parts:
        if element is not None or t.numel != numel or t.numel == 0:
            continue
        root, _ = layout_root(L, name)
        rt = L.graph[root].type
        if root in L.members and isinstance(rt, TensorType) and rt.numel == numel:
            by_root.setdefault(root, []).append(name)
    return [CopyClass(r, tuple(m)) for r, m in by_root.items() if len(m) > 1]


def root_index(L, name: str, idx) -> tuple:
    """The root's index of element `idx` of `name` (through its layout ops' index maps,
    as a read through them computes it)."""
    from .lowerings import index_map
    _, chain = layout_root(L, name)
    for node in chain:
        mapped = index_map(L, node, idx, None)
        if mapped is not None:          # (clone, alias, detach: the same index)
            idx = mapped[2]
    return idx


def copy_index(L, name: str, idx) -> tuple:
    """The index in `name` of the root's element `idx` (the layout ops run forwards)."""
    from .lowerings import norm_dim, view_index
    _, chain = layout_root(L, name)
    for node in reversed(chain):
        op, a = node.op, node.args
        out_shape = node.type.shape
        src_shape = L.graph[a[0].name].type.shape
        if op in ("view.default", "_unsafe_view.default", "reshape.default", "squeeze.dim",
                  "squeeze.dims", "squeeze.default"):
            idx = view_index(L, idx, src_shape, out_shape)
        elif op == "permute.default":
            idx = tuple(idx[norm_dim(d, len(out_shape))] for d in a[1])
        elif op == "transpose.int":
            if out_shape:
                d0, d1 = norm_dim(a[1], len(out_shape)), norm_dim(a[2], len(out_shape))
                idx = list(idx)
                idx[d0], idx[d1] = idx[d1], idx[d0]
                idx = tuple(idx)
        elif op in ("t.default", "numpy_T.default"):
            idx = tuple(reversed(idx))
        elif op == "unsqueeze.default":
            d = norm_dim(a[1], len(out_shape))
            idx = tuple(idx[:d]) + (E.ZERO,) + tuple(idx[d:])
        # clone, alias, detach: the same index
    return idx


def access_cost(L, comp, numel: int) -> tuple[float, float]:
    """(loads, stores): bytes of cache lines per element that the loads and the stores of
    flat component `comp` touch, each access counted as the distinct lines it touches in
    windows of consecutive x (a vector loop's stretch), at a few points of [0, numel):
    a step along memory or a broadcast costs about its bytes, a step across it a line per
    element, or per few elements where neighbouring x read neighbouring positions of a
    few rows. Inputs at the strides expected at launch (row-major unless a view's), sizes
    at their values; an index read from data costs a line.

    Loads come first (`min` of the pairs): a read across memory stalls the loop where a
    store is buffered. Measured (one thread, f32 [4, C, 64, 64], a SiLU stored NCHW and
    NHWC): over an NCHW input, iterating NHWC costs 4.5x (C = 8) and 7x (C = 64) the NCHW
    order; over an NHWC input (mobilevit's), the NHWC order wins."""
    import torch
    env = _expected_strides(L)
    env.update({s.name: _int(s.value) for s in L.syms.values() if s.name not in env})
    itemsize = {b.name: ITEMSIZE[b.dtype] for b in (*L.inputs.values(), *L.outputs)}
    width = min(_WINDOW, numel)
    if width < 1:
        return 0.0, 0.0
    starts = sorted({min(numel * k // _SAMPLES, numel - width) for k in range(_SAMPLES)})
    xs = torch.cat([torch.arange(s0, s0 + width, dtype=torch.int64) for s0 in starts])
    window_of = torch.arange(len(starts), dtype=torch.int64).repeat_interleave(width)
    cost = {Load: 0.0, Store: 0.0}
    for st in comp.body:
        if not isinstance(st, (Load, Store)):
            continue
        size = itemsize[st.buffer]
        if E.free_vars(st.index) - {"x"} or _reads_data(st.index):
            cost[type(st)] += _LINE
            continue
        offsets = _values(st.index, env, xs)
        if not isinstance(offsets, torch.Tensor):      # the same element for every x
            continue
        # distinct (window, line) pairs
        line = torch.div(offsets * size, _LINE, rounding_mode="floor")
        line = line - line.min()
        lines = torch.unique(line + window_of * (int(line.max()) + 1)).numel()
        cost[type(st)] += round(lines * _LINE / (len(starts) * width), 1)
    return cost[Load], cost[Store]


def _values(e: E.Expr, env: dict, xs):
    """`e` at every x of `xs` (a tensor), or an int where it does not depend on x."""
    import torch
    if isinstance(e, E.Const):
        return e.value
    if isinstance(e, E.Sym):
        return env[e.name]
    if isinstance(e, E.Var):
        return xs
    if isinstance(e, E.Digit):
        return _values(e.expand(), env, xs)
    if isinstance(e, (E.Add, E.Mul)):
        parts = [_values(t, env, xs) for t in (e.terms if isinstance(e, E.Add) else e.factors)]
        total = parts[0]
        for p in parts[1:]:
            total = total + p if isinstance(e, E.Add) else total * p
        return total
    a, b = _values(e.a, env, xs), _values(e.b, env, xs)
    if isinstance(e, E.FloorDiv):
        return torch.div(a, b, rounding_mode="floor") if isinstance(a, torch.Tensor) else a // b
    return torch.remainder(a, b) if isinstance(a, torch.Tensor) else a % b


def _reads_data(e: E.Expr) -> bool:
    return isinstance(e, E.Value) or any(_reads_data(c) for c in E.children(e))


def _int(v) -> int:
    return int(hint(v))         # a symbolic size at its hint (records no guard)


def _expected_strides(L) -> dict[str, int]:
    out = {}
    for buf in L.inputs.values():
        shape = [_int(d) for d in buf.shape]
        expected = buf.expected or tuple(
            math.prod(shape[d + 1:]) for d in range(len(shape)))
        for d, s in enumerate(buf.strides):
            if isinstance(s, E.Sym):
                out[s.name] = _int(expected[d])
    return out
