"""Text form of the IR: `print_graph` and `parse`, with `parse(print_graph(g)) == g`.

    graph forward_0(%arg0: f32[4,8]) {
      %t: f32[8,4] = permute.default(%arg0, [1, 0])
      %m: (f32[8], i64[8]) = max.dim(%t, 1)
      %v: f32[8] = getitem(%m, 0)
      %c: f32[2] = constant(value=tensor(f32[2], [1.0, -inf]))
      return (%v, None, 3)
    }

One node a line, types spelled out (the parser re-derives nothing). Literal syntax:
ints, floats as `repr` (`inf`, `-inf`, `nan`, `-nan` bare), `True`/`False`/`None`,
JSON strings, tuples as `[a, b]`, `torch.float32` / `torch.strided` /
`torch.channels_last`, `device("cuda:0")`, complex numbers `complex(0.0, 1.0)`, refs
`%name`, and tensor literals `tensor(f32[2], [1.0, 2.0])` (numel <= 16) or
`tensor(f32[64,64], b64"...")`.
Names that are not identifiers are printed as JSON strings (`%"a b"`) so that
every graph round-trips.
"""
from __future__ import annotations

import base64
import json
import math
import re
from json.decoder import scanstring

import torch

from .symbolic import Dim, FloatDim
from .graph import DTYPES, PARAMETER, Graph, Node, Ref, TensorLiteral, TensorType, TupleType

__all__ = ["print_graph", "parse", "format_value"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_SMALL_NUMEL = 16
_NEG_NAN = -math.nan  # one shared object each, so that parsed NaN literals compare by identity
_TORCH_ENUMS = (torch.dtype, torch.layout, torch.memory_format)


# --- printing ---------------------------------------------------------------------------

def _name(s: str) -> str:
    return s if _IDENT.fullmatch(s) else json.dumps(s)


def _float(v: float) -> str:
    if v != v:
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    return float.__repr__(v)  # repr is shortest-exact; also right for float subclasses


def _tensor(lit: TensorLiteral) -> str:
    t = lit.value.detach().cpu()
    ty = TensorType.of(t)
    if ty.numel <= _SMALL_NUMEL and not t.is_complex():
        flat = t.reshape(-1).tolist()
        if t.is_floating_point():
            elems = [_float(x) for x in flat]
            # NaN payloads do not survive the element list: use bytes when they differ.
            if any(x != x for x in flat) and not _same_bits(
                    t.reshape(-1), _decode_elems([_canon_nan(x) for x in flat], t.dtype)):
                return f"tensor({ty}, b64\"{lit.to_bytes()}\")"
        elif t.dtype == torch.bool:
            elems = ["True" if x else "False" for x in flat]
        else:
            elems = [str(x) for x in flat]
        return f"tensor({ty}, [{', '.join(elems)}])"
    return f"tensor({ty}, b64\"{lit.to_bytes()}\")"


def _canon_nan(x: float) -> float:
    if x != x:
        return _NEG_NAN if math.copysign(1.0, x) < 0 else math.nan
    return x


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.numpy().tobytes() == b.numpy().tobytes() if a.dtype != torch.bfloat16 else \
        bool(torch.equal(a.view(torch.int16), b.view(torch.int16)))


def format_value(v) -> str:
    """One argument literal in IR text syntax."""
    t = type(v)
    if t is Ref:
        return "%" + _name(v.name)
    if t is bool:
        return "True" if v else "False"
    if t is int:
        return str(v)
    if t is float:
        return _float(v)
    if t is complex:
        return f"complex({_float(v.real)}, {_float(v.imag)})"
    if t is tuple or t is list:
        return "[" + ", ".join([format_value(x) for x in v]) + "]"
    if v is None:
        return "None"
    if t is str:
        return json.dumps(v)
    if isinstance(v, _TORCH_ENUMS):
        return str(v)  # torch.float32, torch.strided, torch.channels_last
    if t is torch.device:
        return f"device({json.dumps(str(v))})"
    if t is TensorLiteral:
        return _tensor(v)
    if isinstance(v, (Dim, FloatDim)):   # a symbolic size prints its expression (not parsed)
        return str(v)
    # subclasses (IntEnum, numpy floats, ...) print as their base value
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, str):
        return json.dumps(str(v))
    raise TypeError(f"cannot print literal {v!r} of type {t.__name__}")


def _node_line(n: Node) -> str:
    try:
        parts = [format_value(a) for a in n.args]
        parts.extend(f"{_name(k)}={format_value(v)}" for k, v in n.kwargs)
    except TypeError as e:
        raise TypeError(f"node %{n.name} ({n.op}): {e}") from None
    return f"  %{_name(n.name)}: {n.type} = {_name(n.op)}({', '.join(parts)})"


def print_graph(g: Graph) -> str:
    """The graph's text form (deterministic, no trailing newline)."""
    nodes = g.nodes
    k = 0  # the leading run of plain parameters goes in the signature
    while k < len(nodes) and nodes[k].op == PARAMETER and not nodes[k].args \
            and not nodes[k].kwargs:
        k += 1
    sig = ", ".join(f"%{_name(n.name)}: {n.type}" for n in nodes[:k])
    lines = [f"graph {_name(g.name)}({sig}) {{"]
    lines.extend(_node_line(n) for n in nodes[k:])
    try:
        outs = ", ".join([format_value(o) for o in g.outputs])
    except TypeError as e:
        raise TypeError(f"graph {g.name} outputs: {e}") from None
    lines.append(f"  return ({outs})")
    lines.append("}")
    return "\n".join(lines)


# --- tokenizer --------------------------------------------------------------------------
# Token kinds: 'i' identifier, 'n' int, 'f' float, 's' string, 'r' ref (%name),
# a punctuation character itself, and '$' end of input.

_WS = re.compile(r"[ \t\r\n]+")
_NUM = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_PUNCT = frozenset("()[]{},:=")
_NUM_START = frozenset("0123456789-")


def _linecol(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _error(text: str, pos: int, msg: str) -> ValueError:
    line, col = _linecol(text, pos)
    return ValueError(f"IR parse error at line {line}, column {col}: {msg}")


def _tokenize(text: str):
    kinds: list[str] = []
    vals: list = []
    poss: list[int] = []
    n = len(text)
    pos = 0
    ws, num, ident = _WS.match, _NUM.match, _IDENT.match
    while pos < n:
        c = text[pos]
        if c in " \t\r\n":
            pos = ws(text, pos).end()
            continue
        start = pos
        if c in _PUNCT:
            kinds.append(c)
            vals.append(c)
            pos += 1
        elif c == "%":
            pos += 1
            if pos < n and text[pos] == '"':
                val, pos = _string(text, pos)
            else:
                m = ident(text, pos)
                if m is None:
                    raise _error(text, pos, "expected a name after '%'")
                val, pos = m.group(), m.end()
            kinds.append("r")
            vals.append(val)
        elif c == '"':
            val, pos = _string(text, pos)
            kinds.append("s")
            vals.append(val)
        elif c in _NUM_START:
            m = num(text, pos)
            if m is not None:
                s = m.group()
                if m.group(1) or m.group(2):
                    kinds.append("f")
                    vals.append(float(s))
                else:
                    kinds.append("n")
                    vals.append(int(s))
                pos = m.end()
            elif text.startswith("-inf", pos) or text.startswith("-nan", pos):
                kinds.append("f")
                vals.append(-math.inf if text[pos + 1] == "i" else _NEG_NAN)
                pos += 4
            else:
                raise _error(text, pos, "expected a number after '-'")
            if pos < n and (text[pos].isalnum() or text[pos] in "_."):
                raise _error(text, start, "malformed number")
        else:
            m = ident(text, pos)
            if m is None:
                raise _error(text, pos, f"unexpected character {c!r}")
            kinds.append("i")
            vals.append(m.group())
            pos = m.end()
        poss.append(start)
    kinds.append("$")
    vals.append(None)
    poss.append(n)
    return kinds, vals, poss


def _string(text: str, pos: int) -> tuple[str, int]:
    try:
        return scanstring(text, pos + 1)
    except ValueError as e:
        raise _error(text, pos, f"bad string literal ({e.msg})") from None


# --- parser -----------------------------------------------------------------------------

_DESCR = {"i": "identifier", "n": "integer", "f": "float", "s": "string", "r": "reference"}
_WORDS = {"True": True, "False": False, "None": None, "inf": math.inf, "nan": math.nan}


def _tensor_enum(word: str):
    v = getattr(torch, word[6:], None) if word.startswith("torch.") else None
    return v if isinstance(v, _TORCH_ENUMS) else None


def _decode_elems(elems: list, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(elems, dtype=dtype) if elems else torch.empty(0, dtype=dtype)


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.kinds, self.vals, self.poss = _tokenize(text)
        self.i = 0

    # helpers
    def error(self, msg: str, i: int | None = None, got: bool = True) -> ValueError:
        """An error at token i (default: the current one), saying what was found there."""
        i = self.i if i is None else i
        k, v = self.kinds[i], self.vals[i]
        if not got:
            return _error(self.text, self.poss[i], msg)
        if k == "$":
            found = "end of input"
        elif k in _PUNCT:
            found = f"'{k}'"
        else:
            found = f"{_DESCR[k]} " + (v if k == "i" else "%" + _name(v) if k == "r"
                                       else format_value(v))
        return _error(self.text, self.poss[i], f"{msg}, got {found}")

    def expect(self, kind: str, what: str | None = None):
        i = self.i
        if self.kinds[i] != kind:
            raise self.error(f"expected {what or repr(kind)}")
        self.i = i + 1
        return self.vals[i]

    def name(self, what: str) -> str:
        k = self.kinds[self.i]
        if k != "i" and k != "s":
            raise self.error(f"expected {what}")
        self.i += 1
        return self.vals[self.i - 1]

    def keyword(self, word: str):
        if self.kinds[self.i] != "i" or self.vals[self.i] != word:
            raise self.error(f"expected '{word}'")
        self.i += 1

    # grammar
    def graph(self) -> Graph:
        self.keyword("graph")
        gname = self.name("a graph name")
        self.expect("(")
        nodes: list[Node] = []
        seen: set[str] = set()
        if self.kinds[self.i] != ")":
            while True:
                at = self.i
                name = self.expect("r", "a parameter '%name'")
                self.expect(":")
                self.define(name, at, seen)
                nodes.append(Node(name, PARAMETER, (), (), self.type()))
                if self.kinds[self.i] != ",":
                    break
                self.i += 1
                if self.kinds[self.i] == ")":
                    break
        self.expect(")")
        self.expect("{")
        kinds = self.kinds
        while kinds[self.i] == "r":
            nodes.append(self.node(seen))
        self.keyword("return")
        self.expect("(")
        outputs = self.values(")")
        self.expect(")")
        self.expect("}")
        self.expect("$", "end of input")
        return Graph(tuple(nodes), outputs, gname)

    def define(self, name: str, at: int, seen: set[str]):
        if name in seen:
            raise self.error(f"duplicate node name %{name}", at, got=False)
        seen.add(name)

    def node(self, seen: set[str]) -> Node:
        at = self.i
        name = self.vals[at]
        self.i += 1
        self.expect(":")
        ty = self.type()
        self.expect("=")
        op = self.name("an op name")
        self.define(name, at, seen)
        self.expect("(")
        args: list = []
        kwargs: list = []
        kinds = self.kinds
        if kinds[self.i] != ")":
            while True:
                k = kinds[self.i]
                if (k == "i" or k == "s") and kinds[self.i + 1] == "=":
                    key = self.vals[self.i]
                    self.i += 2
                    kwargs.append((key, self.value()))
                elif kwargs:
                    raise self.error("expected 'key=value' (positional argument after keyword)")
                else:
                    args.append(self.value())
                if kinds[self.i] != ",":
                    break
                self.i += 1
                if kinds[self.i] == ")":
                    break
        self.expect(")", "',' or ')'")
        return Node(name, op, tuple(args), tuple(kwargs), ty)

    def type(self):
        k = self.kinds[self.i]
        if k == "(":
            self.i += 1
            elems: list = []
            while self.kinds[self.i] != ")":
                if self.kinds[self.i] == "i" and self.vals[self.i] == "None":
                    self.i += 1
                    elems.append(None)
                else:
                    elems.append(self.tensor_type())
                if self.kinds[self.i] != ",":
                    break
                self.i += 1
            self.expect(")", "',' or ')' in a tuple type")
            return TupleType(tuple(elems))
        return self.tensor_type()

    def tensor_type(self) -> TensorType:
        at = self.i
        if self.kinds[at] != "i" or self.vals[at] not in DTYPES:
            raise self.error(f"expected a type (dtype one of {', '.join(DTYPES)}, or a tuple)")
        self.i += 1
        self.expect("[")
        dims: list[int] = []
        while self.kinds[self.i] == "n":
            if self.vals[self.i] < 0:
                raise self.error("expected a non-negative dimension")
            dims.append(self.vals[self.i])
            self.i += 1
            if self.kinds[self.i] != ",":
                break
            self.i += 1
        self.expect("]", "a dimension or ']'")
        return TensorType(tuple(dims), self.vals[at])

    def values(self, close: str) -> tuple:
        out: list = []
        kinds = self.kinds
        if kinds[self.i] != close:
            while True:
                out.append(self.value())
                if kinds[self.i] != ",":
                    break
                self.i += 1
                if kinds[self.i] == close:  # trailing comma
                    break
        return tuple(out)

    def value(self):
        i = self.i
        k = self.kinds[i]
        v = self.vals[i]
        if k == "r":
            self.i = i + 1
            return Ref(v)
        if k == "n" or k == "f" or k == "s":
            self.i = i + 1
            return v
        if k == "[":
            self.i = i + 1
            out = self.values("]")
            self.expect("]", "',' or ']'")
            return out
        if k == "i":
            if v in _WORDS:
                self.i = i + 1
                return _WORDS[v]
            e = _tensor_enum(v)
            if e is not None:
                self.i = i + 1
                return e
            if v == "device" and self.kinds[i + 1] == "(":
                self.i = i + 2
                spec = self.expect("s", "a device string")
                try:
                    dev = torch.device(spec)
                except RuntimeError:
                    raise self.error("expected a valid device string", i + 2) from None
                self.expect(")")
                return dev
            if v == "tensor" and self.kinds[i + 1] == "(":
                self.i = i + 2
                return self.tensor_literal()
            if v == "complex" and self.kinds[i + 1] == "(":
                self.i = i + 2
                parts = self.values(")")
                if len(parts) != 2 or not all(type(p) in (int, float) for p in parts):
                    raise self.error("expected complex(<real>, <imaginary>)", i, got=False)
                self.expect(")")
                return complex(*parts)
        raise self.error("expected a value (ref, number, string, list, True/False/None, "
                         "torch.<dtype|layout|memory_format>, device(...), complex(...) or "
                         "tensor(...))")

    def tensor_literal(self) -> TensorLiteral:
        ty = self.tensor_type()
        self.expect(",")
        at = self.i
        dtype = ty.torch_dtype
        if self.kinds[at] == "i" and self.vals[at] == "b64" and self.kinds[at + 1] == "s":
            self.i = at + 2
            try:
                raw = base64.b64decode(self.vals[at + 1], validate=True)
            except ValueError:
                raise self.error("expected valid base64 data", at + 1, got=False) from None
            if len(raw) != ty.nbytes:
                raise self.error(f"expected {ty.nbytes} bytes of data for {ty}, got {len(raw)}",
                                 at + 1, got=False)
            flat = (torch.frombuffer(bytearray(raw), dtype=dtype) if raw
                    else torch.empty(0, dtype=dtype))
        else:
            self.expect("[", "'[' or b64\"...\" tensor data")
            elems = self.values("]")
            self.expect("]", "',' or ']'")
            if len(elems) != ty.numel:
                raise self.error(f"expected {ty.numel} elements for {ty}, got {len(elems)}", at,
                                 got=False)
            if not all(type(e) in (int, float, bool) for e in elems):
                raise self.error("expected numbers or True/False as tensor elements", at,
                                 got=False)
            try:
                flat = _decode_elems(list(elems), dtype)
            except (RuntimeError, OverflowError, TypeError) as e:
                raise self.error(f"expected elements that fit {ty.dtype} ({e})", at,
                                 got=False) from None
        self.expect(")")
        return TensorLiteral(flat.reshape(ty.shape))


def parse(text: str) -> Graph:
    """Parse IR text (as written by `print_graph`); raises ValueError with line/column."""
    return _Parser(text).graph()

