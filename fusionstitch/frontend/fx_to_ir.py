"""FX (aten-level, from AOTAutograd) to IR, for concrete or symbolic input sizes.

The caller gives every placeholder's value: a TensorType for tensors, a number
for SymInt inputs. Size arithmetic in the graph (`sym_size`, `operator.mul`,
...) is evaluated here.

Concrete (`hints=None`): node types come from FX's `val` metadata when it is
static, else from the op table's shape rule (meta tensors); the result is a
static IR graph for exactly those sizes.

Symbolic (`hints`: each size symbol's value at this call, frontend/dynamic.py):
the placeholders' sizes are `ir.symbolic.Dim`s, and every node's type and every
size computed in the graph takes its expression from FX's `val` metadata (the
SymInt's own expression, so sizes equal by coincidence stay apart) and its hint
from evaluating it at `hints`. A size the graph computes as a float or a bool of
the symbols, or one with a symbol no input carries (a data-dependent size), is
`Unsupported`: the caller then specialises the graph to concrete sizes.

Anything the IR cannot express raises `Unsupported` with the reason; the
backend then runs the whole FX graph through torch (never a wrong number).
"""
from __future__ import annotations

import logging
import operator
import re
from typing import Any

import torch
import torch.fx

from ..ir.graph import (CONSTANT, GETITEM, PARAMETER, Graph, Node, Ref, TensorLiteral,
                        TensorType, TupleType, Type, dtype_name)
from ..ir.layout import suggests_channels_last
from ..ir.ops import effect_type, infer_type, lookup, op_name, type_of_value
from ..ir.symbolic import hint
from .output_layout import row_major, same_layout

log = logging.getLogger("fusionstitch.frontend")
_logged_fallback_ops: set[str] = set()


class Unsupported(Exception):
    """The FX graph has something the IR cannot express; the message says what."""


# SymInt arithmetic Dynamo/AOT put in graphs; evaluated on concrete Python numbers.
_SCALAR_FNS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv,
               operator.mod, operator.neg, operator.pow, operator.eq, operator.ne,
               operator.lt, operator.le, operator.gt, operator.ge, operator.and_,
               operator.or_, abs, max, min, int, float, bool}
for _name in ("sym_max", "sym_min", "sym_float", "sym_int", "sym_not", "sym_sqrt", "sym_ite"):
    if hasattr(torch, _name):
        _SCALAR_FNS.add(getattr(torch, _name))


def _ident(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if re.match(r"[A-Za-z_]", s) else "v" + s


def _is_static(val: Any) -> bool:
    if isinstance(val, torch.Tensor):
        return all(isinstance(d, int) for d in val.shape)
    if isinstance(val, (tuple, list)):
        return all(v is None or _is_static(v) for v in val)
    return False


def _input_strides(spec: TensorType, strides) -> tuple[int, ...] | None:
    """`strides` (an input's at the call the graph is compiled for) when they are not
    row-major for `spec`'s sizes (at their hints): kernels reading the input expect them
    (codegen/view_strides.py), as they expect row-major otherwise. An expectation only,
    checked at launch: another call's strides run the kernels' general version. Strides
    that differ from row-major only on size-1 dims are recorded where torch reads a
    memory format from them (a 1x1 convolution weight made channels-last: torch runs the
    convolution channels-last, ir/layout.py), which passes that place layouts need."""
    if strides is None or len(strides) != len(spec.shape):
        return None
    shape = hint(spec.shape)
    if same_layout(shape, strides, row_major(shape)) and \
            not suggests_channels_last(shape, strides):
        return None
    return tuple(int(s) for s in strides)


def _log_fallback(op: str) -> None:
    # at DEBUG: the frontend warns per graph, with every part that runs through torch
    if op not in _logged_fallback_ops:
        _logged_fallback_ops.add(op)
        log.debug("op %s is not an op of fusionstitch's IR; it runs through torch (fallback)",
                  op)


def fx_to_ir(gm: torch.fx.GraphModule, specs: list[Any], name: str = "graph",
             hints: dict | None = None, strides: list | None = None) -> Graph:
    """Translate `gm` for placeholder values `specs` (TensorType or number); `hints`
    (symbol -> value) makes a symbolic graph (see the module docstring). `strides`: per
    placeholder, the strides of the tensor it is compiled for (None: row-major); a
    parameter records those that are not row-major (`strides=` keyword)."""
    if hints is not None:
        from .dynamic import symbolic_scalar, symbolic_type
    env: dict[torch.fx.Node, Any] = {}  # FX node -> Ref | Python scalar | tuple of those
    types: dict[str, Type] = {}
    nodes: list[Node] = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(specs):
        raise Unsupported(f"{len(placeholders)} placeholders but {len(specs)} inputs")

    def add(node: Node) -> Ref:
        nodes.append(node)
        types[node.name] = node.type
        return Ref(node.name)

    def arg(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return env[value]
        if isinstance(value, (list, tuple)):
            return tuple(arg(v) for v in value)
        if isinstance(value, torch.Tensor):
            return TensorLiteral(value.detach().cpu().clone())
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise Unsupported(f"unexpected symbolic literal {value}")
        return value

    for k, (ph, spec) in enumerate(zip(placeholders, specs)):
        if isinstance(spec, TensorType):
            st = _input_strides(spec, strides[k]) if strides else None
            env[ph] = add(Node(_ident(ph.name), PARAMETER, type=spec,
                               kwargs=(("strides", st),) if st else ()))
        else:
            env[ph] = spec

    for fx_node in gm.graph.nodes:
        if fx_node.op == "placeholder":
            continue
        if fx_node.op == "output":
            outs = fx_node.args[0]
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            outputs = tuple(arg(o) for o in outs)
            for o in outputs:
                if not (o is None or isinstance(o, (Ref, int, float, bool))):
                    raise Unsupported(f"graph output {o!r} is not a tensor, None or number")
            return Graph(tuple(nodes), outputs, name)
        if fx_node.op == "get_attr":
            value = gm
            for atom in str(fx_node.target).split("."):
                value = getattr(value, atom)
            if not isinstance(value, torch.Tensor):
                raise Unsupported(f"get_attr {fx_node.target} is not a tensor")
            lit = TensorLiteral(value.detach().cpu().clone())
            env[fx_node] = add(Node(_ident(fx_node.name), CONSTANT,
                                    kwargs=(("value", lit),), type=lit.type))
            continue
        if fx_node.op != "call_function":
            raise Unsupported(f"FX node {fx_node.name} of kind {fx_node.op}")
        target = fx_node.target
        args = tuple(arg(a) for a in fx_node.args)
        kwargs = tuple((k, arg(v)) for k, v in fx_node.kwargs.items())

        if target is operator.getitem:
            src = args[0]
            if isinstance(src, Ref):
                elem = types[src.name]
                if not isinstance(elem, TupleType):
                    raise Unsupported(f"getitem on non-tuple %{src.name}")
                if elem.elements[args[1]] is None:
                    # a number among an op's results (flash attention's max_q): its value
                    # for these sizes, as for other size arithmetic
                    env[fx_node] = _number_result(fx_node)
                    continue
                env[fx_node] = add(Node(_ident(fx_node.name), GETITEM, (src, args[1]), (),
                                        elem.elements[args[1]]))
            else:
                env[fx_node] = src[args[1]]
            continue
        if target in _SCALAR_FNS:
            if any(isinstance(a, Ref) for a in args):
                raise Unsupported(f"{target} applied to a tensor")
            if hints is not None:
                # the value of FX's own expression of it (arithmetic on a FloatDim here
                # would specialise it)
                value = symbolic_scalar(fx_node, lambda: target(*args, **dict(kwargs)),
                                        hints)
            else:
                value = target(*args, **dict(kwargs))
            env[fx_node] = value
            continue
        if not isinstance(target, torch._ops.OpOverload):
            raise Unsupported(f"call to {getattr(target, '__name__', target)!r} is not an aten op")
        op = op_name(target)
        if op in ("sym_size.int", "sym_numel.default", "sym_storage_offset.default",
                  "sym_stride.int"):
            env[fx_node] = _eval_size_query(op, args, types)
            continue
        val = fx_node.meta.get("val")
        if val is not None and not isinstance(val, (torch.Tensor, tuple, list)):
            raise Unsupported(f"op {op} returns a {type(val).__name__} (data-dependent scalar)")
        effect = effect_type(op) if val is None else None
        if effect is not None:
            t = effect                # called for its effect (an assertion): no result
        elif hints is not None:
            if val is None:
                raise Unsupported(f"op {op} has no FX shape metadata in a graph of symbolic "
                                  "sizes")
            t = symbolic_type(val, op, hints)
        elif val is not None and _is_static(val):
            try:
                t = type_of_value(val, op)
            except TypeError as e:
                raise Unsupported(str(e)) from None
        else:
            try:
                t = infer_type(op, args, kwargs, types)
            except TypeError as e:
                raise Unsupported(str(e)) from None
        if lookup(op).fallback:
            _log_fallback(op)
        env[fx_node] = add(Node(_ident(fx_node.name), op, args, kwargs, t))
    raise Unsupported("FX graph has no output node")


def _number_result(fx_node: torch.fx.Node) -> Any:
    """The value of a getitem that reads a non-tensor result of a multi-result op."""
    if "val" not in fx_node.meta:
        raise Unsupported(f"{fx_node.name} reads a non-tensor result of unknown value")
    val = fx_node.meta["val"]
    if val is None or isinstance(val, (int, float, bool)):
        return val
    raise Unsupported(f"{fx_node.name} reads a result {val!r} that is neither a tensor nor "
                      "a concrete number")


def _eval_size_query(op: str, args: tuple, types: dict[str, Type]) -> int:
    t = types[args[0].name]
    if op == "sym_size.int":
        return t.shape[args[1]]
    if op == "sym_numel.default":
        return t.numel
    # strides and offsets are layouts the IR does not model
    raise Unsupported(f"{op} asks for a memory layout the IR does not track")


def input_specs(values: list[Any]) -> list[Any]:
    """Placeholder specs for concrete call arguments (tensors -> TensorType)."""
    specs = []
    for v in values:
        if isinstance(v, torch.Tensor):
            try:
                specs.append(TensorType(tuple(int(d) for d in v.shape), dtype_name(v.dtype)))
            except TypeError as e:
                raise Unsupported(str(e)) from None
        elif isinstance(v, (int, float, bool)) or v is None:
            specs.append(v)
        else:
            raise Unsupported(f"input of type {type(v).__name__}")
    return specs
