"""The IR verifier: structural and type invariants every pass may rely on.

`verify(g)` checks that the graph is topologically ordered (every use refers to
an earlier node, which also rules out cycles), that ops resolve, that the
structural ops (parameter, constant, getitem) are well formed and, with
`check_types`, that each node's stored type is what the op's shape rule gives.
`verify_groups(g, groups)` checks that a fusion plan places every computing
node exactly once.
"""
from __future__ import annotations

from typing import Iterable

from .graph import (CONSTANT, GETITEM, PARAMETER, Graph, Node, Ref, TensorLiteral, TensorType,
                    TupleType)
from .ops import Category, infer_type, lookup

__all__ = ["VerifyError", "verify", "verify_groups"]


class VerifyError(ValueError):
    """A broken IR invariant; the message names the graph, the node and what was expected."""


def _fail(g: Graph, n: Node | None, msg: str) -> VerifyError:
    where = f"graph {g.name}" + ("" if n is None else f": node %{n.name} ({n.op})")
    return VerifyError(f"{where}: {msg}")


def verify(g: Graph, *, check_types: bool = True) -> None:
    """Raise VerifyError on the first broken invariant of `g`."""
    types: dict = {}  # nodes defined so far (earlier in g.nodes) -> type
    for n in g.nodes:
        try:
            opdef = lookup(n.op)
        except KeyError as e:
            raise _fail(g, n, f"unknown op: {e.args[0] if e.args else e}") from None
        for name in n.inputs:
            if name == n.name:
                raise _fail(g, n, "uses itself; expected only uses of earlier nodes")
            if name not in types:
                if name in g:
                    raise _fail(g, n, f"uses %{name} before its definition; expected "
                                      "topological order (every use after its definition)")
                raise _fail(g, n, f"uses %{name}, which is not a node of the graph")
        if n.op == PARAMETER:
            # a graph input's strides where they are not row-major (frontend/fx_to_ir:
            # what its kernels expect at launch, codegen/view_strides.py)
            strides = n.kwarg("strides")
            if n.args or any(k != "strides" for k, _ in n.kwargs) or (
                    strides is not None and not (
                        isinstance(n.type, TensorType) and isinstance(strides, tuple)
                        and len(strides) == len(n.type.shape)
                        and all(type(s) is int and s >= 0 for s in strides))):
                raise _fail(g, n, "expected a parameter to have no arguments (but its "
                                  "strides: one int >= 0 per dim)")
        elif n.op == CONSTANT:
            _check_constant(g, n)
        elif n.op == GETITEM:
            _check_getitem(g, n, types, check_types)
        elif check_types and not opdef.random:
            try:
                t = infer_type(n.op, n.args, n.kwargs, types)
            except Exception as e:
                # Missing meta kernels are expected for ops torch runs for us.
                if not (opdef.fallback or opdef.category == Category.LIBRARY):
                    raise _fail(g, n, f"type rule failed: {e}") from e
            else:
                if t != n.type:
                    raise _fail(g, n, f"has type {n.type}; expected {t} from the op's "
                                      "shape rule")
        types[n.name] = n.type
    for o in g.outputs:
        if isinstance(o, Ref):
            if o.name not in types:
                raise _fail(g, None, f"output %{o.name} is not a node of the graph")
        elif not (o is None or type(o) in (int, float)):
            raise _fail(g, None, f"output {o!r}: expected a ref, None, an int or a float")


def _check_constant(g: Graph, n: Node) -> None:
    if n.args:
        raise _fail(g, n, "expected a constant to have no positional arguments")
    lit = n.kwarg("value")
    if not isinstance(lit, TensorLiteral):
        raise _fail(g, n, f"expected a TensorLiteral 'value' kwarg, got {lit!r}")
    if lit.type != n.type:
        raise _fail(g, n, f"has type {n.type}; expected {lit.type}, the type of its value")


def _check_getitem(g: Graph, n: Node, types: dict, check_types: bool) -> None:
    if n.kwargs or len(n.args) != 2 or not isinstance(n.args[0], Ref) \
            or type(n.args[1]) is not int:
        raise _fail(g, n, "expected getitem(%tuple, index) with an int index")
    src, idx = n.args
    st = types[src.name]
    if not isinstance(st, TupleType):
        raise _fail(g, n, f"indexes %{src.name} of type {st}; expected a tuple type")
    if not 0 <= idx < len(st.elements):
        raise _fail(g, n, f"index {idx} out of range; expected 0 <= index < "
                          f"{len(st.elements)} for %{src.name} of type {st}")
    elem = st.elements[idx]
    if elem is None:
        raise _fail(g, n, f"element {idx} of %{src.name} ({st}) is None; expected a tensor")
    if check_types and elem != n.type:
        raise _fail(g, n, f"has type {n.type}; expected {elem}, element {idx} of %{src.name}")


def verify_groups(g: Graph, groups: Iterable[Iterable[str]]) -> None:
    """Check that every node other than parameters and constants is in exactly one group.

    Parameters and constants may appear in any number of groups (a plan may
    inline constants); names that are not nodes of `g` are errors.
    """
    placed: dict[str, int] = {}
    for gi, group in enumerate(groups):
        for name in group:
            if name not in g:
                raise _fail(g, None, f"group {gi} names %{name}, which is not a node of "
                                     "the graph")
            n = g[name]
            if n.op in (PARAMETER, CONSTANT):
                continue
            if name in placed:
                raise _fail(g, n, f"is in group {placed[name]} and group {gi}; expected "
                                  "exactly one group")
            placed[name] = gi
    for n in g.nodes:
        if n.op not in (PARAMETER, CONSTANT) and n.name not in placed:
            raise _fail(g, n, "is in no group; expected exactly one group")
