"""Typed, immutable IR: graphs, the op table, text form and verifier."""
from .graph import (CONSTANT, DTYPES, GETITEM, PARAMETER, Graph, Node, Ref, TensorLiteral,
                    TensorType, TupleType, dtype_name)
from .ops import OP_TABLE, Category, OpDef, category, infer_type, lookup

__all__ = ["CONSTANT", "DTYPES", "GETITEM", "PARAMETER", "Graph", "Node", "Ref",
           "TensorLiteral", "TensorType", "TupleType", "dtype_name", "OP_TABLE", "Category",
           "OpDef", "category", "infer_type", "lookup"]
