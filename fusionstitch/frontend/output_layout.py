"""Graph outputs in eager's memory layout.

Our kernels write their outputs row-major (contiguous). Eager's ops keep a dense input's
layout instead: an elementwise op of a channels-last or a transposed tensor returns a
tensor of that layout, and Inductor returns every output with the strides eager gives.
A caller may depend on them: `y.permute(0, 2, 3, 1).view(n, -1)` of a channels-last
`y` works in eager and raises on a contiguous one; `is_contiguous()`, a C extension
reading the data pointer, `y.view(...)` after a transpose all see the layout.

So each output the caller sees (`expected_orders`: not a mutated input's new value,
not one only the backward reads, nothing of a backward graph) whose traced value
(`meta["val"]`, eager's strides as AOTAutograd traced them) is dense and
non-overlapping in another order than row-major comes back in that layout: where the
program made it otherwise, it is copied into a tensor of eager's strides (`restride`:
a copy of that output's size, only for such outputs; graphs without them pay nothing).
An output on an input's storage (an alias AOTAutograd rebuilds from the input) is left
as it is, and one tensor returned at several positions is copied once.

What is kept is the order of the dims in memory (outermost first), read at the traced
sizes (a graph of symbolic sizes: at their hints, without a guard); each call's strides
follow from its sizes in that order, so one symbolic program serves every size.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch


def expected_orders(gm: torch.fx.GraphModule, skip: set[int] | frozenset[int]
                    ) -> dict[int, tuple[int, ...]]:
    """Output position -> the order of its dims in eager's memory (outermost first), for
    the outputs of `gm` (not in `skip`) whose traced value is a dense, non-overlapping
    tensor laid out in another order than row-major."""
    return {i: order for i, order in enumerate(user_orders(gm))
            if order is not None and i not in skip}


def output_nodes(gm: torch.fx.GraphModule) -> tuple:
    """The values `gm` returns, one per output position (a graph made by hand, make_fx,
    may return one node rather than a tuple)."""
    out = gm.graph.output_node().args[0]
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def user_orders(gm: torch.fx.GraphModule) -> list[tuple[int, ...] | None]:
    """Per output of `gm`: the order of its dims in memory where its traced value is
    dense and not row-major (or is a view through a permutation: `_permuted_view`), else
    None. Of Dynamo's graph (`example_value`: torch's own
    ops on fake tensors, whose strides are eager's) this is the caller's view; of
    AOTAutograd's (`val`), decompositions may have changed a layout (`xlogy` of a
    transposed and a row-major tensor: eager follows the first, its decomposition not)."""
    nodes = output_nodes(gm)
    found: list[tuple[int, ...] | None] = []
    for node in nodes:
        found.append(None)
        if not isinstance(node, torch.fx.Node) or node.op == "placeholder":
            continue
        val = node.meta.get("example_value", node.meta.get("val"))
        if not isinstance(val, torch.Tensor) or val.layout != torch.strided:
            continue
        shape, stride = _hints(val.shape), _hints(val.stride())
        if shape is None or stride is None or not _dense(shape, stride):
            continue
        # outermost first: larger strides first; a size-1 dim's place does not matter
        order = tuple(sorted(range(len(shape)), key=lambda d: (-stride[d], d)))
        if not same_layout(shape, _strides(shape, order), row_major(shape)) or \
                _permuted_view(node):
            found[-1] = order
    return found


# view ops (Dynamo's method and function names, aten's packets) that a permuted view
# may pass through on its way to an output, and those that permute
_VIEWS = frozenset({"view", "reshape", "unsqueeze", "squeeze", "expand", "expand_as",
                    "view_as", "select", "narrow", "__getitem__", "flatten", "unflatten",
                    "alias", "slice", "_unsafe_view"})
_PERMUTES = frozenset({"permute", "transpose", "t", "swapaxes", "swapdims", "movedim",
                       "mT", "mH", "T", "H", "adjoint"})


def _op_name(node: torch.fx.Node) -> str:
    t = node.target
    if isinstance(t, str):
        return t
    name = getattr(t, "__name__", "") or str(t)
    return name.split(".")[0]           # aten's `permute.default`: its packet


def _permuted_view(node: torch.fx.Node) -> bool:
    """Whether output `node` is a view through a permutation of a value the program
    computes (`v1.permute(3, 1, 0, 2)` of an intermediate): eager's layout of it follows
    from the value's, which is eager's, and ours from ours, row-major. Such an output
    is expected in eager's layout even where that is row-major (restride copies it only
    where ours differs)."""
    while isinstance(node, torch.fx.Node) and node.op in ("call_method", "call_function"):
        name = _op_name(node)
        if name in _PERMUTES:
            return True
        if name not in _VIEWS or not node.args:
            return False
        node = node.args[0]
    return False


def library_results(gm: torch.fx.GraphModule, positions, expected: dict,
                    is_library: Callable[[Any], bool]) -> dict[int, tuple[int, ...]]:
    """`expected` with a row-major order added for each output of AOTAutograd's graph
    `gm` at `positions` (those the caller sees) that it does not list, whose traced value
    is dense and row-major, and that an op torch runs for us computes (`is_library` of
    its target; through views and tuple elements): torch lays such a result out after
    its inputs, and our passes may have given those another layout than eager's (a
    convolution or pooling run channels-last, passes/conv_layout.py, returns a
    channels-last result where eager's NCHW input gives NCHW). `restride` then copies it
    only where its strides are not eager's. Our kernels' results are row-major unless
    spelled otherwise (passes/output_layouts.py), and are not listed: nothing to check."""
    nodes = output_nodes(gm)
    added = dict(expected)
    for i in positions:
        node = nodes[i] if 0 <= i < len(nodes) else None
        if i in expected or not isinstance(node, torch.fx.Node):
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.layout != torch.strided or val.dim() < 2:
            continue
        shape, stride = _hints(val.shape), _hints(val.stride())
        if shape is None or stride is None or not same_layout(shape, stride, row_major(shape)):
            continue
        while node.op == "call_function" and node.args and \
                isinstance(node.args[0], torch.fx.Node) and \
                (node.target is operator.getitem or _is_view(node.target)):
            node = node.args[0]
        if node.op == "call_function" and is_library(node.target):
            added[i] = tuple(range(val.dim()))
    return added


def _is_view(target) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and any(
        a.alias_info is not None and not a.alias_info.is_write for a in schema.returns)


def placed(user: list, first: int) -> dict[int, tuple[int, ...]]:
    """`user_orders` of Dynamo's graph at the positions its outputs take in AOTAutograd's
    graph (the user outputs follow the `first` mutated inputs' new values)."""
    return {first + i: order for i, order in enumerate(user) if order is not None}


def restride(outs: list, expected: dict[int, tuple[int, ...]], inputs: list) -> list:
    """`outs` with each output of `expected` (position -> dim order) in eager's layout
    (copied where it is not), unless it lies on an input's storage. Outputs on the memory
    of one that was copied (`v1 = v0.t()` with both returned) view the copy where that
    gives the same elements (`_moved_view`), as eager's views view eager's value: with
    eager's strides and aliases; biggest first, so views follow their base."""
    copies: dict[int, torch.Tensor] = {}
    moved: list[tuple[torch.Tensor, torch.Tensor]] = []      # (output, its copy)
    storages = None
    for i in sorted(expected, key=lambda i: -_numel(outs[i])):
        order, t = expected[i], outs[i]
        if not isinstance(t, torch.Tensor) or t.dim() != len(order):
            continue
        shape = tuple(t.shape)
        stride = _strides(shape, order)
        if same_layout(shape, t.stride(), stride):
            continue
        if id(t) in copies:
            outs[i] = copies[id(t)]
            continue
        if storages is None:
            storages = {a.untyped_storage().data_ptr() for a in inputs
                        if isinstance(a, torch.Tensor)}
        if t.untyped_storage().data_ptr() in storages:
            continue
        view = _view_of_moved(t, moved)
        if view is not None and same_layout(shape, view.stride(), stride):
            copies[id(t)] = outs[i] = view
            continue
        copy = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device)
        copy.copy_(t)
        copies[id(t)] = outs[i] = copy
        moved.append((t, copy))
    if moved:
        done = set(map(id, copies.values()))
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor) and id(o) not in done and i not in expected:
                view = _view_of_moved(o, moved)
                if view is not None:
                    outs[i] = view
    return outs


def _numel(t) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


def _view_of_moved(o: torch.Tensor, moved: list) -> torch.Tensor | None:
    """`o` as a view of the copy of an output on its storage (`moved`: (output, copy)
    pairs, biggest first), or None."""
    ptr = o.untyped_storage().data_ptr()
    for t, copy in moved:
        if t.untyped_storage().data_ptr() == ptr:
            view = _moved_view(o, t, copy)
            if view is not None:
                return view
    return None


def _moved_view(o: torch.Tensor, t: torch.Tensor, copy: torch.Tensor) -> torch.Tensor | None:
    """View `o` of dense tensor `t`'s memory as the same elements of `copy` (t's values in
    another layout): o's offset and each of its strides read as steps over t's dims
    (unique, t being dense), which must stay within t's sizes (no carry from one dim into
    the next, nothing before t's first element); None where they do not, or where o
    reinterprets the bytes."""
    if o.dtype != t.dtype or o.device != t.device or not _dense(tuple(t.shape), t.stride()):
        return None
    order = sorted((s, k) for k, (s, n) in enumerate(zip(t.stride(), t.shape)) if n > 1)

    def steps(offset: int) -> list[int] | None:
        c = [0] * t.dim()
        for s, k in reversed(order):
            c[k], offset = divmod(offset, s)
        return c if offset == 0 and min(c, default=0) >= 0 else None
    start = steps(o.storage_offset() - t.storage_offset())
    if start is None:
        return None
    reach, strides = list(start), []
    for size, stride in zip(o.shape, o.stride()):
        c = steps(stride) if size > 1 else [0] * t.dim()
        if c is None:
            return None
        for k in range(t.dim()):
            reach[k] += c[k] * (size - 1)
        strides.append(sum(ck * sk for ck, sk in zip(c, copy.stride())))
    if any(r >= n for r, n in zip(reach, t.shape)):
        return None
    offset = copy.storage_offset() + sum(ck * sk for ck, sk in zip(start, copy.stride()))
    return copy.as_strided(o.shape, strides, offset)


def wrap(run: Callable[[list], list], expected: dict[int, tuple[int, ...]]) -> Callable:
    """`run` (a Specialisation's call: argument list -> outputs) returning its outputs in
    eager's layout (`restride`); `run` itself when nothing is expected."""
    if not expected:
        return run

    def run_in_eager_layout(args: list) -> list:
        return restride(list(run(args)), expected, args)
    return run_in_eager_layout


def _hints(values) -> tuple[int, ...] | None:
    """Sizes or strides as ints: a symbolic one at its hint (no guard), None where one
    has none (a size only known at run time)."""
    out = []
    for v in values:
        if type(v) is not int:
            v = getattr(getattr(v, "node", None), "hint", None)
            if type(v) is not int:
                return None
        out.append(v)
    return tuple(out)


def _strides(shape: tuple[int, ...], order: tuple[int, ...]) -> tuple[int, ...]:
    """The dense strides of `shape` with its dims in memory in `order` (outermost first)."""
    strides, n = [0] * len(shape), 1
    for d in reversed(order):
        strides[d] = n
        n *= max(shape[d], 1)
    return tuple(strides)


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= max(d, 1)
    return tuple(reversed(strides))


def _dense(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether a tensor of `shape` and `stride` covers its memory once, without gaps."""
    dims = sorted((s, d) for s, d in zip(stride, shape) if d != 1)
    n = 1
    for s, d in dims:
        if s != n:
            return False
        n *= d
    return True


def same_layout(shape: tuple[int, ...], a, b) -> bool:
    """The same memory layout: strides equal on every dim longer than 1."""
    return all(x == y for x, y, d in zip(a, b, shape) if d > 1)
