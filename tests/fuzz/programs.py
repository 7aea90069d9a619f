"""Random torch programs for the differential fuzzer (Csmith-style, at the torch level).

A `Program` is data: its inputs (shape, dtype, how to fill them, whether they need
grad), a body of Python statements over `torch` and `F`, and the names it returns.
It prints as the source of one function (`Program.source()`) and travels as one line
of JSON (`Program.to_json()`), which is the repro a failure prints.

`programs()` is the hypothesis strategy. It builds a program op by op over a typed
environment of values (shape, kind, whether the value is exact), so every statement
is well typed and broadcast-compatible by construction. The rules that keep the
comparison with eager meaningful (tests/fuzz/check.py):
- discontinuous functions (floor, round, comparisons, casts to integers, argmax,
  fmod) only see *exact* values: inputs and integer-valued results, never a float
  computed by a chain whose last bit may legitimately differ from eager's;
- low-precision round trips (`x.half().to(x.dtype)`) of computed values end an
  output (nothing reads them afterwards), and their output's tolerance is widened
  to the narrow type's epsilon;
- domains are guarded (`log(|x| + 0.5)`, `x / (|y| + 1)`, `exp(clamp(x, -8, 8))`)
  so chains neither overflow nor hit poles, and so differences are real bugs;
- integer division by a value that may be zero is allowed on purpose: eager raises,
  and the compiled program must raise too.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import hypothesis.strategies as st

# Tolerance (relative, norm-wise) by the narrowest float type a value went through.
TOLERANCE = {"float32": 1e-4, "float16": 4e-3, "bfloat16": 3e-2}


@dataclass
class Input:
    shape: tuple
    dtype: str            # float32, int64, int32, bool
    grad: bool = False    # requires_grad (training programs)
    fill: str = "randn"   # randn | randint | bool | uniform
    # memory order of its dims, outermost first (None: row-major): a dense input laid
    # out otherwise (channels-last, a transpose), as a caller may pass one
    order: tuple | None = None

    def to_dict(self):
        d = {"shape": list(self.shape), "dtype": self.dtype, "grad": self.grad,
             "fill": self.fill}
        if self.order is not None:
            d["order"] = list(self.order)
        return d


@dataclass
class Program:
    inputs: list
    body: list                     # Python statements
    outputs: list                  # returned names
    tolerance: dict = field(default_factory=dict)   # output name -> relative tolerance
    train: bool = False            # backward of a weighted sum of the float outputs
    seed: int = 0

    def source(self) -> str:
        args = ", ".join(f"a{i}" for i in range(len(self.inputs)))
        lines = [f"def program({args}):"]
        lines += [f"    {s}" for s in self.body] or ["    pass"]
        lines.append(f"    return ({', '.join(self.outputs)},)")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"inputs": [i.to_dict() for i in self.inputs], "body": self.body,
                           "outputs": self.outputs, "tolerance": self.tolerance,
                           "train": self.train, "seed": self.seed}, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> "Program":
        d = json.loads(text)
        return Program([Input(tuple(i["shape"]), i["dtype"], i["grad"], i["fill"],
                              tuple(i["order"]) if i.get("order") else None)
                        for i in d["inputs"]], d["body"], d["outputs"],
                       d.get("tolerance", {}), d.get("train", False), d.get("seed", 0))

    def live(self) -> "Program":
        """The program without the statements no output depends on (torch.compile drops
        them: AOTAutograd's dead-code elimination, for every backend). An in-place update
        is kept with what it reads (it may write a live value through a view)."""
        live = set(self.outputs)
        kept = []
        for s in reversed(self.body):
            target, _, expr = s.partition(" = ")
            inplace = not expr
            if inplace or target.strip() in live:
                live.update(_NAMES.findall(s))
                kept.append(s)
        return Program(self.inputs, kept[::-1], self.outputs, self.tolerance, self.train,
                       self.seed)

    def __repr__(self) -> str:   # what hypothesis prints for a falsifying example
        return f"Program.from_json({self.to_json()!r})"


_NAMES = re.compile(r"\b[av]\d+\b")


# --- the typed environment ---------------------------------------------------------------
@dataclass
class Val:
    name: str
    shape: tuple
    kind: str          # float | int | bool
    exact: bool        # an input or an integer-valued result: discontinuous ops may read it
    narrow: str = "float32"   # the narrowest float type it went through
    terminal: bool = False    # nothing may read it (a low-precision round trip)
    view_of: str | None = None   # the value whose memory it may view (eager refuses an
    # in-place update of that value from it: its elements overlap the written ones)


def _broadcast(a: tuple, b: tuple) -> tuple | None:
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + tuple(a)),
                    reversed((1,) * (len(a) - len(b)) + tuple(b))):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def _numel(shape) -> int:
    return math.prod(shape)


# Unary float functions: continuous, guarded domains. {x} is the operand.
UNARY = [
    "torch.sin({x})", "torch.cos({x})", "torch.tanh({x})", "torch.sigmoid({x})",
    "torch.atan({x})", "torch.erf({x})", "torch.relu({x})", "F.gelu({x})", "F.silu({x})",
    "torch.abs({x})", "-{x}", "torch.exp({x}.clamp(-8, 8))", "torch.log1p({x}.abs())",
    "torch.sqrt({x}.abs() + 1)", "torch.rsqrt({x}.abs() + 1)", "torch.reciprocal({x}.abs() + 1)",
    "torch.expm1({x}.clamp(-8, 5))", "torch.sinh({x}.clamp(-5, 5))", "torch.asinh({x})",
    "torch.log({x}.abs() + 0.5)", "torch.erfc({x})", "{x}.clamp(-1, 1)", "F.softplus({x})",
    "F.leaky_relu({x}, 0.1)", "F.elu({x})", "F.hardswish({x})", "F.gelu({x}, approximate='tanh')",
    "torch.square({x}.clamp(-10, 10))", "{x} * 0.5 + 1", "torch.pow({x}.abs() + 1, 1.5)",
    "torch.log2({x}.abs() + 1)", "torch.exp2({x}.clamp(-8, 8))", "F.mish({x})",
    "torch.cosh({x}.clamp(-5, 5))", "F.hardtanh({x})", "torch.lgamma({x}.abs() + 1)",
    "torch.flip({x}, [-1])",
]
# Binary float functions of {a} and {b} (broadcast).
BINARY = [
    "{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / ({b}.abs() + 1)", "torch.maximum({a}, {b})",
    "torch.minimum({a}, {b})", "torch.atan2({a}, {b})", "torch.hypot({a}, {b})",
    "{a} * torch.sigmoid({b})", "torch.lerp({a}, {b}, 0.3)", "torch.addcmul({a}, {a}, {b}, value=0.5)",
    "torch.add({a}, {b}, alpha=2)", "torch.copysign({a}, {b})", "torch.fmax({a}, {b})",
    "torch.xlogy({a}.abs(), {b}.abs() + 1)", "torch.fmin({a}, {b})",
    "torch.clamp({a}, {b} - 1, {b} + 1)",
]
# Discontinuous functions: only of exact values.
UNARY_EXACT = [
    "torch.floor({x})", "torch.ceil({x})", "torch.round({x})", "torch.trunc({x})",
    "torch.sign({x})", "torch.frac({x})", "torch.fmod({x}, 0.75)", "torch.remainder({x}, 0.75)",
    "torch.round({x}, decimals=1)",
]
COMPARE = ["{a} > {b}", "{a} <= {b}", "{a} == {b}", "{a} != {b}", "torch.isclose({a}, {b})"]
INT_BINARY = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} // ({b}.abs() + 1)",
              "{a} % ({b}.abs() + 1)", "torch.div({a}, {b}.abs() + 1, rounding_mode='trunc')",
              "torch.fmod({a}, {b}.abs() + 1)", "{a} & {b}", "{a} | {b}", "{a} ^ {b}",
              "torch.maximum({a}, {b})", "torch.minimum({a}, {b})"]
# may divide by zero: eager raises ZeroDivisionError, so must we
INT_DIVIDE_RAW = ["{a} // {b}", "{a} % {b}"]
INT_UNARY = ["~{x}", "torch.abs({x})", "{x}.clamp(-3, 3)", "-{x}", "{x} * 3 - 1"]
BOOL_BINARY = ["{a} & {b}", "{a} | {b}", "{a} ^ {b}", "torch.logical_and({a}, {b})"]
REDUCE_FLOAT = ["sum", "mean", "amax", "amin", "var", "std", "logsumexp", "prod", "norm"]
ROW_OPS = ["torch.softmax({x}, {d})", "torch.log_softmax({x}, {d})", "torch.cumsum({x}, {d})"]


class Builder:
    """Draws one program: a list of statements over a typed environment."""

    def __init__(self, draw, inputs: list[Input], train: bool):
        self.draw = draw
        self.inputs = inputs
        self.train = train
        self.vals: list[Val] = []
        self.body: list[str] = []
        self.count = 0
        for i, inp in enumerate(inputs):
            kind = "float" if inp.dtype.startswith(("float", "bfloat")) else (
                "bool" if inp.dtype == "bool" else "int")
            self.vals.append(Val(f"a{i}", inp.shape, kind, exact=True))

    # -- helpers -----------------------------------------------------------------------
    def pick(self, pred=lambda v: True) -> Val | None:
        choices = [v for v in self.vals if not v.terminal and pred(v)]
        if not choices:
            return None
        # favour recent values: chains, not only a fan of independent ops
        weights = list(range(1, len(choices) + 1))
        i = self.draw(st.integers(0, sum(weights) - 1))
        for v, w in zip(choices, weights):
            if i < w:
                return v
            i -= w
        return choices[-1]

    def emit(self, expr: str, shape: tuple, kind: str, exact: bool = False,
             narrow: str = "float32", terminal: bool = False) -> Val:
        name = f"v{self.count}"
        self.count += 1
        self.body.append(f"{name} = {expr}")
        v = Val(name, tuple(shape), kind, exact, narrow, terminal)
        self.vals.append(v)
        return v

    def narrowest(self, *vals: Val) -> str:
        order = list(TOLERANCE)
        return max((v.narrow for v in vals), key=order.index)

    def dims(self, shape: tuple) -> tuple:
        """A subset of dims to reduce over (negative indices sometimes)."""
        n = len(shape)
        if n == 0:
            return self.draw(st.sampled_from([(), (0,), (-1,)]))
        chosen = self.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        return tuple(sorted(d - n if self.draw(st.booleans()) and d % 2 else d for d in chosen))

    # -- op kinds ----------------------------------------------------------------------
    def unary(self) -> bool:
        x = self.pick(lambda v: v.kind == "float")
        if x is None:
            return False
        if x.exact and self.draw(st.integers(0, 3)) == 0:
            tmpl = self.draw(st.sampled_from(UNARY_EXACT))
            self.emit(tmpl.format(x=x.name), x.shape, "float", exact=False)
            return True
        tmpl = self.draw(st.sampled_from(UNARY))
        self.emit(tmpl.format(x=x.name), x.shape, "float", narrow=x.narrow)
        return True

    def binary(self) -> bool:
        a = self.pick(lambda v: v.kind == "float")
        if a is None:
            return False
        b = self.pick(lambda v: v.kind == "float" and _broadcast(a.shape, v.shape) is not None)
        if b is None:
            return False
        tmpl = self.draw(st.sampled_from(BINARY))
        shape = _broadcast(a.shape, b.shape)
        if self.draw(st.integers(0, 4)) == 0:   # a Python scalar operand
            b_name = repr(self.draw(st.sampled_from([2.0, -0.5, 3, 1e-3, 0.0])))
            self.emit(tmpl.format(a=a.name, b=f"torch.full_like({a.name}, {b_name})"),
                      a.shape, "float", narrow=a.narrow)
            return True
        self.emit(tmpl.format(a=a.name, b=b.name), shape, "float", narrow=self.narrowest(a, b))
        return True

    def where(self) -> bool:
        c = self.pick(lambda v: v.kind == "bool")
        if c is None:
            x = self.pick(lambda v: v.exact and v.kind in ("float", "int"))
            if x is None:
                return False
            c = self.emit(f"{x.name} > 0", x.shape, "bool", exact=True)
        a = self.pick(lambda v: v.kind == "float" and _broadcast(c.shape, v.shape) is not None)
        if a is None:
            return False
        b = self.pick(lambda v: v.kind == "float"
                      and _broadcast(_broadcast(c.shape, a.shape), v.shape) is not None)
        other = b.name if b is not None and self.draw(st.booleans()) else "0.0"
        shape = _broadcast(c.shape, a.shape)
        if other != "0.0":
            shape = _broadcast(shape, b.shape)
        narrow = self.narrowest(a, b) if other != "0.0" else a.narrow
        self.emit(f"torch.where({c.name}, {a.name}, {other})", shape, "float", narrow=narrow)
        return True

    def compare(self) -> bool:
        a = self.pick(lambda v: v.exact and v.kind in ("float", "int"))
        if a is None:
            return False
        b = self.pick(lambda v: v.exact and v.kind == a.kind
                      and _broadcast(a.shape, v.shape) is not None)
        tmpl = self.draw(st.sampled_from(COMPARE))
        if b is None or b is a or "isclose" in tmpl and a.kind != "float":
            self.emit(f"{a.name} > 0", a.shape, "bool", exact=True)
            return True
        self.emit(tmpl.format(a=a.name, b=b.name), _broadcast(a.shape, b.shape), "bool",
                  exact=True)
        return True

    def integer(self) -> bool:
        a = self.pick(lambda v: v.kind == "int")
        if a is None:
            return False
        if self.draw(st.booleans()):
            tmpl = self.draw(st.sampled_from(INT_UNARY))
            self.emit(tmpl.format(x=a.name), a.shape, "int", exact=True)
            return True
        b = self.pick(lambda v: v.kind == "int" and _broadcast(a.shape, v.shape) is not None)
        if b is None:
            return False
        pool = INT_BINARY + (INT_DIVIDE_RAW if self.draw(st.integers(0, 9)) == 0 else [])
        tmpl = self.draw(st.sampled_from(pool))
        self.emit(tmpl.format(a=a.name, b=b.name), _broadcast(a.shape, b.shape), "int",
                  exact=True)
        return True

    def logical(self) -> bool:
        a = self.pick(lambda v: v.kind == "bool")
        if a is None:
            return False
        b = self.pick(lambda v: v.kind == "bool" and _broadcast(a.shape, v.shape) is not None)
        if b is None or self.draw(st.booleans()):
            self.emit(f"~{a.name}", a.shape, "bool", exact=True)
            return True
        tmpl = self.draw(st.sampled_from(BOOL_BINARY))
        self.emit(tmpl.format(a=a.name, b=b.name), _broadcast(a.shape, b.shape), "bool",
                  exact=True)
        return True

    def cast(self) -> bool:
        x = self.pick(lambda v: True)
        if x is None:
            return False
        if x.kind in ("int", "bool"):
            self.emit(f"{x.name}.to(torch.float32)", x.shape, "float", exact=True)
            return True
        if x.exact and self.draw(st.booleans()):
            self.emit(f"{x.name}.to(torch.int32)", x.shape, "int", exact=True)
            return True
        narrow = self.draw(st.sampled_from(["float16", "bfloat16"]))
        # a round trip of a computed value ends an output (see the module docstring)
        self.emit(f"{x.name}.to(torch.{narrow}).to({x.name}.dtype)", x.shape, "float",
                  exact=x.exact, narrow=narrow if not x.exact else x.narrow,
                  terminal=not x.exact)
        return True

    def reduce(self) -> bool:
        x = self.pick(lambda v: v.kind in ("float", "bool", "int"))
        if x is None:
            return False
        keep = self.draw(st.booleans())
        dims = self.dims(x.shape)
        n = len(x.shape)
        norm = [d % n for d in dims] if n else []
        out = tuple(1 if i in norm else s for i, s in enumerate(x.shape)) if keep else \
            tuple(s for i, s in enumerate(x.shape) if i not in norm)
        if x.kind == "bool":
            fn = self.draw(st.sampled_from(["any", "all"]))
            self.emit(f"torch.{fn}({x.name}, dim={dims}, keepdim={keep})", out, "bool",
                      exact=True)
            return True
        if x.kind == "int":
            fn = self.draw(st.sampled_from(["sum", "amax", "amin"]))
            self.emit(f"torch.{fn}({x.name}, dim={dims}, keepdim={keep})", out, "int",
                      exact=True)
            return True
        fn = self.draw(st.sampled_from(REDUCE_FLOAT))
        if fn in ("var", "std"):
            corr = self.draw(st.sampled_from([0, 1]))
            expr = f"torch.{fn}({x.name}, dim={dims}, correction={corr}, keepdim={keep})"
        elif fn == "prod":
            # one dim; bounded factors so the product neither overflows nor underflows
            if n == 0 or x.shape[norm[0]] > 16:
                return False
            d = dims[0]
            out = tuple(1 if i == norm[0] else s for i, s in enumerate(x.shape)) if keep else \
                tuple(s for i, s in enumerate(x.shape) if i != norm[0])
            expr = f"torch.prod(torch.tanh({x.name}) + 1.5, dim={d}, keepdim={keep})"
        elif fn == "norm":
            expr = f"torch.linalg.vector_norm({x.name}, dim={dims}, keepdim={keep})"
        elif fn == "logsumexp":
            expr = f"torch.logsumexp({x.name}, dim={dims}, keepdim={keep})"
        else:
            expr = f"torch.{fn}({x.name}, dim={dims}, keepdim={keep})"
        self.emit(expr, out, "float", narrow=x.narrow)
        return True

    def full_reduce(self) -> bool:
        x = self.pick(lambda v: v.kind == "float")
        if x is None:
            return False
        fn = self.draw(st.sampled_from(["sum", "mean", "amax"]))
        self.emit(f"{x.name}.{fn}()", (), "float", narrow=x.narrow)
        return True

    def row_op(self) -> bool:
        x = self.pick(lambda v: v.kind == "float" and len(v.shape) > 0)
        if x is None:
            return False
        d = self.draw(st.integers(-len(x.shape), len(x.shape) - 1))
        self.emit(self.draw(st.sampled_from(ROW_OPS)).format(x=x.name, d=d), x.shape, "float",
                  narrow=x.narrow)
        return True

    def view(self) -> bool:
        x = self.pick(lambda v: len(v.shape) > 0)
        if x is None:
            return False
        n, s = len(x.shape), x.shape
        choice = self.draw(st.sampled_from(
            ["permute", "transpose", "flatten", "merge", "slice", "unsqueeze_expand",
             "select", "flip", "contiguous", "narrow", "split"]))
        keep = dict(kind=x.kind, exact=x.exact, narrow=x.narrow)
        if choice == "permute":
            perm = tuple(self.draw(st.permutations(range(n))))
            self.emit(f"{x.name}.permute{perm if n > 1 else '(0,)'}",
                      tuple(s[p] for p in perm), **keep)
        elif choice == "transpose" and n >= 2:
            i, j = self.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
            t = list(s)
            t[i], t[j] = t[j], t[i]
            self.emit(f"{x.name}.transpose({i}, {j})", tuple(t), **keep)
        elif choice == "flatten":
            self.emit(f"{x.name}.reshape(-1)" if _numel(s) else f"{x.name}.flatten()",
                      (_numel(s),), **keep)
        elif choice == "merge" and n >= 2:
            i = self.draw(st.integers(0, n - 2))
            t = s[:i] + (s[i] * s[i + 1],) + s[i + 2:]
            self.emit(f"{x.name}.reshape{t}", t, **keep)
        elif choice == "slice":
            d = self.draw(st.integers(0, n - 1))
            start = self.draw(st.integers(0, max(0, s[d] - 1)))
            step = self.draw(st.sampled_from([1, 2, 3]))
            idx = ", ".join([":"] * d + [f"{start}::{step}"])
            size = len(range(start, s[d], step))
            self.emit(f"{x.name}[{idx}]", s[:d] + (size,) + s[d + 1:], **keep)
        elif choice == "unsqueeze_expand":
            d = self.draw(st.integers(0, n))
            k = self.draw(st.sampled_from([1, 2, 3]))
            t = s[:d] + (k,) + s[d:]
            self.emit(f"{x.name}.unsqueeze({d}).expand{t}", t, **keep)
        elif choice == "select" and all(s):
            d = self.draw(st.integers(0, n - 1))
            i = self.draw(st.integers(-s[d], s[d] - 1))
            self.emit(f"{x.name}.select({d}, {i})", s[:d] + s[d + 1:], **keep)
        elif choice == "flip":
            d = self.draw(st.integers(0, n - 1))
            self.emit(f"{x.name}.flip({d})", s, **keep)
        elif choice == "narrow" and s[-1] >= 2:
            self.emit(f"{x.name}.narrow(-1, 1, {s[-1] - 1})", s[:-1] + (s[-1] - 1,), **keep)
        elif choice == "split" and s[0] >= 2:
            k = s[0] // 2
            self.emit(f"{x.name}.split({k})[-1]", (s[0] - k * ((s[0] - 1) // k),) + s[1:],
                      **keep)
        else:
            self.emit(f"{x.name}.contiguous()", s, **keep)
        self.vals[-1].view_of = x.view_of or x.name   # (flip and contiguous copy: kept too)
        return True

    def concat(self) -> bool:
        a = self.pick(lambda v: len(v.shape) > 0)
        if a is None:
            return False
        b = self.pick(lambda v: v.shape == a.shape and v.kind == a.kind)
        if b is None:
            return False
        d = self.draw(st.integers(0, len(a.shape) - 1))
        keep = dict(kind=a.kind, exact=a.exact and b.exact, narrow=self.narrowest(a, b))
        if self.draw(st.booleans()):
            t = a.shape[:d] + (a.shape[d] * 2,) + a.shape[d + 1:]
            self.emit(f"torch.cat([{a.name}, {b.name}], {d})", t, **keep)
        else:
            t = a.shape[:d] + (2,) + a.shape[d:]
            self.emit(f"torch.stack([{a.name}, {b.name}], {d})", t, **keep)
        return True

    def matmul(self) -> bool:
        """A product of two 2-D floats over their first dim (a weight gradient's form,
        x^T @ y), sometimes plus a second such product (a weight used twice: the sum
        passes/gemm_accumulate makes an addmm into the first); a training program's
        backward makes more of both."""
        x = self.pick(lambda v: v.kind == "float" and len(v.shape) == 2 and v.shape[0] > 0)
        if x is None:
            return False
        y = self.pick(lambda v: v.kind == "float" and len(v.shape) == 2
                      and v.shape[0] == x.shape[0] and x.shape[1] * v.shape[1] <= 200_000)
        if y is None:
            return False
        expr = f"{x.name}.transpose(0, 1) @ {y.name}"
        if self.draw(st.booleans()):
            expr = f"{expr} + torch.tanh({x.name}).transpose(0, 1) @ ({y.name} * 0.5)"
        self.emit(expr, (x.shape[1], y.shape[1]), "float", narrow=self.narrowest(x, y))
        return True

    def inplace(self) -> bool:
        """Update an input in place (inference programs; the input is not a leaf that
        needs grad): later reads see the new value, and the caller's tensor changes."""
        if self.train:
            return False
        targets = [v for v in self.vals[:len(self.inputs)] if v.kind == "float"]
        if not targets:
            return False
        t = self.draw(st.sampled_from(targets))
        src = self.pick(lambda v: v.kind == "float" and not v.terminal
                        and _broadcast(t.shape, v.shape) == t.shape and v.view_of != t.name)
        if src is None:
            return False
        how = self.draw(st.sampled_from(["add_", "mul_", "copy_", "slice"]))
        if how == "slice" and t.shape and t.shape[0] >= 2 and src.shape == t.shape:
            self.body.append(f"{t.name}[::2] = {src.name}[::2] * 0.5")
        elif how == "mul_":
            self.body.append(f"{t.name}.mul_(torch.tanh({src.name}))")
        elif how == "copy_":
            self.body.append(f"{t.name}.copy_({src.name})")
        else:
            self.body.append(f"{t.name}.add_({src.name})")
        for v in self.vals:   # views of the input see the new values too
            v.exact = False
        return True


OPS = {"unary": 10, "binary": 8, "where": 2, "compare": 2, "integer": 2, "logical": 1,
       "cast": 2, "reduce": 4, "full_reduce": 1, "row_op": 2, "view": 4, "concat": 1,
       "inplace": 1, "matmul": 1}


@st.composite
def shapes(draw) -> tuple:
    """A base shape: mostly tiny, sometimes with a size 0 or 1 dim, sometimes large."""
    size = draw(st.sampled_from(["tiny"] * 6 + ["edge"] * 2 + ["large"]))
    n = draw(st.integers(0, 4))
    if size == "tiny":
        return tuple(draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 16])) for _ in range(n))
    if size == "edge":
        return tuple(draw(st.sampled_from([0, 1, 1, 2, 3, 33])) for _ in range(n))
    # large: up to ~2e5 elements, so vectorised, threaded and split loops run
    dims = [draw(st.sampled_from([3, 17, 64, 129, 1000, 4099])) for _ in range(max(1, min(n, 3)))]
    while _numel(dims) > 200_000:
        dims[dims.index(max(dims))] //= 7
    return tuple(dims)


@st.composite
def programs(draw, max_ops: int = 12, train: bool | None = None) -> Program:
    base = draw(shapes())
    if train is None:
        train = draw(st.integers(0, 3)) == 0
    inputs = []
    for i in range(draw(st.integers(1, 3))):
        # broadcast-compatible with the base shape: leading dims dropped, dims set to 1
        drop = draw(st.integers(0, len(base))) if i and draw(st.booleans()) else 0
        shape = tuple(1 if draw(st.integers(0, 4)) == 0 else d for d in base[drop:])
        kind = draw(st.sampled_from(["float"] * 6 + ["int", "bool"])) if i else "float"
        if kind == "float":
            inputs.append(Input(shape, "float32", grad=train,
                                fill=draw(st.sampled_from(["randn", "randn", "uniform"]))))
        elif kind == "int":
            inputs.append(Input(shape, draw(st.sampled_from(["int64", "int32"])), fill="randint"))
        else:
            inputs.append(Input(shape, "bool", fill="bool"))
        # one input in five laid out in another dense order (channels-last, transposed)
        if len(shape) >= 2 and draw(st.integers(0, 4)) == 0:
            order = tuple(draw(st.permutations(range(len(shape)))))
            if order != tuple(range(len(shape))):
                inputs[-1].order = order
    b = Builder(draw, inputs, train)
    long_chain = draw(st.integers(0, 9)) == 0
    n_ops = draw(st.integers(20, 60) if long_chain else st.integers(1, max_ops))
    kinds, weights = list(OPS), list(OPS.values())
    if long_chain:   # a long elementwise chain (the simulation-loop class of issue 19)
        weights = [w if k in ("unary", "binary", "where", "compare") else 0
                   for k, w in zip(kinds, weights)]
    pool = [k for k, w in zip(kinds, weights) for _ in range(w)]
    done = 0
    for _ in range(n_ops * 3):
        if done >= n_ops:
            break
        done += getattr(b, draw(st.sampled_from(pool)))()
    # outputs: the last value, plus a few others; a training program returns floats
    made = b.vals[len(inputs):]
    if not made:
        b.unary() or b.emit("a0 * 1", inputs[0].shape, "float")
        made = b.vals[len(inputs):]
    picks = [made[-1]] + [v for v in made[:-1] if draw(st.integers(0, 3)) == 0]
    if train:
        picks = [v for v in picks if v.kind == "float"] or [
            v for v in made if v.kind == "float"]
        if not picks:
            picks = [b.emit(f"{made[-1].name}.to(torch.float32) * a0.sum()", made[-1].shape,
                            "float")]
    outputs = list(dict.fromkeys(v.name for v in picks))
    tol = {v.name: TOLERANCE[v.narrow] for v in picks if v.kind == "float"}
    seed = draw(st.integers(0, 2**31 - 1))
    return Program(inputs, b.body, outputs, tol, train, seed)
