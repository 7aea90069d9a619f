"""A tiny graph builder for tests and examples.

    b = GraphBuilder("f")
    x = b.param((4, 8), "f32")
    y = b.op("relu.default", x)
    g = b.build(y)

Types come from the op table's shape rule, so a builder graph is well typed
by construction.
"""
from __future__ import annotations

from typing import Any

import torch

from ..ir.graph import (CONSTANT, GETITEM, PARAMETER, Graph, Node, Ref, TensorLiteral,
                        TensorType, dtype_name)
from ..ir.ops import infer_type


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, torch.Tensor):
        return TensorLiteral(value)
    return value


class GraphBuilder:
    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: list[Node] = []
        self.types: dict[str, Any] = {}
        self._counter = 0

    def _fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}{self._counter}"

    def _add(self, node: Node) -> Ref:
        self.nodes.append(node)
        self.types[node.name] = node.type
        return Ref(node.name)

    def param(self, shape, dtype: str | torch.dtype = "f32", name: str | None = None) -> Ref:
        if isinstance(dtype, torch.dtype):
            dtype = dtype_name(dtype)
        t = TensorType(tuple(shape), dtype)
        return self._add(Node(name or self._fresh("arg"), PARAMETER, type=t))

    def constant(self, value: torch.Tensor, name: str | None = None) -> Ref:
        lit = TensorLiteral(value.detach().clone())
        return self._add(Node(name or self._fresh("c"), CONSTANT, kwargs=(("value", lit),),
                              type=lit.type))

    def op(self, op: str, *args, name: str | None = None, **kwargs) -> Ref:
        a = _freeze(args)
        kw = tuple(sorted((k, _freeze(v)) for k, v in kwargs.items()))
        t = infer_type(op, a, kw, self.types)
        return self._add(Node(name or self._fresh("v"), op, a, kw, t))

    def getitem(self, tup: Ref, index: int, name: str | None = None) -> Ref:
        return self.op(GETITEM, tup, index, name=name)

    def build(self, *outputs) -> Graph:
        return Graph(tuple(self.nodes), tuple(outputs), self.name)
