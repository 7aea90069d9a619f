"""The strides a kernel input is expected to have at launch.

    expected_strides(graph, name, element=None)
        strides of value `name` (of its tuple element `element`), when they are known
        statically and are not row-major; None when row-major or not known

Values between groups come with the layout whoever wrote them gave them:

* our kernels (elementwise, reductions, data movement, ...) and torch's GEMMs write
  row-major;
* a graph input has the strides the frontend recorded for it (a `strides` keyword of
  its parameter node: a slice of a larger tensor, a channels-last image), else it is
  taken as row-major;
* a view between groups runs through torch at launch (the plan's free groups), so a
  kernel reading `permute(x)` gets x's memory with the permutation's strides;
* a library call's result (a convolution, flash attention's backward, a fallback op)
  has the layout torch gives it: flash attention's gradients are laid out
  (batch, seq, heads, dim) under their (batch, heads, seq, dim) shape, a convolution of
  channels-last input is channels-last.

The strides are worked out by running the chain on fake CPU tensors: row-major for what
we write, the library op itself on fake tensors of its inputs' expected layouts (fake
tensors give eager's strides, as AOTAutograd's tracing relies on; the meta device's
kernels do not always: a convolution of channels-last input is contiguous there). The
roots we do not know (data movement, sources) are not followed. The strides are an
expectation only: the cpu target prints its dense version for them
(`targets/cpp/index.expected_values`) and checks them at launch; other strides take the
general version, never wrong numbers.
"""
from __future__ import annotations

import threading
import weakref

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..ir.graph import GETITEM, PARAMETER, Graph, Ref, TensorType
from ..ir.ops import Category, call_reference, lookup
from ..ir.symbolic import hint

# the roots taken as row-major: what our kernels and GEMMs write
_ROW_MAJOR = frozenset({Category.ELEMENTWISE, Category.REDUCE, Category.DOT})

# how many library calls deep a layout is followed back (their inputs' layouts decide
# theirs: a convolution of a convolution's channels-last result); past it, row-major
_DEPTH = 4


def expected_strides(graph: Graph, name: str, element: int | None = None
                     ) -> tuple[int, ...] | None:
    cache = _cache_of(graph)
    key = (name, element)
    if key not in cache.results:
        cache.results[key] = _expected(cache, name, element)
    return cache.results[key]


class _Cache:
    """The answers for one graph, and the fake tensors they were worked out from (in
    the one fake mode they belong to): planning lowers every candidate group of a graph
    and asks for the same inputs again and again (mobilenet_v2_train: 3309 questions,
    1.7 s of a 15 s compile when each was worked out anew)."""

    def __init__(self, graph: Graph):
        self.graph = weakref.ref(graph)
        self.mode = FakeTensorMode()
        self.memo: dict = {}        # (name, depth left) -> fake tensor, tuple or None
        self.results: dict = {}     # (name, element) -> strides or None


_last = threading.local()           # the graph asked about last, per thread


def _cache_of(graph: Graph) -> _Cache:
    cache = getattr(_last, "cache", None)
    if cache is None or cache.graph() is not graph:
        cache = _last.cache = _Cache(graph)
    return cache


def _expected(cache: _Cache, name: str, element: int | None) -> tuple[int, ...] | None:
    try:
        with cache.mode:
            out = _meta(cache.graph(), name, cache.memo, _DEPTH)
    except Exception:       # a symbolic argument, an op without a meta kernel: not known
        return None
    if element is not None:
        out = out[element] if isinstance(out, (tuple, list)) and element < len(out) else None
    if not isinstance(out, torch.Tensor) or out.is_contiguous():
        return None
    return tuple(int(s) for s in out.stride())


def _static(t) -> bool:
    if isinstance(t, TensorType):
        return all(type(d) is int for d in t.shape)
    return all(e is None or _static(e) for e in getattr(t, "elements", ()))


def _row_major(t) -> torch.Tensor | None:
    if not isinstance(t, TensorType) or not _static(t):
        return None
    return torch.empty(t.shape, dtype=t.torch_dtype)


def _meta(graph: Graph, name: str, memo: dict, depth: int):
    """A fake tensor (or tuple) of `name` with the layout expected at launch; None where
    it is not known. `memo` is keyed by the depth left too: an answer cut short by the
    depth is not the answer to a question asked from closer."""
    if (name, depth) in memo:
        return memo[name, depth]
    node = graph[name]
    d = lookup(node.op)
    first = node.args[0] if node.args else None
    strides = node.kwarg("strides") if node.op == PARAMETER else None
    if strides is not None:
        # sizes at their hints in a symbolic graph (the strides are numbers: recorded
        # only then); nothing is computed from them, so no guard is needed
        t = node.type
        out = torch.empty_strided(hint(t.shape), strides, dtype=t.torch_dtype)
    elif not _static(node.type):
        out = None      # a view of symbolic sizes would need guards: not followed
    elif (d.view or node.op == GETITEM) and isinstance(first, Ref):
        base = _meta(graph, first.name, memo, depth)
        out = None if base is None else call_reference(node.op, node.args, node.kwargs,
                                                       {first.name: base})
    elif d.category == Category.LIBRARY and depth > 0:
        env = {}
        for r in _refs(node):
            v = _meta(graph, r, memo, depth - 1)
            if v is None:
                memo[name, depth] = None
                return None
            env[r] = v
        out = call_reference(node.op, node.args, node.kwargs, env)
    elif node.op == PARAMETER or d.category in _ROW_MAJOR:
        out = _row_major(node.type)
    else:
        out = None      # data movement, sources: as before, not followed
    memo[name, depth] = out
    return out


def _refs(node) -> list[str]:
    out = []

    def walk(a):
        if isinstance(a, Ref):
            out.append(a.name)
        elif isinstance(a, (tuple, list)):
            for x in a:
                walk(x)
    walk(node.args)
    walk(tuple(v for _, v in node.kwargs))
    return list(dict.fromkeys(out))
