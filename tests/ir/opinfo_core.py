"""OpInfo-style cases, the machinery: input specs, OpCase, CASES and the case builders.

The cases themselves are in opinfo_elementwise.py and opinfo_cases.py.

How each IR op is called, and the same thing in torch:

Imported by `tests/ir/test_ops.py` as `from opinfo_cases import CASES` (pytest puts
this folder on sys.path: the tests folders have no __init__.py).

A case (`OpCase`) says, for one IR op (`add.Tensor`):
- `make(dtype, generator) -> (ir_inputs, ref_inputs, call)`: random inputs from a
  seeded generator; `ir_inputs` become graph parameters, `call(*params) -> Args`
  builds the node's arguments in aten-schema order (params where tensors go,
  literals elsewhere); `ref_inputs` (usually the same tensors) feed `ref`.
- `ref(*ref_inputs)`: the same computation through torch's *public* API
  (`torch.add(x, y, alpha=2)`, `F.gelu(x, approximate="tanh")`, autograd for
  the backward ops) -- never the aten overload under test.
- `dtypes`: the dtypes it runs in. Float cases run in float32, float16 and
  bfloat16; integer / bool / complex cases name their dtype.

Most cases are written with `case(op, variant, [input specs], call, ref)`, the
input specs being small `(dtype, generator) -> tensor` factories below.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

FLOATS = ("float32", "float16", "bfloat16")
F32 = ("float32",)

# --- argument lists --------------------------------------------------------------------


class Args:
    """Positional and keyword arguments of one node, in aten-schema order."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"Args({self.args!r}, {self.kwargs!r})"


def _all(*p):
    return Args(*p)


# --- input specs: (dtype, generator) -> tensor ------------------------------------------

Spec = Callable[[torch.dtype, torch.Generator], torch.Tensor]


def _uniform(shape, lo, hi, g) -> torch.Tensor:
    return torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo


def Fl(*shape, lo=-2.0, hi=2.0, dtype=None) -> Spec:
    """Uniform floats in [lo, hi), in the case dtype (or `dtype`)."""
    return lambda dt, g: _uniform(shape, lo, hi, g).to(dtype or dt)


def Pos(*shape, lo=0.25, hi=3.0, dtype=None) -> Spec:
    """Positive floats (domain of log, sqrt, ...)."""
    return Fl(*shape, lo=lo, hi=hi, dtype=dtype)


def NZ(*shape, lo=0.5, hi=2.0, dtype=None) -> Spec:
    """Floats away from zero, both signs (divisors, reciprocal)."""
    def make(dt, g):
        mag = _uniform(shape, lo, hi, g)
        sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
        return (mag * sign).to(dtype or dt)
    return make


def IF(*shape, lo=-3, hi=4, dtype=None) -> Spec:
    """Integer-valued floats (ties for comparisons, exact zeros)."""
    return lambda dt, g: torch.randint(lo, hi, shape, generator=g).to(dtype or dt)


def Halves(*shape) -> Spec:
    """Multiples of 0.5 (round-half-to-even)."""
    return lambda dt, g: (torch.randint(-8, 9, shape, generator=g) * 0.5).to(dt)


def Int(*shape, lo=-5, hi=6, dtype=None, nonzero=False) -> Spec:
    """Integers in [lo, hi), in the case dtype (or `dtype`)."""
    def make(dt, g):
        t = torch.randint(lo, hi, shape, generator=g)
        if nonzero:
            t = torch.where(t == 0, torch.ones_like(t), t)
        return t.to(dtype or dt)
    return make


def Idx(*shape, n: int, lo: int = 0) -> Spec:
    """int64 indices in [lo, n)."""
    return lambda dt, g: torch.randint(lo, n, shape, generator=g)


def Bool(*shape, p=0.5) -> Spec:
    return lambda dt, g: torch.rand(shape, generator=g) < p


def Special(*shape, dtype=None) -> Spec:
    """Floats with NaN, +-inf and +-0 mixed in at random positions."""
    def make(dt, g):
        t = _uniform(shape, -3.0, 3.0, g)
        flat = t.view(-1)
        specials = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0, math.nan],
                                dtype=torch.float64)
        k = min(flat.numel(), specials.numel())
        pos = torch.randperm(flat.numel(), generator=g)[:k]
        flat[pos] = specials[:k]
        return t.to(dtype or dt)
    return make


def Cplx(*shape) -> Spec:
    return lambda dt, g: torch.randn(shape, generator=g, dtype=torch.complex64)


def UniqueIdx(rows: int, k: int, n: int) -> Spec:
    """(rows, k) int64 indices, unique within a row, in [0, n) (scatter without races)."""
    return lambda dt, g: torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(rows)])


def Perm(n: int, k: int | None = None) -> Spec:
    """Unique int64 indices in [0, n)."""
    return lambda dt, g: torch.randperm(n, generator=g)[:k]


def Const(value) -> Spec:
    return lambda dt, g: torch.as_tensor(value).clone()


# --- known failures --------------------------------------------------------------------


class InferTypeMismatch(AssertionError):
    """`infer_type`'s type for the node differs from what the op returns on CPU."""


class InputMutated(AssertionError):
    """Running the one-op graph changed one of the caller's input tensors."""


@dataclass(frozen=True)
class Xfail:
    """A known bug in the code under test: the case must fail with `raises` (strict)."""

    reason: str
    raises: type[BaseException] = AssertionError
    dtypes: tuple[str, ...] | None = None   # None: every dtype of the case

    def applies(self, dtype: str) -> bool:
        return self.dtypes is None or dtype in self.dtypes


# --- cases -----------------------------------------------------------------------------

Make = Callable[[torch.dtype, torch.Generator], tuple[list, list, Callable[..., Args]]]


@dataclass(frozen=True)
class OpCase:
    op: str                      # IR op name (`add.Tensor`)
    variant: str                 # what this case exercises (`bcast`, `0d`, `int`, ...)
    make: Make
    ref: Callable[..., Any]      # torch public API, on ref_inputs
    dtypes: tuple[str, ...] = FLOATS
    tol: dict = field(default_factory=dict)   # dtype name -> (rtol, atol), overrides defaults
    check_values: bool = True    # False for empty/empty_like: only shape and dtype
    xfail: "Xfail | None" = None  # known bug in the code under test (strict xfail)
    pass_dtype: bool = False     # ref takes the case dtype first (creation ops)

    @property
    def id(self) -> str:
        return f"{self.op}-{self.variant}"

    def seed(self, dtype: str) -> int:
        return zlib.crc32(f"{self.id}-{dtype}".encode())


CASES: list[OpCase] = []


def add_case(op, variant, make, ref, **kw) -> None:
    CASES.append(OpCase(op, variant, make, ref, **kw))


def case(op: str, variant: str, inputs: list[Spec], call: Callable[..., Args] | None = None,
         ref: Callable | None = None, **kw) -> None:
    """A case whose IR inputs and reference inputs are the same tensors."""
    call = call or _all

    def make(dt, g):
        ts = [s(dt, g) for s in inputs]
        return ts, ts, call

    add_case(op, variant, make, ref, **kw)


def source_case(op: str, variant: str, call: Callable[..., Args], ref: Callable[..., Any],
                inputs: list[Spec] = (), **kw) -> None:
    """A creation op: `call(dtype, *params)` and `ref(dtype, *tensors)` get the case dtype."""
    def make(dt, g):
        ts = [s(dt, g) for s in inputs]
        return ts, ts, (lambda *p: call(dt, *p))

    add_case(op, variant, make, ref, pass_dtype=True, **kw)


def grad_of(fn: Callable, primals: list[torch.Tensor], grad: torch.Tensor, wrt=(0,)):
    """vjp through the public op (how autograd reaches aten's backward kernels)."""
    xs = [t.detach().clone().requires_grad_(i in wrt) for i, t in enumerate(primals)]
    out = fn(*xs)
    gs = torch.autograd.grad(out, [xs[i] for i in wrt], grad)
    return gs[0] if len(wrt) == 1 else tuple(gs)


