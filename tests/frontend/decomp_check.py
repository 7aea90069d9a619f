"""Check decompositions against the ops they stand for, the way AOTAutograd uses them.

AOTAutograd applies a decomposition below autograd: the op's backward formula (from
derivatives.yaml) is recorded as usual, then the op itself is replaced by its
decomposition, whose outputs are what the backward later reads. `Checker` reproduces
exactly that: a TorchDispatchMode (below autograd) that, for every op of the table, runs
the op and its decomposition on the same arguments, records any difference in the
outputs (count, shapes, dtypes, values), and hands the decomposition's outputs on. A
sample then runs twice, plainly and under the checker, forward and backward, and the
two runs must agree too (`run_sample`): that catches a decomposition whose outputs are
fine one by one but whose use is not (a layout that a later view reads differently).

Values are compared in float64 with torch's own float64 tolerances (`assert_close`'s
defaults, rtol = atol = 1e-7, the tolerances torch's decomposition tests use): two
algorithms for the same function agree to far better than that on OpInfo's O(1)
samples, and a structural mistake (a wrong output, a wrong axis) is O(1) off.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

RTOL = ATOL = 1e-7

# ops whose values legitimately differ from their decomposition's: uninitialised memory,
# and random draws the decomposition makes differently (torch.compile does not promise
# eager's random stream either); only the structure of their outputs is compared
STRUCTURE_ONLY = frozenset({
    "empty_like.default", "new_empty.default", "bernoulli.default", "rrelu.default",
})


def name_of(op: torch._ops.OpOverload) -> str:
    return f"{op._opname}.{op._overloadname}"


def is_cia(fn: Callable) -> bool:
    """The table entry runs the op's own CompositeImplicitAutograd kernel: it is the op's
    definition, equal to the op by construction."""
    return isinstance(fn, functools.partial) and "cia" in getattr(fn.func, "__qualname__", "")


def relied_on(table: dict) -> list:
    """The entries AOTAutograd can apply to a functional graph: not the op's own composite
    kernel, not an out= or in-place overload (functionalisation removes those first)."""
    return [op for op, fn in table.items()
            if not is_cia(fn) and not op._schema.is_mutable
            and not any(a.alias_info is not None and a.alias_info.is_write
                        for a in op._schema.arguments)]


def compare(expected: Any, got: Any, values: bool = True) -> str | None:
    """Why `got` is not `expected` (None when it is): output count, kinds, shapes, dtypes,
    then values within RTOL/ATOL (NaNs and infinities in the same places)."""
    fe, _ = tree_flatten(expected)
    fg, _ = tree_flatten(got)
    if len(fe) != len(fg):
        return f"{len(fg)} outputs where the op has {len(fe)}"
    for i, (x, y) in enumerate(zip(fe, fg)):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return f"output {i}: {type(y).__name__} where the op gives {type(x).__name__}"
        if not isinstance(x, torch.Tensor):
            if values and x != y and not (x != x and y != y):
                return f"output {i}: {y!r} where the op gives {x!r}"
            continue
        if x.shape != y.shape:
            return f"output {i}: shape {tuple(y.shape)} where the op gives {tuple(x.shape)}"
        if x.dtype != y.dtype:
            return f"output {i}: dtype {y.dtype} where the op gives {x.dtype}"
        if x.layout != torch.strided or y.layout != torch.strided:
            if x.layout != y.layout:
                return f"output {i}: layout {y.layout} where the op gives {x.layout}"
            continue
        if not values or x.numel() == 0:
            continue
        try:
            torch.testing.assert_close(y.detach(), x.detach(), rtol=RTOL, atol=ATOL,
                                       equal_nan=True, check_stride=False)
        except AssertionError as e:
            lines = [ln for ln in str(e).splitlines() if ln.strip()]
            return f"output {i}: " + "; ".join(lines[1:4])
    return None


class Checker(TorchDispatchMode):
    """Below autograd: each op of `table` runs as itself and as its decomposition; the
    decomposition's outputs go on (as in AOTAutograd); differences are recorded."""

    def __init__(self, table: dict):
        super().__init__()
        self.table = table
        self.checked = frozenset(relied_on(table))
        self.hits: set[str] = set()
        self.failures: dict[str, str] = {}   # op name -> the first reason

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in self.checked:
            return func(*args, **kwargs)
        name = name_of(func)
        self.hits.add(name)
        expected = func(*args, **kwargs)
        try:
            got = self.table[func](*args, **kwargs)
        except Exception as e:   # the op ran: its decomposition must too
            self.failures.setdefault(name, f"the decomposition raises {type(e).__name__}: "
                                           f"{str(e)[:200]}")
            return expected
        why = compare(expected, got, values=name not in STRUCTURE_ONLY)
        if why is not None:
            self.failures.setdefault(name, why)
        return got


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def forward_backward(fn: Callable[[], Any], inputs: list[torch.Tensor],
                     wanted: list[bool] | None = None) -> tuple[Any, Any]:
    """fn()'s outputs and the gradients of its floating outputs (fixed random cotangents)
    with respect to `inputs` (the leaves that require grad); an input the outputs do not
    depend on gets zeros. `wanted`: which floating outputs take a cotangent (default:
    those that require grad)."""
    out = fn()
    floats = [o for o in _tensors(out) if o.is_floating_point()]
    if wanted is None:
        wanted = [o.requires_grad for o in floats]
    gen = torch.Generator().manual_seed(0)
    pairs = [(o, torch.randn(o.shape, generator=gen, dtype=o.dtype))
             for o, w in zip(floats, wanted) if w]
    pairs = [(o, c) for o, c in pairs if o.requires_grad]
    if not (pairs and inputs):
        return out, None
    grads = torch.autograd.grad([o for o, _ in pairs], inputs, [c for _, c in pairs],
                                allow_unused=True)
    return out, [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]


@dataclass
class SampleResult:
    hits: set
    failures: dict           # op name (or "end to end") -> reason


def run_sample(table: dict, fn: Callable[[], Any], inputs: list[torch.Tensor],
               values: bool = True) -> SampleResult | None:
    """Run `fn` forward and backward plainly and under a Checker; None when the plain run
    raises (not a sample the op takes)."""
    try:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            ref = forward_backward(fn, inputs)
    except Exception:
        return None
    checker = Checker(table)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            with checker:
                got = forward_backward(fn, inputs)
    except Exception as e:
        checker.failures.setdefault("end to end", f"raises under the decompositions: "
                                                  f"{type(e).__name__}: {str(e)[:200]}")
        return SampleResult(checker.hits, checker.failures)
    if checker.hits and not checker.failures and values and \
            not (checker.hits & STRUCTURE_ONLY):
        why = compare(ref[0], got[0])
        if why is None and ref[1] is not None:
            why = compare(ref[1], got[1])
            why = why and "gradient " + why
        if why is not None:
            checker.failures["end to end"] = why
    return SampleResult(checker.hits, checker.failures)


def is_composite(op: torch._ops.OpOverload) -> bool:
    """The op has a CompositeImplicitAutograd kernel: AOTAutograd may meet it above
    autograd, where its decomposition's own gradient is what the backward computes."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def check_direct(table: dict, op: torch._ops.OpOverload, args: tuple,
                 kwargs: dict) -> SampleResult:
    """One call of `op` checked the ways AOTAutograd may use its decomposition: below
    autograd (the Checker, as `run_sample`: the op's backward formula reads the
    decomposition's outputs), and called in place of the op: the same outputs, and for
    a composite op (met above autograd) the same gradients through the ops it is made
    of. The result's failures: {where: reason} for every difference (none: it is the op
    here); its hits: the op, and the entries its backward reached below autograd."""
    inputs = [t for t in _tensors((args, kwargs)) if t.requires_grad]
    failures = {}
    below = run_sample(table, lambda: op(*args, **kwargs), inputs)
    if below is None:
        return SampleResult(set(), {"sample": "the op itself raises on this sample"})
    failures.update({f"below autograd: {k}": v for k, v in below.failures.items()})
    result = SampleResult(below.hits | {name_of(op)}, failures)
    values = name_of(op) not in STRUCTURE_ONLY
    with torch.no_grad():
        expected = op(*args, **kwargs)
        try:
            got = table[op](*args, **kwargs)
        except Exception as e:
            failures["decomposition called directly"] = \
                f"raises {type(e).__name__}: {str(e)[:200]}"
            return result
    why = compare(expected, got, values=values)
    if why is None and is_composite(op) and inputs and values:
        ref = forward_backward(lambda: op(*args, **kwargs), inputs)
        # the same cotangents for the same outputs: those the op differentiates
        wanted = [o.requires_grad for o in _tensors(ref[0]) if o.is_floating_point()]
        try:
            mine = forward_backward(lambda: table[op](*args, **kwargs), inputs, wanted)
        except Exception as e:
            failures["gradient through the decomposition"] = \
                f"raises {type(e).__name__}: {str(e)[:200]}"
            return result
        why = ref[1] is not None and compare(ref[1], mine[1])
        why = why and "gradient " + why
    if why:
        failures["decomposition called directly"] = why
    return result


def check_meta(table: dict, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> str | None:
    """For an op without a CPU kernel: the decomposition's outputs on the CPU against the
    op's meta kernel, in count, shapes and dtypes (values need the device)."""
    def meta(x):
        return x.detach().to("meta") if isinstance(x, torch.Tensor) else x
    margs = torch.utils._pytree.tree_map(meta, args)
    mkwargs = torch.utils._pytree.tree_map(meta, kwargs)
    expected = op(*margs, **mkwargs)
    with torch.no_grad():
        got = table[op](*args, **kwargs)
    return compare(expected, got, values=False)
