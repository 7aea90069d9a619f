"""Lowering: one kernel group of a FusionPlan -> a target-independent `Kernel`.

Every op is a function from an index to a value (XLA's loop fusion, Inductor's
loop-level IR): a consumer asks for its operand at some multi-index, views and
broadcasts only rewrite that index, elementwise ops combine their operands'
values there, and values from outside the group are loads through strides. A
value is computed where it is read (registers), once per (value, index, mask)
and scope, so recomputation happens only across loops (the paper's size
shrinking: a long row is looped over, never kept on chip whole).

A component with reductions becomes a "reduce" component: reductions are
layered (a reduction that reads another one runs in a later loop over the row),
per-element outputs are stored by a last loop and per-row outputs after the
loops. A reduction's result may only be read at its own row (index x); a group
that would read it elsewhere is not generated (`Unsupported`), and the planner
leaves it split.

Lowering decides no schedule: a plan's group comes with the one its plan decided
(`Schedule`, schedule/propagate.py; fusion/lowered.py passes it), and only a group
without a plan (a candidate the planner tries) is scheduled here, by the planner's own
function (`group_schedule`).

A component around small GEMMs (a "batch" space) is lowered by `codegen/batch.py`
into stages run by one program per batch entry (block composition); values one
stage produces for later ones go through scratch buffers (`Lowerer.staged`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

from ..ir.graph import CONSTANT, PARAMETER, Graph, Ref, TensorType, TupleType
from ..ir.ops import TWO_PASS_REDUCTIONS
from ..ir.symbolic import FloatDim, hint, is_symbolic, make, recording, replay
from ..schedule.propagate import (Inconsistent, SIMPLE_REDUCTIONS, Schedule, escaping_values,
                                  group_schedule)
from ..schedule.propagate import type_numel as _numel
from . import expr as E
from .pieces import split_pieces
from .view_strides import expected_strides
from .kernel import (DTYPES, Buffer, Component, Constant, Index, Kernel, Load, Loop, Op,
                     Reduce, Store)

INT32_LIMIT = 2**31 - 1
HALF = frozenset({"f16", "bf16"})


class Unsupported(Exception):
    """The group cannot be generated; the message names the op and why."""


def compute_dtype(dtype: str) -> str:
    """Half types compute in fp32 (loaded up, stored down); others as they are."""
    return "f32" if dtype in HALF else dtype


@dataclass
class Scope:
    stmts: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)


class Lowerer:
    """Builds one Kernel; op rules (`lowerings.py`) call back into it."""

    def __init__(self, graph: Graph, names, kernel_name: str):
        self.graph = graph
        self.members = set(names)
        self.name = kernel_name
        self.escaping = escaping_values(graph, names)
        self.inputs: dict[tuple, Buffer] = {}
        self.outputs: list[Buffer] = []
        self.syms: dict = {}      # "ks<value>" | ("dim", expr) | stride name -> Sym
        self.bindings: dict[str, tuple] = {}
        self.checks: dict[str, None] = {}   # what the check_index ops check (Kernel.checks)
        self.dtype_of: dict[str, str] = {"xmask": "b8", "rmask": "b8", "ymask": "b8"}
        self.counter = 0
        self.scope = Scope()
        self.mask: str | None = "xmask"
        self.reduced: dict[tuple, str] = {}     # (node, element) -> per-x result var
        self.single_row = False
        self.canonical = None
        self.choose_orders = True     # layout copies: try each order (lower_group)
        # batch components: (node, element) -> the buffer its stage stored it in, and
        # the number of batch entries (programs) that must each read only their own
        self.staged: dict[tuple, Buffer] = {}
        self.scratch: list[Buffer] = []
        self.batch = 1            # programs of the batch component being lowered
        self.gemm_batch = 1       # its GEMMs' batch entries (a program may run several)
        self.extent: dict[str, int] = {}   # loop variable -> its range in the current stage
        # each size against the limit, not their max: symbolic sizes then guard the limit
        # only, not which of them is the largest (ir/symbolic.py)
        big = any(_numel(graph[n].type) > INT32_LIMIT for n in names)
        self.index_dtype = "i64" if big else "i32"

    # -- names, syms, buffers -------------------------------------------------------
    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def size(self, v: int) -> E.Expr:
        """A size as an expression: 0 and 1 stay constants (they decide broadcasting).

        A symbolic size (`ir.symbolic.Dim`) is a sym of its own expression, bound at each
        launch to the expression's value ("expr" binding): sizes equal at the hints by
        coincidence stay two syms. A concrete size is a sym bound to its value ("const"),
        one per value, so that the IR holds no size either way (a target may still print a
        "const" sym as a compile-time constant: `kernel.constant_syms`)."""
        if v in (0, 1):
            # (a symbolic size equal to 0 or 1 at the hint: the comparison recorded that
            # guard, and the constant is the plain int, never the Dim, which prints as
            # its expression)
            return E.Const(hint(v))
        if is_symbolic(v):
            key = ("dim", v.expr)
            sym = self.syms.get(key)
            if sym is None:
                sym = self.syms[key] = E.Sym(f"ks{len(self.syms)}", v)
                self.bindings[sym.name] = ("expr", v.expr)
            return sym
        name = f"ks{v}"
        sym = self.syms.get(name)
        if sym is None:
            sym = self.syms[name] = E.Sym(f"ks{len(self.syms)}", v)
            self.bindings[sym.name] = ("const", v)
        return sym

    def num(self, v: int) -> E.Expr:
        """An integer of the index arithmetic (a slice's start, a piece's offset): a
        constant, or the sym of a symbolic one (`size`)."""
        return self.size(v) if is_symbolic(v) else E.Const(v)

    def sizes(self, shape) -> tuple[E.Expr, ...]:
        return tuple(self.size(d) for d in shape)

    def input_buffer(self, value: str, element: int | None, t: TensorType) -> Buffer:
        key = (value, element)
        buf = self.inputs.get(key)
        if buf is None:
            name = f"in{len(self.inputs)}"
            strides = []
            for d, n in enumerate(t.shape):
                if n == 1:
                    strides.append(E.ZERO)
                    continue
                s = E.Sym(f"{name}_s{d}", 0)
                self.syms[s.name] = s
                self.bindings[s.name] = ("stride", name, d)
                strides.append(s)
            expected = expected_strides(self.graph, value, element)
            buf = self.inputs[key] = Buffer(name, value, element, t.dtype, t.shape,
                                            tuple(strides), False, expected=expected)
        return buf

    def output_buffer(self, value: str, element: int | None, t: TensorType) -> Buffer:
        sizes = self.sizes(t.shape)
        strides = tuple(E.product(sizes[d + 1:]) for d in range(len(sizes)))
        buf = Buffer(f"out{len(self.outputs)}", value, element, t.dtype, t.shape, strides, True)
        self.outputs.append(buf)
        return buf

    def scratch_buffer(self, value: str, element: int | None, t: TensorType) -> Buffer:
        """A contiguous per-launch buffer of `t`'s shape in its compute dtype."""
        sizes = self.sizes(t.shape)
        strides = tuple(E.product(sizes[d + 1:]) for d in range(len(sizes)))
        buf = Buffer(f"s{len(self.scratch)}", value, element, compute_dtype(t.dtype), t.shape,
                     strides, False, scratch=True)
        self.scratch.append(buf)
        return buf

    def snapshot(self) -> dict:
        """Everything lowering a component may change, to try one and take it back."""
        return {k: v.copy() if isinstance(v, (dict, list, set)) else v
                for k, v in vars(self).items()}

    def restore(self, state: dict) -> None:
        vars(self).update({k: v.copy() if isinstance(v, (dict, list, set)) else v
                           for k, v in state.items()})

    # -- statements ------------------------------------------------------------------
    def emit(self, stmt, key=None) -> str:
        if key is not None:
            hit = self.scope.memo.get(key)
            if hit is not None:
                return hit
        self.scope.stmts.append(stmt)
        var = getattr(stmt, "var", None)
        if key is not None and var is not None:
            self.scope.memo[key] = var
        return var

    def const(self, value, dtype: str) -> str:
        dtype = compute_dtype(dtype)
        if isinstance(value, FloatDim):   # n / (n - 1) of sizes: computed from their syms
            return self.cast(self.size_number(value.expr, value.hints), dtype)
        if is_symbolic(value):      # a size used as a number (a mean's count): a sym
            return self.cast(self.index(self.size(value)), dtype)
        if dtype == "b8":
            value = bool(value)
        elif not dtype.startswith("f"):
            value = int(value)
        else:
            value = float(value)
        key = ("const", repr(value), dtype)
        var = self.emit(Constant(self.fresh("c"), value, dtype), key)
        self.dtype_of[var] = dtype
        return var

    def op(self, op: str, args, dtype: str) -> str:
        args = tuple(args)
        var = self.emit(Op(self.fresh(), op, args, dtype), ("op", op, args, dtype))
        self.dtype_of[var] = dtype
        return var

    def checked_index(self, k: str, size, what: str) -> str:
        """Index variable `k` (any integer dtype) as an i64 checked against [0, size):
        out of range, the kernel raises IndexError(`what`) after its launch instead of
        reading outside the buffer (kernel.py's `check_index`)."""
        self.checks.setdefault(f"{what} must be in [0, {size})")
        return self.op("check_index", (self.cast(k, "i64"), self.const(size, "i64")), "i64")

    def size_number(self, e, hints: dict) -> str:
        """A variable holding the value of size expression `e` (sympy, of the symbols whose
        hints are `hints`): integer parts are syms (i64), float arithmetic is f64, as the
        host computes it in Python before torch reads it as a scalar."""
        if e.is_integer:
            if e.is_number:
                return self.const(int(e), "i64")
            at = int(e.xreplace({s: hints[s] for s in e.free_symbols}))
            return self.index(self.size(make(at, e)))
        if e.is_number:
            return self.const(float(e), "f64")
        kind = type(e).__name__
        parts = [self.cast(self.size_number(a, hints), "f64") for a in e.args]
        if kind in ("IntTrueDiv", "FloatTrueDiv") and len(parts) == 2:
            return self.op("truediv", parts, "f64")
        if kind == "ToFloat" and len(parts) == 1:
            return parts[0]
        if kind in ("Add", "Mul"):
            acc = parts[0]
            for p in parts[1:]:
                acc = self.op("add" if kind == "Add" else "mul", (acc, p), "f64")
            return acc
        raise Unsupported(f"a float of the sizes ({e}): no kernel rule for {kind}")

    def cast(self, var: str, dtype: str) -> str:
        dtype = compute_dtype(dtype)
        if self.dtype_of[var] == dtype:
            return var
        return self.op("cast", (var,), dtype)

    def index(self, e: E.Expr) -> str:
        var = self.emit(Index(self.fresh("i"), e), ("index", e))
        self.dtype_of[var] = "i64"
        return var

    def load(self, buf: Buffer, idx: tuple[E.Expr, ...]) -> str:
        offset = E.add(*(E.mul(i, s) for i, s in zip(idx, buf.strides)))
        var = self.emit(Load(self.fresh("ld"), buf.name, offset, self.mask, buf.dtype),
                        ("load", buf.name, offset, self.mask))
        self.dtype_of[var] = buf.dtype
        return self.cast(var, compute_dtype(buf.dtype))

    @contextlib.contextmanager
    def masked(self, cond: str | None):
        """Evaluate under `cond` too (a branch of a concat or pad): loads stay in bounds."""
        saved = self.mask
        if cond is not None:
            self.mask = cond if saved is None else self.op("and", (saved, cond), "b8")
        try:
            yield
        finally:
            self.mask = saved

    # -- values ----------------------------------------------------------------------
    def value(self, name: str, idx: tuple[E.Expr, ...], element: int | None = None) -> str:
        """The value of node `name` (tuple element `element`) at multi-index `idx`."""
        node = self.graph[name]
        t = node.type if element is None else node.type.elements[element]
        if name not in self.members or node.op in (PARAMETER, CONSTANT):
            return self.load(self.input_buffer(name, element, t), idx)
        staged = self.staged.get((name, element))
        if staged is not None:
            from .batch import read_staged
            return read_staged(self, staged, idx)
        if node.op in SIMPLE_REDUCTIONS:
            return self.reduction_result(name, idx, element)
        key = ("value", name, element, idx, self.mask)
        hit = self.scope.memo.get(key)
        if hit is not None:
            return hit
        from .lowerings import lower_node
        var = lower_node(self, node, idx, element)
        self.scope.memo[key] = var
        return var

    def reduction_result(self, name: str, idx, element) -> str:
        node = self.graph[name]
        t = node.type if element is None else node.type.elements[element]
        entry = self.reduced.get((name, element))
        if entry is None:
            raise Unsupported(f"%{name} ({node.op}) is read before its loop ran")
        flat = E.ravel(*strip_unit_dims(idx, self.sizes(t.shape)))
        at_row = flat == E.Var("x") or (self.single_row and isinstance(flat, E.Const))
        if not at_row:
            raise Unsupported(f"%{name} ({node.op}) is read at another row than its own "
                              f"(index {E.to_source(flat)})")
        var, _, finish = entry
        if finish is None:
            return var
        key = ("finish", name, element)
        hit = self.scope.memo.get(key)
        if hit is None:
            hit = self.scope.memo[key] = finish(self, var)
        return hit


def strip_unit_dims(idx, sizes):
    """Drop size-1 dims (their index is 0) so that unravel/ravel pairs match."""
    keep = [k for k, s in enumerate(sizes) if not (isinstance(s, E.Const) and s.value == 1)]
    return tuple(idx[k] for k in keep), tuple(sizes[k] for k in keep)


def unravel_shape(L: Lowerer, base: E.Expr, shape) -> tuple[E.Expr, ...]:
    """Multi-index of linear index `base` in `shape` (size-1 dims give 0)."""
    sizes = L.sizes(shape)
    live = [k for k, d in enumerate(shape) if d != 1]
    digits = E.unravel(base, tuple(sizes[k] for k in live))
    out = [E.ZERO] * len(shape)
    for k, d in zip(live, digits):
        out[k] = d
    return tuple(out)


def tensor_parts(L: Lowerer, name: str):
    t = L.graph[name].type
    if isinstance(t, TupleType):
        return [(i, e) for i, e in enumerate(t.elements) if e is not None]
    return [(None, t)]


def _store(L: Lowerer, name: str, element, t: TensorType, idx, var: str | None = None) -> None:
    buf = L.output_buffer(name, element, t)
    var = L.value(name, idx, element) if var is None else var
    var = L.op("cast", (var,), t.dtype) if L.dtype_of[var] != t.dtype else var
    offset = E.add(*(E.mul(i, s) for i, s in zip(idx, buf.strides)))
    L.scope.stmts.append(Store(buf.name, offset, var, L.mask))


def _lower_flat(L: Lowerer, names: list[str], numel: int) -> list[Component]:
    """A flat component; outputs that are layout copies of one value (layout_copies.py)
    are stored from one computation of it, in the order of the leader that moves the
    fewest cache lines. Outputs with fewer elements than the space (a batch norm's
    per-channel statistics beside its normalised values) get a component of their own
    per size: masked into the large loop (`x < 48`), they made pieces.py split it at
    that bound, and the rest of the loop, its x shifted by 48, read [4, 48, 65, 65] by
    a division and a remainder of x + 48 per element (mobilenet_v2's training forward:
    17x Inductor's time for that group)."""
    from .layout_copies import access_cost, copy_classes
    parts = [(name, element, t) for name in names if name in L.escaping
             for element, t in tensor_parts(L, name)]
    full, fewer = [], {}
    for part in parts:
        t = part[2]
        if t.numel == 0 or not t.numel < numel:
            full.append(part)
        else:
            fewer.setdefault(t.numel, []).append(part)
    comps = []
    if full or not fewer:
        classes = copy_classes(L, full, numel)
        leaders = {c: c.members[0] for c in classes}
        for c in classes if L.choose_orders else ():
            tried = []
            for leader in c.members:
                state = L.snapshot()
                comp = _flat_component(L, full, numel, {**leaders, c: leader})
                tried.append((access_cost(L, comp, hint(numel)), len(tried), leader))
                L.restore(state)
            leaders[c] = min(tried)[2]
        comps.append(_flat_component(L, full, numel, leaders))
    for size, group in fewer.items():
        comps.append(_flat_component(L, group, size, {}))
    return comps


def _flat_component(L: Lowerer, parts, numel: int, leaders: dict) -> Component:
    from .layout_copies import copy_index, root_index
    L.scope = Scope()
    L.mask = "xmask"
    x = E.Var("x")
    of = {m: c for c in leaders for m in c.members}
    root_at: dict = {}      # class -> (the root's index, its value there)
    for name, element, t in parts:
        if t.numel == 0:            # nothing to store, but a reader needs the empty tensor
            L.output_buffer(name, element, t)
            continue
        c = of.get(name) if element is None else None
        if c is not None:
            if c not in root_at:
                at = root_index(L, leaders[c], unravel_shape(L, x, L.graph[leaders[c]].type.shape))
                root_at[c] = at, L.value(c.root, at)
            at, var = root_at[c]
            _store(L, name, element, t, copy_index(L, name, at), var)
            continue
        _store(L, name, element, t, unravel_shape(L, x, t.shape))    # (t.numel == numel)
    return Component("flat", L.size(numel), E.ONE, (), tuple(L.scope.stmts))


def _levels(L: Lowerer, reductions: list[str]) -> dict[str, int]:
    """Loop level of each reduction: 1 + the deepest reduction it reads (var_mean takes 2)."""
    level: dict[str, int] = {}
    graph = L.graph

    def deepest(name: str, seen: dict) -> int:
        if name in seen:
            return seen[name]
        best = -1
        for i in graph[name].inputs:
            if i not in L.members or graph[i].op in (PARAMETER, CONSTANT):
                continue
            if graph[i].op in SIMPLE_REDUCTIONS:
                best = max(best, visit(i))
            else:
                best = max(best, deepest(i, seen))
        seen[name] = best
        return best

    def visit(name: str) -> int:
        if name not in level:
            lv = deepest(name, {}) + 1
            level[name] = lv
        last = level[name] + (1 if graph[name].op in _TWO_PASS else 0)
        return last

    for r in reductions:
        visit(r)
    return level


_TWO_PASS = TWO_PASS_REDUCTIONS   # a flag of the op table (ir/ops.py)


# a value of one element stored by a loop's first point (x == 0): a loop of no points (an
# empty tensor's rows) would leave it unwritten
EMPTY_LOOP = ("%{n} ({op}) has one element, stored by the first of the {loop}, and there "
               "are none (an empty tensor's): it needs a kernel of its own")


def _lower_reduce(L: Lowerer, names: list[str], space) -> Component:
    from .reductions import reduction_loop_bodies
    graph = L.graph
    reductions = [n for n in names if graph[n].op in SIMPLE_REDUCTIONS]
    levels = _levels(L, reductions)
    L.single_row = space.blocks == 1
    loops: list[Loop] = []
    # every pass of a reduction, by level: (level, name, pass)
    passes = []
    for r in reductions:
        for p in range(2 if graph[r].op in _TWO_PASS else 1):
            passes.append((levels[r] + p, r, p))
    depth = max((lv for lv, _, _ in passes), default=-1) + 1
    first = None      # loop 0's scope and mask
    for lv in range(depth):
        L.scope = Scope()
        L.mask = L.op("and", ("xmask", "rmask"), "b8")
        if lv == 0:
            first = (L.scope, L.mask)
        results = []
        for _, r, p in sorted(x for x in passes if x[0] == lv):
            results.extend(reduction_loop_bodies(L, r, p))
        loops.append(Loop(tuple(L.scope.stmts)))
        for key, var, dtype, finish in results:
            L.reduced[key] = (var, dtype, finish)
            L.dtype_of[var] = dtype
    # per-element outputs: one more loop; per-row outputs: after the loops
    per_element = [(n, el, t) for n in names if n in L.escaping
                   for el, t in tensor_parts(L, n)
                   if t.numel == space.numel and t.numel != space.blocks and t.numel]
    done = {(n, el) for n, el, _ in per_element}
    if per_element and first is not None:
        # an output that reads no reduction result is stored by loop 0 itself, sharing
        # what that loop computes anyway (a gradient and its bias-gradient column sum)
        per_element = [item for item in per_element if not _store_early(L, first, *item, space)]
        loops[0] = Loop(tuple(first[0].stmts))
    if per_element:
        L.scope = Scope()
        L.mask = L.op("and", ("xmask", "rmask"), "b8")
        for n, el, t in per_element:
            _store(L, n, el, t, element_index(L, space, t, n))
        loops.append(Loop(tuple(L.scope.stmts)))
    L.scope = Scope()
    L.mask = "xmask"
    for n in names:
        if n not in L.escaping:
            continue
        for el, t in tensor_parts(L, n):
            if (n, el) in done:
                continue
            if t.numel == 0:        # nothing to store, but a reader needs the empty tensor
                L.output_buffer(n, el, t)
                continue
            if t.numel == space.blocks:
                _store(L, n, el, t, unravel_shape(L, E.Var("x"), t.shape))
            elif t.numel == 1:
                if space.blocks == 0:
                    raise Unsupported(EMPTY_LOOP.format(n=n, op=graph[n].op, loop="rows"))
                with L.masked(L.op("eq", (L.index(E.Var("x")), L.index(E.ZERO)), "b8")):
                    _store(L, n, el, t, (E.ZERO,) * len(t.shape))
            else:
                raise Unsupported(f"%{n} ({graph[n].op}) with {t.numel} elements is neither "
                                  f"per-element nor per-row in {space}")
    return Component("reduce", L.size(space.blocks), L.size(space.row), tuple(loops),
                     tuple(L.scope.stmts))


def _stmt_reads(st) -> set[str]:
    """Variables a statement reads (its arguments, masks and gathered index values)."""
    out: set[str] = set()
    for attr in ("args",):
        out.update(getattr(st, attr, ()) or ())
    for attr in ("value", "mask"):
        v = getattr(st, attr, None)
        if isinstance(v, str):
            out.add(v)
    idx = getattr(st, "index", None)
    if isinstance(idx, E.Expr):
        out.update(E.free_vars(idx) - {"x", "r", "y", "z", "b"})
    return out


def _store_early(L: Lowerer, first, name: str, element, t: TensorType, space) -> bool:
    """Store a per-element output inside loop 0 if its value reads no reduction result
    (nothing defined outside that loop); else leave loop 0 as it was and say False."""
    scope, mask = first
    stmts, memo, outputs = list(scope.stmts), dict(scope.memo), len(L.outputs)
    saved = L.scope, L.mask
    L.scope, L.mask = scope, mask
    try:
        _store(L, name, element, t, element_index(L, space, t, name))
    finally:
        L.scope, L.mask = saved
    # (a Reduce's result exists only after the loop)
    defined = {"xmask", "rmask"} | {st.var for st in scope.stmts
                                    if hasattr(st, "var") and not isinstance(st, Reduce)}
    if all(_stmt_reads(st) <= defined for st in scope.stmts[len(stmts):]):
        return True
    scope.stmts[:], scope.memo = stmts, memo
    del L.outputs[outputs:]
    return False


def element_index(L: Lowerer, space, t: TensorType,
                  name: str | None = None) -> tuple[E.Expr, ...]:
    """The multi-index in `t` (the type of node `name`, if given) of the space point (x, r).

    A value shaped like the reduction input uses the reduction's own index, and so does
    a permute (a chain of them) of such a value in the group: its index is the
    reduction's, permuted, so that each row computes its own elements (a channels-first
    layer norm: permute, var_mean over the last dim, normalise, permute back; unravelling
    the permuted output from the linear position would read the row statistics at other
    rows, which no row kernel can). Another shape is split where its leading dims hold
    the rows (row schedule) or the reduced part (column schedule); only then is it
    unravelled from the linear position."""
    canon = L.canonical
    if canon is not None and name is not None:
        idx = _permuted_canonical_index(L, name, canon)
        if idx is not None:
            return idx
    if canon is not None and tuple(canon[0]) == tuple(t.shape):
        return canonical_index(L, canon[0], canon[1])
    x, r = E.Var("x"), E.Var("r")
    shape = tuple(t.shape)
    lead, trail = (space.blocks, space.row) if space.kind != "column" else \
        (space.row, space.blocks)
    prod = 1
    for k in range(len(shape) + 1):
        if prod == lead and _numel_of(shape[k:]) == trail:
            head, tail = (x, r) if space.kind != "column" else (r, x)
            return unravel_shape(L, head, shape[:k]) + unravel_shape(L, tail, shape[k:])
        if k < len(shape):
            prod *= shape[k]
    if space.kind == "column":
        flat = E.add(E.mul(r, L.size(space.blocks)), x)
    else:
        flat = E.add(E.mul(x, L.size(space.row)), r)
    return unravel_shape(L, flat, t.shape)


def _permuted_canonical_index(L: Lowerer, name: str, canon):
    """The index of node `name` when it is a chain of permutes and clones (copies: the
    same index) of the group's values ending at a value `v` shaped like the reduction
    input: v's canonical index with each permute applied (out[i] = in[dims[i]]); None
    otherwise. `v` is the chain's deepest member of that shape that is neither a permute
    nor a clone (the value the chain copies: an activation stored channels-last for the
    next convolution is clone(permute(v))), else its first member of that shape."""
    chain = []          # (node, the permutes between `name` and it)
    perms: list = []
    node = L.graph[name]
    while node.op in ("permute.default", "clone.default") and node.args \
            and isinstance(node.args[0], Ref) and node.args[0].name in L.members:
        if node.op == "permute.default":
            perms = perms + [tuple(node.args[1])]
        node = L.graph[node.args[0].name]
        if perms and isinstance(node.type, TensorType) \
                and tuple(node.type.shape) == tuple(canon[0]):
            chain.append((node, perms))
    if not chain:
        return None
    ends = [c for c in chain if c[0].op not in ("permute.default", "clone.default")]
    _, perms = ends[-1] if ends else chain[0]
    idx = canonical_index(L, canon[0], canon[1])
    for dims in reversed(perms):
        idx = tuple(idx[d % len(idx)] for d in dims)
    return idx


def _numel_of(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def canonical_index(L: Lowerer, shape, red_dims, xi=None) -> tuple[E.Expr, ...]:
    """Index of a reduction input at (x, r): x unravels over kept dims (unless `xi` gives
    the kept dims' index), r over reduced ones."""
    kept = [d for d in range(len(shape)) if d not in red_dims]
    if xi is None:
        xi = unravel_shape(L, E.Var("x"), [shape[d] for d in kept])
    ri = unravel_shape(L, E.Var("r"), [shape[d] for d in red_dims])
    idx = [E.ZERO] * len(shape)
    for d, e in zip(kept, xi):
        idx[d] = e
    for d, e in zip(red_dims, ri):
        idx[d] = e
    return tuple(idx)


# dtypes every target's printer handles (the IR has complex ones too)
GENERATED_DTYPES = frozenset({"f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8",
                              "b8"})


def lower_group(graph: Graph, names, kernel_name: str,
                schedule: Schedule | None = None, *, choose_orders: bool = True) -> Kernel:
    """The Kernel of one group; raises Unsupported with the reason. The size comparisons
    of a graph of symbolic sizes it made are the kernel's `guards` (ir/symbolic.py).

    `schedule`: the group's schedule as its plan decided it (`Group.schedule`), whose
    guards become the kernel's too; None (a group without a plan: a planning candidate,
    a test) decides it here with `group_schedule`, the function plans use.

    `choose_orders`: try each order a flat component's layout copies may run in and keep
    the cheapest (layout_copies.py); planning's tentative lowering, which reads the
    kernel's ops and not its order, passes False (the first copy leads)."""
    with recording() as guards:
        k = _lower_group(graph, names, kernel_name, schedule, choose_orders)
    return replace(k, guards=frozenset(guards)) if guards else k


def _lower_group(graph: Graph, names, kernel_name: str, schedule: Schedule | None,
                 choose_orders: bool = True) -> Kernel:
    names = list(names)
    _check_dtypes(graph, names)
    from .scatter import is_scatter_kernel, lower_scatter
    if any(is_scatter_kernel(graph, graph[n]) for n in names):
        if len(names) > 1:
            raise Unsupported("a scatter (data-dependent positions) is a kernel of its own")
        return lower_scatter(graph, names[0], kernel_name)
    if schedule is None:
        try:
            schedule = group_schedule(graph, names)
        except Inconsistent as e:
            raise Unsupported(str(e)) from None
    else:
        if sorted(n for c in schedule.components for n in c) != sorted(names):
            raise ValueError(f"the schedule given for group {names} is another group's: its "
                             f"components are {schedule.components}")
        replay(schedule.guards)
    L = Lowerer(graph, names, kernel_name)
    L.choose_orders = choose_orders
    comps = []
    for comp, space in zip(schedule.components, schedule.spaces):
        comp = list(comp)
        L.canonical = None
        if space.kind == "flat":
            comps.extend(_lower_flat(L, comp, space.numel))
        elif space.kind in ("row", "column", "general"):
            from .reductions import reduction_layout
            L.canonical = reduction_layout(L, comp)
            comps.append(_lower_reduce(L, comp, space))
        elif space.kind == "batch":
            from .batch import lower_batch
            comps.append(lower_batch(L, comp, space))
        else:
            raise Unsupported(f"no code generator for {space.kind} schedules")
    if not L.outputs:
        raise Unsupported("the group produces no value")
    buffers = tuple(L.inputs.values()) + tuple(L.outputs) + tuple(L.scratch)
    other = sorted({b.dtype for b in buffers} - GENERATED_DTYPES)
    if other:   # complex numbers: no target prints them (a printer would fail later)
        raise Unsupported(f"values of dtype {', '.join(other)}: the code generators handle "
                          f"{', '.join(sorted(GENERATED_DTYPES))}")
    syms = tuple(sorted(L.syms.values(), key=lambda s: (not s.name.startswith("ks"),
                                                       _natural(s.name))))
    # concatenations along x: one component per piece (pieces.py)
    return split_pieces(Kernel(kernel_name, buffers, syms, tuple(comps), L.index_dtype,
                               tuple(sorted(L.bindings.items())), checks=tuple(L.checks)))


def _check_dtypes(graph: Graph, names) -> None:
    """Unsupported when a node of the group, or a value it reads, has a dtype the kernel IR
    does not have (complex): no target could print the kernel."""
    for n in names:
        node = graph[n]
        for v in (n, *node.inputs):
            t = graph[v].type
            for e in (t.elements if isinstance(t, TupleType) else (t,)):
                if e is not None and e.dtype not in DTYPES:
                    what = "" if v == n else f" reads %{v}, which"
                    raise Unsupported(f"%{n} ({node.op}){what} has dtype {e.dtype}: kernels "
                                      "have no code for it")


def _natural(name: str):
    import re
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
