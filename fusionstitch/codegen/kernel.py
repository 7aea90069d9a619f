"""The kernel IR: what one fusion group computes, independent of the target.

Lowering (`codegen/lower.py`) turns a kernel group of a FusionPlan into a
`Kernel`; each target prints it (`targets/triton/printer.py` for GPUs and Triton's
interpreter, `targets/cpp/printer.py` for C++). A Kernel is a small readable value:

    Kernel
      buffers     inputs (read through strides passed at run time) and outputs
                  (contiguous, allocated by the runtime)
      syms        integer parameters (sizes, strides) passed at every launch; the
                  IR never holds a size, so one Kernel fits any batch size. A sym
                  whose binding is a constant (`constant_syms`: a size of a graph of
                  static shapes) has the same value at every launch, and a target may
                  print it as a compile-time constant (the C++ target does: its
                  divisions by sizes become multiplications)
      components  one per independent part (kernel packing: each gets its own
                  range of programs / its own parallel loop)

    Component (the paper's template, [GRID, BLOCK] with S)
      kind "flat"    grid over x in [0, xnumel); `body` computes and stores
      kind "reduce"  grid over x in [0, xnumel); for each x, `loops` run r over
                     [0, rnumel) in order, each producing `Reduce` results that
                     later loops and the epilogue (`body`) read per x
      kind "batch"   block composition (2019 §5.1): grid over the batch entries
                     b in [0, xnumel); each program runs `stages` in order, with a
                     barrier between stages. A stage is a component of its own
                     ("flat", "reduce" or "dot") whose x ranges over the elements
                     of one batch entry (b is fixed in the program); it stores the
                     values later stages read into scratch buffers (`Buffer.scratch`,
                     per batch entry, in global memory: the paper's `S`) and those
                     stages read them back by index. Values read only pointwise are
                     recomputed where read instead (size shrinking).
      kind "scatter" (codegen/scatter.py) for x in [0, xnumel) in order, one thread:
                     `body` stores at positions read from data (which may repeat),
                     adding where `Store.accumulate`; it runs after the components
                     before it (whose copy it updates), never beside them
      kind "dot"     (a stage only) C[x, y] = sum over r of lhs(x, r) * rhs(r, y): a
                     GEMM tile with x < xnumel (m), y < ynumel (n), r < rnumel (k), for
                     each z < znumel (the GEMM entries of one program, when a program
                     takes several so that a reduction across them stays inside it).
                     loops[0] computes the lhs at (x, r) under `xmask & rmask`,
                     loops[1] the rhs at (r, y) under `rmask & ymask`; `body` starts
                     with the `Dot` that sums them over r (fp32) and is the
                     epilogue per (x, y). Lanes outside a mask contribute 0.

Statements are SSA over named variables. Every variable has a compute dtype
(IR names: f32, f64, i64, i32, b8, ...); half types appear only as the dtype
of a `Load` result or of a value cast right before a `Store`. Two variables
exist without a statement: `xmask` (x < xnumel) and, inside loops, `rmask`
(r < rnumel), in dot stages `ymask` (y < ynumel); masks of loads and stores are
variable names or None. Index expressions use the loop variables x, r, y and,
inside a batch component, b (the program's batch entry) and z (dot stages).

Elementwise ops (`Op.op`), with their arity:
    1: neg abs exp exp2 log log2 log1p expm1 sqrt rsqrt sin cos tan tanh sigmoid
       erf floor ceil round trunc sign reciprocal not bitwise_not isnan isinf cast
       asin acos atan sinh cosh asinh acosh atanh erfc log10
    2: add sub mul truediv floordiv remainder fmod pow maximum minimum
       eq ne lt le gt ge and or xor bitwise_and bitwise_or bitwise_xor
       lshift rshift check_index atan2 hypot copysign
    3: where (cond, a, b)
`check_index(k, n)` (i64) is k when 0 <= k < n; otherwise the kernel records an index
error (the runtime raises IndexError after the launch, naming `Kernel.checks`) and the
result is 0, so that no load reads outside its buffer (GPU targets, which cannot raise,
give that clamped index). Every index a lowering reads from data (gather, embedding,
index) goes through it.
`cast` converts its argument to `Op.dtype`; every other op computes in `Op.dtype`,
its arguments already having that dtype (comparisons: arguments share a dtype,
the result is b8). `maximum`/`minimum` propagate NaN as torch does.

Reductions (`Reduce.kind`): sum max min prod (max/min propagate NaN; an empty
reduction gives 0 for sum, 1 for prod, and max/min never see one).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union

from ..ir.symbolic import hint
from .expr import ONE, Expr, Sym, to_source

UNARY = frozenset("neg abs exp exp2 log log2 log1p expm1 sqrt rsqrt sin cos tan tanh sigmoid "
                  "erf floor ceil round trunc sign reciprocal not bitwise_not isnan isinf "
                  "cast asin acos atan sinh cosh asinh acosh atanh erfc log10".split())
BINARY = frozenset("add sub mul truediv floordiv remainder fmod pow maximum minimum eq ne lt "
                   "le gt ge and or xor bitwise_and bitwise_or bitwise_xor lshift rshift "
                   "check_index atan2 hypot copysign".split())
TERNARY = frozenset({"where"})
COMPARISONS = frozenset("eq ne lt le gt ge".split())
REDUCTIONS = frozenset({"sum", "max", "min", "prod"})
# The dtypes a Kernel's buffers and values may have: every target prints these, and only
# these (no complex arithmetic); lowering leaves a group with any other to torch.
DTYPES = frozenset({"f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "b8"})
_INT_RANGE = {"i64": (-2**63, 2**63 - 1), "i32": (-2**31, 2**31 - 1), "i16": (-2**15, 2**15 - 1),
              "i8": (-2**7, 2**7 - 1), "u8": (0, 255)}


def identity(kind: str, dtype: str):
    """The value a reduction starts from (and masked lanes contribute)."""
    if kind in ("max", "min") and dtype in _INT_RANGE:
        lo, hi = _INT_RANGE[dtype]
        return lo if kind == "max" else hi
    return {"sum": 0, "prod": 1, "max": float("-inf"), "min": float("inf")}[kind]


@dataclass(frozen=True)
class Buffer:
    """A kernel argument that points at memory."""

    name: str                  # parameter name in the kernel: in0, in1, out0, ...
    value: str                 # the IR value it holds
    element: int | None        # tuple element of that value (multi-result ops), else None
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[Expr, ...]  # per dim: Sym (inputs, run time) or contiguous (outputs)
    is_output: bool
    # a batch component's on-chip intermediate, spilled per program (block composition's
    # `S`): contiguous, `dtype` is the compute dtype, allocated by the runtime per launch
    scratch: bool = False
    # an input that is a view (a permute of a graph input, run through torch between the
    # groups): the strides expected at launch (`view_strides.expected_strides`); None:
    # row-major for `shape`. An expectation, which the cpu target checks at launch
    expected: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Load:
    var: str
    buffer: str
    index: Expr                # element offset (strides applied)
    mask: str | None
    dtype: str                 # the buffer's dtype


@dataclass(frozen=True)
class Index:
    var: str
    index: Expr                # an index expression as an integer value (Kernel.index_dtype)


@dataclass(frozen=True)
class Constant:
    var: str
    value: Union[int, float, bool]
    dtype: str


@dataclass(frozen=True)
class Op:
    var: str
    op: str
    args: tuple[str, ...]
    dtype: str


@dataclass(frozen=True)
class Store:
    buffer: str
    index: Expr
    value: str                 # a variable of the buffer's dtype
    mask: str | None
    # adds the value to the element (scatter components only: positions read from data
    # may repeat, and each store sees the sums of the earlier ones)
    accumulate: bool = False


@dataclass(frozen=True)
class Dot:
    var: str                   # per (x, y) of a dot stage: sum over r of lhs * rhs
    lhs: str                   # a variable of loops[0], at (x, r)
    rhs: str                   # a variable of loops[1], at (r, y)
    dtype: str                 # f32 (operands are f32 too; accumulation in fp32)


@dataclass(frozen=True)
class Reduce:
    var: str                   # the result, visible after the loop (one value per x)
    kind: str
    value: str                 # the per-(x, r) variable reduced over r
    dtype: str


Stmt = Union[Load, Index, Constant, Op, Store, Reduce, Dot]


@dataclass(frozen=True)
class Loop:
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Component:
    kind: str                  # "flat" | "reduce" | "batch" | "dot" (a stage only)
    xnumel: Expr               # batch: the number of batch entries (programs)
    rnumel: Expr
    loops: tuple[Loop, ...]
    body: tuple[Stmt, ...]     # flat: everything; reduce: the per-x epilogue
    stages: tuple["Component", ...] = ()   # batch: what each program runs, in order
    ynumel: Expr = ONE         # dot: the n extent (x is m, r is k)
    znumel: Expr = ONE         # dot: the GEMM entries z one program runs, one after another


@dataclass(frozen=True)
class Kernel:
    name: str
    buffers: tuple[Buffer, ...]
    syms: tuple[Sym, ...]      # in parameter order
    components: tuple[Component, ...]
    index_dtype: str = "i32"   # i64 when some buffer has 2**31 elements or more
    # how to get each sym's value at launch: ("const", value) or ("stride", buffer, dim)
    bindings: tuple[tuple[str, tuple], ...] = field(default=(), compare=False)
    # buffers that may share memory at run time (an output stored into the input it
    # updates, runtime/inplace.py): the C++ printer drops `__restrict__` from them
    may_alias: frozenset[str] = frozenset()
    # relations between size symbols the kernel is correct under (a graph of symbolic
    # sizes, ir/symbolic.py): what lowering decided from the hints
    guards: frozenset = field(default=frozenset(), compare=False)
    # what its `check_index` ops check, one line each ("gather.default: the index along
    # dim 1 must be in [0, 5)"): the message of the IndexError an index out of range raises
    checks: tuple[str, ...] = field(default=(), compare=False)

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if not b.is_output and not b.scratch)

    @property
    def scratch(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.scratch)

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.is_output)


def constant_syms(k: Kernel) -> dict[str, int]:
    """The syms of `k` that have the same value at every launch, by name: those whose
    binding is ("const", v), the sizes of a graph of static shapes (the runtime passes v
    at each launch: runtime/launch.py). Syms bound to input strides ("stride", read at
    each launch) or to a symbolic program's size expressions ("expr") are absent, as
    are the syms of a Kernel without bindings (built by hand: its caller passes them)."""
    return {name: int(how[1]) for name, how in k.bindings if how and how[0] == "const"}


def stmt_text(s: Stmt) -> str:
    if isinstance(s, Load):
        m = f", mask={s.mask}" if s.mask else ""
        return f"{s.var}: {s.dtype} = load {s.buffer}[{to_source(s.index)}]{m}"
    if isinstance(s, Index):
        return f"{s.var}: index = {to_source(s.index)}"
    if isinstance(s, Constant):
        return f"{s.var}: {s.dtype} = {s.value!r}"
    if isinstance(s, Op):
        return f"{s.var}: {s.dtype} = {s.op}({', '.join(s.args)})"
    if isinstance(s, Store):
        m = f", mask={s.mask}" if s.mask else ""
        op = "+=" if s.accumulate else "="
        return f"store {s.buffer}[{to_source(s.index)}] {op} {s.value}{m}"
    if isinstance(s, Reduce):
        return f"{s.var}: {s.dtype} = reduce_{s.kind}({s.value}) over r"
    if isinstance(s, Dot):
        return f"{s.var}: {s.dtype} = dot({s.lhs}, {s.rhs}) over r"
    raise TypeError(s)


def kernel_text(k: Kernel) -> str:
    """A readable listing of the kernel IR (debug dumps, tests)."""
    lines = [f"kernel {k.name}({', '.join(b.name for b in k.buffers)}; "
             f"{', '.join(s.name for s in k.syms)}) index {k.index_dtype}"]
    for b in k.buffers:
        role = "out" if b.is_output else "scratch" if b.scratch else "in"
        el = f".{b.element}" if b.element is not None else ""
        lines.append(f"  {role} {b.name} = %{b.value}{el}: {b.dtype}{list(b.shape)}")
    for i, c in enumerate(k.components):
        if c.kind == "batch":
            lines.append(f"  component {i}: batch b < {to_source(c.xnumel)} "
                         f"(one program per batch entry)")
            for j, st in enumerate(c.stages):
                lines.append(f"    stage {j}: {_extent(st)}")
                lines.extend(_body_text(st, "      "))
            continue
        lines.append(f"  component {i}: {_extent(c)}")
        lines.extend(_body_text(c, "    "))
    return "\n".join(lines)


def _extent(c: Component) -> str:
    text = f"{c.kind} x < {to_source(c.xnumel)}"
    if c.kind == "dot":
        text += f", y < {to_source(c.ynumel)}"
        if c.znumel != ONE:
            text += f", z < {to_source(c.znumel)}"
    if c.kind in ("reduce", "dot"):
        text += f", r < {to_source(c.rnumel)}"
    return text


def _body_text(c: Component, pad: str) -> list[str]:
    lines = []
    if c.kind == "dot":
        for title, loop in zip(("lhs at (x, r):", "rhs at (r, y):"), c.loops):
            lines.append(pad + title)
            lines.extend(pad + "  " + stmt_text(s) for s in loop.body)
        lines.append(pad + "per (x, y):")
    else:
        for j, loop in enumerate(c.loops):
            lines.append(f"{pad}loop {j} over r:")
            lines.extend(pad + "  " + stmt_text(s) for s in loop.body)
        if c.loops:
            lines.append(pad + "per x:")
    lines.extend(pad + ("  " if c.loops else "") + stmt_text(s) for s in c.body)
    return lines


def template(k: Kernel, persistent: Callable[[Component], bool] | None = None) -> str:
    """The implementation template of a kernel in the paper's spirit, one part per component:
    which dims map to the grid (x, or b: one program per batch entry), which a program loops
    over (r), in how many passes; a batch component lists its stages, `S` marking those
    that keep their results for later stages (scratch). `persistent` (from the target)
    says which reduce components keep their row in registers at the lowering-time sizes
    instead of looping over it: they read `persistent r<N xK` (K passes over one row); it
    may name the way instead (a string such as "split 8 loop": rows spread over 8
    programs each, targets/triton/split.py)."""
    def fits(c: Component):
        return persistent is not None and persistent(c)

    def how(c: Component) -> str:
        way = fits(c)
        return way if isinstance(way, str) else "persistent" if way else "loop"
    scratch = {b.name for b in k.scratch}
    parts = []
    for c in k.components:
        if c.kind == "flat":
            parts.append(f"grid x<{to_source(c.xnumel)}")
        elif c.kind == "scatter":
            parts.append(f"serial x<{to_source(c.xnumel)} scatter")
        elif c.kind == "batch":
            stages = []
            for st in c.stages:
                text = f"stage {st.kind} x<{to_source(st.xnumel)}"
                if st.kind == "dot":
                    text += f" y<{to_source(st.ynumel)} r<{to_source(st.rnumel)}"
                    if st.znumel != ONE:
                        text += f" z<{to_source(st.znumel)}"
                elif st.kind == "reduce":
                    # a stage never splits: only its persistence shows
                    text += (f"{' persistent' if how(st) == 'persistent' else ''} "
                             f"r<{to_source(st.rnumel)} "
                             f"x{len(st.loops)}")
                if any(isinstance(s, Store) and s.buffer in scratch for s in _stmts(st)):
                    text += " S"
                stages.append(text)
            parts.append(f"grid b<{to_source(c.xnumel)}, " + ", ".join(stages))
        else:
            parts.append(f"grid x<{to_source(c.xnumel)}, {how(c)} r<{to_source(c.rnumel)} "
                         f"x{len(c.loops)}")
    text = " | ".join(parts)
    return f"packing[{text}]" if len(parts) > 1 else f"[{text}]"


def bodies(c: Component) -> list[tuple[Stmt, ...]]:
    """The statement lists of a component in the order a program runs them: its loops,
    then its per-x body; a batch component's stages one after another."""
    if c.kind == "batch":
        return [body for st in c.stages for body in bodies(st)]
    return [loop.body for loop in c.loops] + [c.body]


def _stmts(c: Component):
    for body in bodies(c):
        yield from body


def hinted_value(e, env=None) -> int:
    """An index expression's value with every Sym at its lowering-time value (a symbolic
    size's hint: estimates only)."""
    from . import expr as E
    if isinstance(e, E.Const):
        return e.value
    if isinstance(e, E.Sym):
        return hint(e.value)
    if isinstance(e, E.Mul):
        out = 1
        for f in e.factors:
            out *= hinted_value(f)
        return out
    if isinstance(e, E.Add):
        return sum(hinted_value(t) for t in e.terms)
    raise TypeError(f"not a size expression: {e!r}")


# the kernel ops of tens of instructions a vector (a libmvec or preamble call):
# recomputing them costs what a store and a load of the value would several times over
# (fusion/profit.py), and a loop calling them pays for splitting its index into rows
# (targets/cpp/flat.py's COSTLY_OPS)
TRANSCENDENTAL_OPS = frozenset((
    "exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "tan", "tanh", "erf",
    "sigmoid", "pow", "atan", "atan2", "asin", "acos", "sinh", "cosh", "asinh", "acosh",
    "atanh", "erfinv", "lgamma", "erfc", "log10", "hypot"))


def arithmetic_work(k: Kernel,
                    reused: Callable[[Component], list[frozenset[str]] | None] | None = None,
                    only: frozenset[str] | None = None) -> int:
    """Arithmetic ops the kernel executes (each Op statement once per point it runs at,
    masks and casts not counted): compared with the group's own op count, it shows how
    much thread composition recomputes (concat branches, values re-derived per loop).
    A statement of a loop over r that does not vary with r (`varies_with_r`: a row's
    mean or pivot) runs once per x. `reused` (the target's `Target.reused_values`) gives,
    per loop of a component, the variables the target does not compute there (the cpu
    target reads them back from a row buffer): they cost nothing there. `only`: count
    these ops alone (`TRANSCENDENTAL_OPS`)."""
    def count(stmts, skip=frozenset()) -> int:
        return sum(1 for s in stmts if isinstance(s, Op) and s.op not in ("and", "cast")
                   and s.var not in skip and (only is None or s.op in only))

    def work_of(c: Component) -> int:
        x, r = hinted_value(c.xnumel), hinted_value(c.rnumel)
        if c.kind == "batch":
            return x * sum(work_of(st) for st in c.stages)
        if c.kind == "dot":
            y, z = hinted_value(c.ynumel), hinted_value(c.znumel)
            return z * (count(c.loops[0].body) * x * r + count(c.loops[1].body) * r * y
                        + (count(c.body) + 2 * r) * x * y)
        skip = (reused(c) if reused is not None else None) or [frozenset()] * len(c.loops)
        per_r = per_x = 0
        for lp, sk in zip(c.loops, skip):
            moving = varies_with_r(lp.body)
            per_r += count(lp.body, sk | {s.var for s in lp.body if hasattr(s, "var")
                                          and s.var not in moving})
            per_x += count(lp.body, sk | moving)
        return (count(c.body) + per_x) * x + per_r * x * r
    return sum(work_of(c) for c in k.components)


def has_effect(s) -> bool:
    """Whether statement `s` must run even when no statement reads its value: stores,
    reductions, dots, and index checks (an index out of range raises, as in eager, also
    where the checked index adds nothing to an address: a gather along a dim of size 1).
    Every pass or printer that drops unread statements keeps these."""
    return isinstance(s, (Store, Reduce, Dot)) or isinstance(s, Op) and s.op == "check_index"


def varies_with_r(body, sources=("r", "rmask")) -> frozenset[str]:
    """The variables of a loop over r that depend on r (its index, rmask, or such a
    variable); the others are the same for every r of a row (a row's pivot, its mean from
    an earlier loop): a target may compute them once per x, as the C++ compiler hoists
    them out of the loop. `sources`: what varies to begin with (a target whose rmask is
    the constant true, or that reads some values per r from row buffers, says so)."""
    from . import expr as E
    moving = set(sources)
    for s in body:
        if isinstance(s, (Reduce, Dot)):
            reads = moving
        elif isinstance(s, Op):
            reads = set(s.args)
        elif isinstance(s, (Load, Index)):
            reads = E.free_vars(s.index) | ({s.mask} if getattr(s, "mask", None) else set())
        else:
            continue
        if reads & moving:
            moving.add(s.var)
    return frozenset(moving - {"r"})
