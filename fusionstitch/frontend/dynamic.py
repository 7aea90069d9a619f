"""Shape-generic compilation: one plan and one set of kernels for every size of a graph.

When Dynamo hands a graph with symbolic sizes (the second shape under automatic
dynamic, `dynamic=True`, `torch._dynamo.mark_dynamic`), `CompiledGraph` compiles it
once for the symbols (MXNet's bar: a new shape needs no new kernel):

- `Binding` finds where each size symbol is read from a call's inputs (a tensor
  dimension that is the bare symbol, or a SymInt input); the first call's values
  are the symbols' hints;
- FX -> IR keeps sizes as `ir.symbolic.Dim`s (frontend/fx_to_ir.py), the graph is
  canonicalised and planned once, and kernels read their sizes at launch from the
  symbols' values (codegen/lower.py's size syms, runtime/program.py);
- every size comparison the frontend, the passes and lowering make whose answer
  differs between sizes is a guard (`ir.symbolic`); with each symbol >= 2 and the
  inputs' sizes equal to their expressions, `Guarded.holds` says whether a call
  may run the program. A call that violates a guard compiles another symbolic
  program with its own sizes as hints (up to `max_programs()`), then concrete
  per-shape programs as for static graphs.

A graph that cannot be compiled symbolically (a size used as a float, a symbol no
input carries, ...) is compiled per concrete shape, and the reason is logged and
kept in `CompiledGraph.dynamic_reason`.
"""
from __future__ import annotations

import os
from typing import Any

import torch

from ..ir import symbolic as S
from ..ir.graph import TensorType, TupleType, dtype_name

# symbolic programs of one graph before further shapes get concrete ones
_DEFAULT_MAX_PROGRAMS = 4


def enabled() -> bool:
    """FUSIONSTITCH_DYNAMIC=0 compiles every shape of a graph of symbolic sizes on its
    own (concrete sizes), as for static graphs."""
    return os.environ.get("FUSIONSTITCH_DYNAMIC", "1").strip().lower() not in (
        "0", "false", "no", "off")


def max_programs() -> int:
    """FUSIONSTITCH_DYNAMIC_PROGRAMS: symbolic programs a graph may compile (a new one
    when a call's sizes violate the guards of every earlier one)."""
    try:
        return max(1, int(os.environ.get("FUSIONSTITCH_DYNAMIC_PROGRAMS", "")))
    except ValueError:
        return _DEFAULT_MAX_PROGRAMS


def _unsupported(msg: str) -> Exception:
    from .fx_to_ir import Unsupported
    return Unsupported(msg)


def _placeholder_vals(gm: torch.fx.GraphModule) -> list:
    return [n.meta.get("val", n.meta.get("example_value"))
            for n in gm.graph.nodes if n.op == "placeholder"]


def is_symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether some input of `gm` has a symbolic size or is a SymInt."""
    for val in _placeholder_vals(gm):
        if isinstance(val, torch.SymInt):
            return True
        if isinstance(val, torch.Tensor) and any(isinstance(d, torch.SymInt)
                                                 for d in val.shape):
            return True
    return False


def _expr(d) -> Any:
    """The sympy expression of a size (SymInt or int)."""
    import sympy
    if isinstance(d, torch.SymInt):
        return d.node.expr
    return sympy.Integer(int(d))


class Binding:
    """Where a graph's size symbols come from: each symbol is a dimension of an input
    tensor, or a SymInt input. Raises Unsupported when a symbol is neither."""

    def __init__(self, gm: torch.fx.GraphModule):
        vals = _placeholder_vals(gm)
        self.num_inputs = len(vals)
        # per placeholder: ("tensor", dims exprs) | ("number", expr) | ("other", None)
        self.inputs: list[tuple[str, Any]] = []
        source: dict[Any, tuple[int, int | None]] = {}
        free: set = set()
        for i, val in enumerate(vals):
            if isinstance(val, torch.Tensor):
                if val.layout != torch.strided:
                    raise _unsupported(f"input {i} is a {val.layout} tensor")
                dims = tuple(_expr(d) for d in val.shape)
                self.inputs.append(("tensor", dims))
                for d, e in enumerate(dims):
                    free |= e.free_symbols
                    if e.is_Symbol:
                        source.setdefault(e, (i, d))
            elif isinstance(val, torch.SymInt):
                e = _expr(val)
                self.inputs.append(("number", e))
                free |= e.free_symbols
                if e.is_Symbol:
                    source.setdefault(e, (i, None))
            elif isinstance(val, (torch.SymFloat, torch.SymBool)):
                raise _unsupported(f"input {i} is a symbolic {type(val).__name__}")
            else:
                self.inputs.append(("other", None))
        missing = sorted(str(s) for s in free if s not in source)
        if missing:
            raise _unsupported(f"size symbol(s) {', '.join(missing)} are no input's size")
        self.symbols = sorted(source, key=str)
        self.sources = [source[s] for s in self.symbols]
        # every input size as a function of the symbols: a call's sizes must be these
        expected = []
        self._checked: list[tuple[int, int | None]] = []
        for i, (kind, e) in enumerate(self.inputs):
            if kind == "tensor":
                for d, x in enumerate(e):
                    expected.append(x)
                    self._checked.append((i, d))
            elif kind == "number":
                expected.append(e)
                self._checked.append((i, None))
        self._expected = S.compile_values(self.symbols, expected) if expected else None

    def values(self, args: list) -> tuple[int, ...]:
        """The symbols' values at this call."""
        return tuple(int(args[i]) if d is None else args[i].shape[d] for i, d in self.sources)

    def in_range(self, args: list) -> bool:
        """Whether every symbol is at least SIZE_MIN at this call (a symbolic program's
        range; smaller sizes are compiled concretely)."""
        return all(v >= S.SIZE_MIN for v in self.values(args))

    def hints(self, args: list) -> dict:
        return dict(zip(self.symbols, self.values(args)))

    def consistent(self, args: list, values: tuple) -> bool:
        """Whether every input size of this call is its expression at `values`."""
        if self._expected is None:
            return True
        want = self._expected(*values)
        for (i, d), w in zip(self._checked, want):
            got = int(args[i]) if d is None else args[i].shape[d]
            if got != w:
                return False
        return True

    def specs(self, args: list, hints: dict) -> list:
        """Placeholder values for fx_to_ir: TensorTypes with Dims, Dims for SymInts."""
        out = []
        for a, (kind, e) in zip(args, self.inputs):
            if kind == "tensor":
                if not isinstance(a, torch.Tensor):
                    raise _unsupported(f"a tensor input is a {type(a).__name__}")
                dims = tuple(S.make(n, x) for n, x in zip(a.shape, e))
                try:
                    out.append(TensorType(dims, dtype_name(a.dtype)))
                except TypeError as err:
                    raise _unsupported(str(err)) from None
            elif kind == "number":
                out.append(S.make(int(a), e))
            elif isinstance(a, (int, float, bool)) or a is None:
                out.append(a)
            else:
                raise _unsupported(f"input of type {type(a).__name__}")
        return out


class Guarded:
    """What a symbolic program needs of a call: the inputs' sizes are their expressions,
    every symbol is >= SIZE_MIN, and the recorded guards hold."""

    def __init__(self, binding: Binding, guards: S.Guards):
        import sympy
        self.binding = binding
        relations = [sympy.Ge(s, S.SIZE_MIN) for s in binding.symbols]
        self.guards = sorted((g for g in guards if g is not sympy.true), key=str)
        relations += self.guards
        self._check = S.compile_values(binding.symbols, relations)

    def holds(self, args: list) -> tuple | None:
        """The symbols' values when this call may run the program, else None."""
        values = self.binding.values(args)
        if not all(self._check(*values)) or not self.binding.consistent(args, values):
            return None
        return values

    def text(self) -> list[str]:
        return [str(g) for g in self.guards]


def symbolic_scalar(fx_node: torch.fx.Node, compute, hints: dict) -> Any:
    """A number computed by the graph (`operator.mul` of sizes, `sym_max`, `n / (n - 1)`):
    a size is the Dim of its FX expression and a float of sizes a FloatDim, each at the
    hints; other numbers are `compute()`."""
    val = fx_node.meta.get("val")
    if isinstance(val, torch.SymInt):
        e = val.node.expr
        return S.make(_at(e, hints, fx_node.name), e)
    if isinstance(val, torch.SymFloat) and val.node.expr.free_symbols:
        e = val.node.expr
        missing = [x for x in e.free_symbols if x not in hints]
        if missing:
            raise _unsupported(f"{fx_node.name}: {e} has symbol(s) "
                               f"{', '.join(map(str, missing))} no input carries")
        names = sorted(e.free_symbols, key=str)
        (at_hints,) = S.compile_values(names, [e])(*(hints[x] for x in names))
        return S.FloatDim(at_hints, e, hints)
    if isinstance(val, (torch.SymFloat, torch.SymBool)):
        if not val.node.expr.free_symbols:
            return S.hint(compute())
        raise _unsupported(f"{fx_node.name} computes a {type(val).__name__} of the sizes "
                           f"({val.node.expr}): a bool of a size is not kept symbolic")
    value = compute()
    if S.has_symbols(value):
        raise _unsupported(f"{fx_node.name} gives a size ({value}) FX records no expression for")
    return value


def _at(e, hints: dict, what: str) -> int:
    if not e.free_symbols:
        return int(e)
    missing = [s for s in e.free_symbols if s not in hints]
    if missing:
        raise _unsupported(f"{what}: size {e} has symbol(s) {', '.join(map(str, missing))} no "
                           "input carries (a data-dependent size)")
    return int(e.xreplace({s: hints[s] for s in e.free_symbols}))


def symbolic_type(val: Any, op: str, hints: dict):
    """The IR type of FX's value `val` with symbolic sizes as Dims."""
    if isinstance(val, torch.Tensor):
        dims = []
        for d in val.shape:
            if isinstance(d, torch.SymInt):
                e = d.node.expr
                dims.append(S.make(_at(e, hints, op), e))
            else:
                dims.append(int(d))
        try:
            return TensorType(tuple(dims), dtype_name(val.dtype))
        except TypeError as e:
            raise _unsupported(str(e)) from None
    if isinstance(val, (tuple, list)):
        return TupleType(tuple(None if v is None else symbolic_type(v, op, hints) for v in val))
    raise _unsupported(f"op {op} returned {type(val).__name__}; expected a tensor or a tuple "
                       "of tensors")
