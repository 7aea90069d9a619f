"""The strides a kernel input is expected to have at launch.

    expected_strides(graph, name)   strides of value `name`, when it is a view (through
                                    a chain of view ops) of a value taken as row-major;
                                    None when row-major itself or not known statically

A view between groups runs through torch at launch (the plan's free groups), so a
kernel reading `permute(x)` gets x's memory with the permutation's strides: the strides
torch's own view gives, computed here by running the chain on a meta tensor of the
root's shape. The root is taken as contiguous where it is known to be so in the common
case: a graph input (as lowering takes every input), a result of ops our kernels or a
GEMM write row-major (elementwise, reductions, mm). A library call's result has the
layout torch gives it (a convolution's of channels-last input is channels-last): no
expectation there. The strides are an expectation only: the
cpu target prints its dense version for them (`targets/cpp/index.expected_values`) and
checks them at launch; other strides take the general version, never wrong numbers.
"""
from __future__ import annotations

import torch

from ..ir.graph import PARAMETER, Graph, Ref, TensorType
from ..ir.ops import Category, call_reference, lookup

# the roots whose results are taken as row-major
_ROW_MAJOR = frozenset({Category.ELEMENTWISE, Category.REDUCE, Category.DOT})


def expected_strides(graph: Graph, name: str) -> tuple[int, ...] | None:
    chain = []
    node = graph[name]
    while lookup(node.op).view and node.args and isinstance(node.args[0], Ref):
        chain.append(node)
        node = graph[node.args[0].name]
    root = node.type
    if not chain or not isinstance(root, TensorType) or \
            any(type(d) is not int for d in root.shape) or \
            (node.op != PARAMETER and lookup(node.op).category not in _ROW_MAJOR):
        return None
    env = {node.name: torch.empty(root.shape, dtype=root.torch_dtype, device="meta")}
    try:
        for n in reversed(chain):
            env[n.name] = call_reference(n.op, n.args, n.kwargs, env)
    except Exception:       # a symbolic argument, a tuple of views (split): not known here
        return None
    out = env[name]
    if not isinstance(out, torch.Tensor) or out.is_contiguous():
        return None
    return tuple(int(s) for s in out.stride())
