"""The IR: an immutable graph of typed nodes.

A `Graph` is a tuple of `Node`s in topological order (parameters first) plus
its outputs. A node names an op of the op table (`ir/ops.py`), its arguments
(references to other nodes, `Ref`, mixed with literals exactly as the aten
schema takes them), and its result type. Nodes never change: passes build new
graphs. This is the HLO shape of things (instructions with operands and a
shape), with aten's argument conventions so that every op has a reference
implementation for free.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator

import torch

# Short dtype names used in types and text (HLO-like), and their torch dtypes.
DTYPES: dict[str, torch.dtype] = {
    "f64": torch.float64,
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "i32": torch.int32,
    "i16": torch.int16,
    "i8": torch.int8,
    "u8": torch.uint8,
    "u64": torch.uint64,   # flash attention's RNG state: passed between library calls only
    "b8": torch.bool,
    "c64": torch.complex64,
    "c128": torch.complex128,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}
FLOAT_DTYPES = frozenset({"f64", "f32", "f16", "bf16"})
ITEMSIZE: dict[str, int] = {k: v.itemsize for k, v in DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """The IR name of a torch dtype; raises with the dtype named if unsupported."""
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise TypeError(f"fusionstitch IR has no dtype for {dtype}; expected one of "
                        f"{sorted(str(d) for d in DTYPE_NAMES)}") from None


@dataclass(frozen=True)
class TensorType:
    """A dense tensor's static type: shape (ints) and dtype (short name)."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise TypeError(f"unknown dtype {self.dtype!r}")
        if not all(isinstance(d, int) and d >= 0 for d in self.shape):
            raise TypeError(f"shape must be non-negative ints, got {self.shape!r}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            if type(d) is not int:       # a symbolic size (ir/symbolic.py): kept, it costs
                n = self.__dict__.get("_numel")
                if n is None:
                    from .symbolic import product
                    n = product(self.shape)
                    object.__setattr__(self, "_numel", n)
                return n
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @staticmethod
    def of(t: torch.Tensor) -> "TensorType":
        return TensorType(tuple(int(d) for d in t.shape), dtype_name(t.dtype))

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class TupleType:
    """The type of a multi-result op (aten ops returning tuples or lists).

    An element is None where the op returns None or a number (not a tensor) in that
    position; the frontend replaces a read of such a number by its value.
    """

    elements: tuple[TensorType | None, ...]

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.elements if e is not None)

    def __str__(self) -> str:
        inner = ", ".join("None" if e is None else str(e) for e in self.elements)
        return f"({inner},)" if len(self.elements) == 1 else f"({inner})"


Type = TensorType | TupleType


@dataclass(frozen=True)
class Ref:
    """A use of another node's result inside a node's arguments."""

    name: str

    def __str__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True, eq=False)
class TensorLiteral:
    """A constant tensor held by the graph (compared by value)."""

    value: torch.Tensor

    @property
    def type(self) -> TensorType:
        return TensorType.of(self.value)

    def __eq__(self, other) -> bool:
        if not isinstance(other, TensorLiteral):
            return NotImplemented
        a, b = self.value, other.value
        # bitwise: -0.0 differs from 0.0 and a NaN equals itself
        return a.dtype == b.dtype and a.shape == b.shape and self.to_bytes() == other.to_bytes()

    def __hash__(self) -> int:
        return hash((tuple(self.value.shape), self.value.dtype))

    def to_bytes(self) -> str:
        return base64.b64encode(self.value.detach().cpu().contiguous().numpy().tobytes()
                                if self.value.dtype != torch.bfloat16 else
                                self.value.detach().cpu().contiguous().view(torch.int16)
                                .numpy().tobytes()).decode()


# Literal values allowed in node arguments besides Ref: see ir/text.py for syntax.
Literal = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
           torch.memory_format, TensorLiteral, tuple)


def walk_refs(value: Any) -> Iterator[Ref]:
    if isinstance(value, Ref):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from walk_refs(v)


def map_refs(value: Any, fn) -> Any:
    """Rebuild an argument value with every Ref replaced by fn(ref)."""
    if isinstance(value, Ref):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(map_refs(v, fn) for v in value)
    return value


def _strict(value: Any) -> Any:
    """A key that tells 1, 1.0 and True apart (and -0.0 from 0.0), for node equality."""
    if isinstance(value, tuple):
        return tuple(_strict(v) for v in value)
    if isinstance(value, float):
        return (float, value.hex() if value == value else "nan")
    if isinstance(value, (bool, int)):
        return (type(value), value)
    return value


def fresh_name(stem: str, taken: set[str]) -> str:
    """`stem_k` for the smallest k not in `taken` (which then holds it): names of the nodes
    a rewrite adds beside the graph's own."""
    k = 0
    while f"{stem}_{k}" in taken:
        k += 1
    taken.add(f"{stem}_{k}")
    return f"{stem}_{k}"


@dataclass(frozen=True, eq=False)
class Node:
    """One op application. `args`/`kwargs` follow the op's aten schema."""

    name: str
    op: str
    args: tuple = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    type: Type = field(default=None)  # type: ignore[assignment]

    def __post_init__(self):
        if not isinstance(self.type, (TensorType, TupleType)):
            raise TypeError(f"node %{self.name} ({self.op}): type must be TensorType or "
                            f"TupleType, got {self.type!r}")

    @cached_property
    def inputs(self) -> tuple[str, ...]:
        """Names of the nodes this node reads, in argument order (may repeat)."""
        refs = list(walk_refs(self.args))
        for _, v in self.kwargs:
            refs.extend(walk_refs(v))
        return tuple(r.name for r in refs)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return (self.name == other.name and self.op == other.op and self.type == other.type
                and _strict(self.args) == _strict(other.args)
                and _strict(tuple(self.kwargs)) == _strict(tuple(other.kwargs)))

    def __hash__(self) -> int:
        return hash((self.name, self.op, self.type))

    def kwarg(self, key: str, default: Any = None) -> Any:
        for k, v in self.kwargs:
            if k == key:
                return v
        return default

    def replace(self, **changes) -> "Node":
        fields = dict(name=self.name, op=self.op, args=self.args, kwargs=self.kwargs,
                      type=self.type)
        fields.update(changes)
        return Node(**fields)

    def __getstate__(self):  # cached_property is rebuilt, not pickled
        return {k: v for k, v in self.__dict__.items() if k != "inputs"}

    def __setstate__(self, state):
        self.__dict__.update(state)


PARAMETER = "parameter"
CONSTANT = "constant"
GETITEM = "getitem"

Output = Ref | None | int | float


@dataclass(frozen=True)
class Graph:
    """A topologically ordered, immutable graph. Parameters come first, in call order."""

    nodes: tuple[Node, ...]
    outputs: tuple[Output, ...]
    name: str = "graph"

    def __post_init__(self):
        index: dict[str, Node] = {}
        for n in self.nodes:
            if n.name in index:
                raise ValueError(f"graph {self.name}: duplicate node name %{n.name}")
            index[n.name] = n
        object.__setattr__(self, "_index", index)

    def __getitem__(self, name: str) -> Node:
        return self._index[name]  # type: ignore[attr-defined]

    def __contains__(self, name: str) -> bool:
        return name in self._index  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def params(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == PARAMETER)

    @property
    def ops(self) -> tuple[Node, ...]:
        """Every node that is not a parameter."""
        return tuple(n for n in self.nodes if n.op != PARAMETER)

    @cached_property
    def output_refs(self) -> tuple[Ref, ...]:
        return tuple(o for o in self.outputs if isinstance(o, Ref))

    @cached_property
    def symbolic(self) -> bool:
        """Whether some size of the graph is symbolic (`ir.symbolic.Dim`)."""
        from .symbolic import has_symbols
        return any(has_symbols(n.type.shape) if isinstance(n.type, TensorType) else
                   isinstance(n.type, TupleType) and any(
                       e is not None and has_symbols(e.shape) for e in n.type.elements)
                   for n in self.nodes)

    @cached_property
    def output_names(self) -> frozenset[str]:
        return frozenset(o.name for o in self.outputs if isinstance(o, Ref))

    @cached_property
    def users(self) -> dict[str, tuple[str, ...]]:
        """name -> names of the nodes that read it (each user once, in graph order)."""
        out: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                out[i].append(n.name)
        return {k: tuple(v) for k, v in out.items()}

    def __getstate__(self):
        return {"nodes": self.nodes, "outputs": self.outputs, "name": self.name}

    def __setstate__(self, state):
        object.__setattr__(self, "nodes", state["nodes"])
        object.__setattr__(self, "outputs", state["outputs"])
        object.__setattr__(self, "name", state["name"])
        self.__post_init__()

    def __eq__(self, other) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (self.name, self.nodes, self.outputs) == (other.name, other.nodes, other.outputs)

    def __hash__(self) -> int:
        return hash((self.name, len(self.nodes)))

    def __str__(self) -> str:
        from .text import print_graph
        return print_graph(self)
