"""Block composition: a component around small (batched) GEMMs -> a "batch" Component.

After FusionStitching 2019 §5.1 (Figure 5 (d)): elementwise ops, reductions and
GEMMs of one batch entry are composed in one thread block, intermediate results
passing through memory the block keeps for itself. Here one program runs one
batch entry b (the grid is over the entries) as a sequence of stages:

- every GEMM is a *dot* stage, C[m, n] = sum_k A[m, k] * B[k, n]: the operand
  tiles are computed by index like any other value (a transposed, broadcast or
  elementwise-computed operand is only an index function), summed over k;
- every reduction is a *reduce* stage (x over the entry's kept elements, r over
  the reduced ones), as in a row component; var/var_mean take two loops;
- the values that leave the group and no stage stored are stored by a last
  *flat* stage over the entry's elements.

A stage stores its value into a scratch buffer (the 2019 template's `S`) when a
later stage reads it; the printer puts a barrier between stages. Every other
value is computed where it is read, so a pointwise prologue or epilogue costs no
memory traffic (the paper's recomputation / size shrinking).

Scratch is global memory, one contiguous buffer per staged value allocated by
the runtime per launch (an entry holds at most BLOCK_ELEMENTS_MAX elements, so a
program's scratch stays in L2). Keeping it in shared memory, with the 2019 §5.4
dominance-tree reuse, is a later step.

Barriers order the threads of one program, not different programs, so a program
may read back only what it stored: every read of a staged value checks that its
index lies in the reader's own batch entry, else the group is Unsupported (and
legalisation splits it): never a race.
"""
from __future__ import annotations

from ..ir.graph import TensorType
from ..ir.ops import LOGICAL_RESHAPES, TWO_PASS_REDUCTIONS
from ..schedule.propagate import FUSIBLE_DOTS, SIMPLE_REDUCTIONS, dot_dims, reduced_dims
from . import expr as E
from .kernel import Buffer, Component, Dot, Load, Loop, Store
from .lower import (EMPTY_LOOP, Lowerer, Unsupported, Scope, strip_unit_dims, tensor_parts,
                    canonical_index, compute_dtype, unravel_shape)

B = E.Var("b")   # the batch entry of the program


def lower_batch(L: Lowerer, names: list[str], space) -> Component:
    """The batch component of `names` (a connected component whose space is "batch")."""
    graph = L.graph
    L.batch = space.blocks            # programs (schedule.propagate.batch_programs)
    L.gemm_batch = space.layout[0]    # GEMM entries; a program runs gemm_batch / batch
    stages = []
    stored: set[tuple] = set()
    for n in names:
        op = graph[n].op
        if op in FUSIBLE_DOTS:
            stages.append(_dot_stage(L, n, stored))
        elif op in SIMPLE_REDUCTIONS:
            stages.append(_reduce_stage(L, n, stored))
    rest = [(n, el, t) for n in names if n in L.escaping for el, t in tensor_parts(L, n)
            if (n, el) not in stored]
    for n, el, t in rest:
        if not t.numel:   # nothing to store, but a reader needs the empty tensor
            L.output_buffer(n, el, t)
    rest = [(n, el, t) for n, el, t in rest if t.numel]
    if rest:
        stages.append(_store_stage(L, rest))
    count = L.batch
    L.batch = 1
    return Component("batch", L.size(count), E.ONE, (), (), stages=tuple(stages))


def _split(shape, batch: int) -> int | None:
    """k such that the leading dims shape[:k] hold exactly the batch entries."""
    prod = 1
    for k in range(len(shape) + 1):
        if prod == batch:
            return k
        if k < len(shape):
            prod *= shape[k]
    return None


def entry_index(L: Lowerer, shape, x: E.Expr) -> tuple[E.Expr, ...] | None:
    """Index in `shape` of element x of the program's batch entry (None: no such split)."""
    k = _split(shape, L.batch)
    if k is None:
        return None
    return unravel_shape(L, B, shape[:k]) + unravel_shape(L, x, shape[k:])


def read_staged(L: Lowerer, buf: Buffer, idx) -> str:
    """Load a value an earlier stage stored, at `idx`, which must lie in this program's part
    of the buffer (its stage stored part b: elements [b*E, (b+1)*E) of the buffer)."""
    offset = _offset(L, idx, buf)
    if L.batch > 1:
        numel = 1
        for d in buf.shape:
            numel *= d
        if not in_own_part(offset, numel // L.batch, L.extent):
            raise Unsupported(f"%{buf.value} is read at {E.to_source(offset)}, which is not "
                              f"provably in the program's own batch entries (b): a program "
                              f"reads back only its own stages")
    var = L.emit(Load(L.fresh("ld"), buf.name, offset, L.mask, buf.dtype),
                 ("load", buf.name, offset, L.mask))
    L.dtype_of[var] = buf.dtype
    return L.cast(var, compute_dtype(buf.dtype))


def in_own_part(offset: E.Expr, part: int, extent: dict[str, int]) -> bool:
    """Is offset = part*b + rest with 0 <= rest < part for every point of the stage?"""
    split = _affine_in_b(offset)
    if split is None or split[0] != part:
        return False
    bounds = _bounds(split[1], extent)
    return bounds is not None and bounds[0] >= 0 and bounds[1] < part


def _number(e: E.Expr) -> int | None:
    return e.value if isinstance(e, (E.Const, E.Sym)) else None


def _affine_in_b(e: E.Expr):
    """(c, rest) with e == c*b + rest and b not in rest, or None."""
    if e == B:
        return 1, E.ZERO
    if "b" not in E.free_vars(e):
        return 0, e
    if isinstance(e, E.Add):
        parts = [_affine_in_b(t) for t in e.terms]
        if any(p is None for p in parts):
            return None
        return sum(c for c, _ in parts), E.add(*(r for _, r in parts))
    if isinstance(e, E.Mul):
        with_b = [f for f in e.factors if "b" in E.free_vars(f)]
        others = [f for f in e.factors if "b" not in E.free_vars(f)]
        scale = 1
        for f in others:
            v = _number(f)
            if v is None:
                return None
            scale *= v
        inner = _affine_in_b(with_b[0]) if len(with_b) == 1 else None
        if inner is None:
            return None
        return inner[0] * scale, E.mul(inner[1], *others)
    if isinstance(e, (E.FloorDiv, E.Mod)):
        d, inner = _number(e.b), _affine_in_b(e.a)
        if d is None or inner is None or inner[0] % d:
            return None     # (c*b + rest) // d = (c/d)*b + rest // d when d divides c
        if isinstance(e, E.Mod):
            return 0, E.mod(inner[1], e.b)
        return inner[0] // d, E.floordiv(inner[1], e.b)
    if isinstance(e, E.Digit):
        return _affine_in_b(e.expand())
    return None


def _bounds(e: E.Expr, extent: dict[str, int]):
    """(lo, hi) of an index expression over the stage's loop ranges, or None if unknown."""
    if isinstance(e, (E.Const, E.Sym)):
        return e.value, e.value
    if isinstance(e, E.Var):
        return (0, extent[e.name] - 1) if e.name in extent else None
    if isinstance(e, E.Digit):
        return _bounds(e.expand(), extent)
    parts = [_bounds(c, extent) for c in E.children(e)]
    if not parts or any(p is None for p in parts) or any(lo < 0 for lo, _ in parts):
        return None
    if isinstance(e, E.Add):
        return sum(lo for lo, _ in parts), sum(hi for _, hi in parts)
    if isinstance(e, E.Mul):
        lo = hi = 1
        for a, c in parts:
            lo, hi = lo * a, hi * c
        return lo, hi
    (alo, ahi), (dlo, dhi) = parts
    if dlo <= 0:
        return None
    if isinstance(e, E.FloorDiv):
        return alo // dhi, ahi // dlo
    return 0, min(ahi, dhi - 1)     # Mod


def _keep(L: Lowerer, name: str, element, t: TensorType, idx, var: str, stored: set) -> None:
    """Store a stage's value: to its output if it leaves the group, and where later stages
    read it (the output itself when it holds the compute dtype, else a scratch buffer)."""
    graph = L.graph
    users = [u for u in graph.users[name] if u in L.members]
    if element is not None:
        users = [u for u in users if graph[u].args[1] == element]
    out = None
    if name in L.escaping:
        out = L.output_buffer(name, element, t)
        v = L.op("cast", (var,), t.dtype) if L.dtype_of[var] != t.dtype else var
        L.scope.stmts.append(Store(out.name, _offset(L, idx, out), v, L.mask))
        stored.add((name, element))
    if not users:
        return
    if out is not None and out.dtype == L.dtype_of[var]:
        L.staged[(name, element)] = out
        return
    buf = L.scratch_buffer(name, element, t)
    v = L.cast(var, buf.dtype)
    L.scope.stmts.append(Store(buf.name, _offset(L, idx, buf), v, L.mask))
    L.staged[(name, element)] = buf


def _offset(L: Lowerer, idx, buf: Buffer) -> E.Expr:
    """Offset of `idx` in a contiguous buffer (ravel gives an unravelled x back as x)."""
    return ravel_runs(*strip_unit_dims(tuple(idx), L.sizes(buf.shape)))


def ravel_runs(index, sizes) -> E.Expr:
    """E.ravel, which gives `base` back for a whole index unravelled from it, also folding
    each run of dims unravelled from one base (b over the batch dims, then x): the offsets
    of a program's part read b*E + x, which `in_own_part` can check."""
    out, out_sizes, k = [], [], 0
    while k < len(index):
        e = index[k]
        n = len(e.sizes) if isinstance(e, E.Digit) and e.k == 0 else 0
        run = index[k:k + n]
        if n > 1 and len(run) == n and tuple(sizes[k:k + n]) == tuple(e.sizes) and all(
                isinstance(d, E.Digit) and (d.base, d.sizes, d.k) == (e.base, e.sizes, j)
                for j, d in enumerate(run)):
            out.append(e.base)
            out_sizes.append(E.product(sizes[k:k + n]))
            k += n
            continue
        out.append(e)
        out_sizes.append(sizes[k])
        k += 1
    return E.ravel(tuple(out), tuple(out_sizes))


def _dot_stage(L: Lowerer, name: str, stored: set) -> Component:
    from .lowerings import bind, operand
    node = L.graph[name]
    t = node.type
    if compute_dtype(t.dtype) != "f32":
        raise Unsupported(f"%{name} ({node.op}) in {t.dtype}: GEMMs are generated for f32, "
                          "f16 and bf16 only")
    _, m, n, k = dot_dims(L.graph, node)
    if node.op == "addmm.default":
        bias, lhs, rhs = node.args[:3]
    else:
        bias, (lhs, rhs) = None, node.args[:2]
    x, y, r, z = E.Var("x"), E.Var("y"), E.Var("r"), E.Var("z")
    # bmm: the GEMM entry, program b runs entries b*per + z for z < per; mm: nothing
    per = L.gemm_batch // L.batch
    lead = unravel_shape(L, E.add(E.mul(B, L.size(per)), z) if per > 1 else B, t.shape[:-2])
    L.extent = {"x": m, "y": n, "r": k, "z": per}
    L.scope = Scope()
    L.mask = L.op("and", ("xmask", "rmask"), "b8")
    a = L.cast(L.value(lhs.name, lead + (x, r)), "f32")
    lhs_loop = Loop(tuple(L.scope.stmts))
    L.scope = Scope()
    L.mask = L.op("and", ("rmask", "ymask"), "b8")
    b = L.cast(L.value(rhs.name, lead + (r, y)), "f32")
    rhs_loop = Loop(tuple(L.scope.stmts))
    L.scope = Scope()
    acc = L.fresh("dot")
    L.scope.stmts.append(Dot(acc, a, b, "f32"))     # first: the printer's k loop ends here
    L.dtype_of[acc] = "f32"
    L.mask = L.op("and", ("xmask", "ymask"), "b8")
    val = acc
    if bias is not None:
        args = bind(node)
        beta, alpha = args.get("beta", 1), args.get("alpha", 1)
        if alpha != 1:
            val = L.op("mul", (val, L.const(alpha, "f32")), "f32")
        if beta != 0:
            bv = operand(L, bias, (x, y), (m, n), "f32")
            if beta != 1:
                bv = L.op("mul", (bv, L.const(beta, "f32")), "f32")
            val = L.op("add", (bv, val), "f32")
    _keep(L, name, None, t, lead + (x, y), val, stored)
    return Component("dot", L.size(m), L.size(k), (lhs_loop, rhs_loop), tuple(L.scope.stmts),
                     ynumel=L.size(n), znumel=L.size(per))


def _reduce_stage(L: Lowerer, name: str, stored: set) -> Component:
    from .reductions import reduction_loop_bodies
    node = L.graph[name]
    shape, dims = reduced_dims(L.graph, node)
    kept = [d for d in range(len(shape)) if d not in dims]
    kidx = entry_index(L, [shape[d] for d in kept], E.Var("x"))
    if kidx is None:
        raise Unsupported(f"%{name} ({node.op}): its kept dims do not start with the "
                          f"{L.batch} batch entries")
    idx = canonical_index(L, shape, dims, kidx)
    rows, width = 1, 1
    for d in kept:
        rows *= shape[d]
    for d in dims:
        width *= shape[d]
    L.extent = {"x": rows // L.batch, "r": width}
    loops = []
    for p in range(2 if node.op in TWO_PASS_REDUCTIONS else 1):
        L.scope = Scope()
        L.mask = L.op("and", ("xmask", "rmask"), "b8")
        results = reduction_loop_bodies(L, name, p, idx)
        loops.append(Loop(tuple(L.scope.stmts)))
        for key, var, dtype, finish in results:
            L.reduced[key] = (var, dtype, finish)
            L.dtype_of[var] = dtype
    L.scope = Scope()
    L.mask = "xmask"
    for el, t in tensor_parts(L, name):
        var, _, finish = L.reduced[(name, el)]
        v = finish(L, var) if finish is not None else var
        _keep(L, name, el, t, entry_index(L, t.shape, E.Var("x")), v, stored)
    return Component("reduce", L.size(rows // L.batch), L.size(width), tuple(loops),
                     tuple(L.scope.stmts))


def _store_stage(L: Lowerer, rest) -> Component:
    """A last flat stage: the outputs no earlier stage stored, over the entry's elements."""
    L.scope = Scope()
    L.mask = "xmask"
    x = E.Var("x")
    per_entry = [max(t.numel // L.batch, 1) for _, _, t in rest]
    numel = max(per_entry)
    for (n, el, t), count in zip(rest, per_entry):
        L.extent = {"x": count}         # lanes past `count` are masked off below
        cond = None
        if t.numel % L.batch == 0 and entry_index(L, t.shape, x) is not None:
            src, idx = n, entry_index(L, t.shape, x)
            out_idx = idx
        elif el is None and (moved := _moved_from(L, n, x)) is not None:
            src, idx, out_idx = moved
        elif t.numel == 1:
            if L.batch == 0:
                raise Unsupported(EMPTY_LOOP.format(n=n, op=L.graph[n].op, loop="programs"))
            src, idx = n, (E.ZERO,) * len(t.shape)       # a scalar: program 0 stores it
            out_idx = idx
            cond = L.op("eq", (L.index(B), L.index(E.ZERO)), "b8")
        else:
            raise Unsupported(f"%{n} ({L.graph[n].op}) with shape {list(t.shape)} does not "
                              f"split into {L.batch} batch entries")
        if count < numel:
            lt = L.op("lt", (L.index(x), L.index(L.size(count))), "b8")
            cond = lt if cond is None else L.op("and", (cond, lt), "b8")
        with L.masked(cond):
            buf = L.output_buffer(n, el, t)
            var = L.value(src, idx, el if src == n else None)
            var = L.op("cast", (var,), t.dtype) if L.dtype_of[var] != t.dtype else var
            L.scope.stmts.append(Store(buf.name, _offset(L, out_idx, buf), var, L.mask))
    return Component("flat", L.size(numel), E.ONE, (), tuple(L.scope.stmts))


# Ops whose value is their operand's, re-indexed one to one: an output laid out across the
# batch entries (the [batch * seq, heads * dim] view of attention's [batch * heads, seq, dim]
# result) is stored from its source's part, at the positions it maps them to.
# the logical reshapes of the op table (ir/ops.py), and a clone (the same elements)
_RESHAPES = LOGICAL_RESHAPES | {"clone.default"}
_PERMUTES = frozenset({"permute.default", "transpose.int", "t.default"})


def _moved_from(L: Lowerer, name: str, x: E.Expr):
    """For a value that is a one-to-one re-indexing of a member whose leading dims split
    into the programs' parts: (that source, its index at element x of the program's part,
    the value's index of the same element). The value is then stored from the source's
    own positions, which this program computed."""
    node = L.graph[name]
    src = node.args[0].name if node.args and hasattr(node.args[0], "name") else None
    if node.op not in _RESHAPES | _PERMUTES or src not in L.members:
        return None
    st = L.graph[src].type
    if not isinstance(st, TensorType):
        return None
    inner = entry_index(L, st.shape, x) if st.numel % L.batch == 0 else None
    if inner is not None:
        root, root_idx = src, inner
    else:
        found = _moved_from(L, src, x)
        if found is None:
            return None
        root, root_idx, inner = found
    t = node.type
    if node.op in _RESHAPES:
        flat = ravel_runs(*strip_unit_dims(tuple(inner), L.sizes(st.shape)))
        return root, root_idx, unravel_shape(L, flat, t.shape)
    rank = len(t.shape)
    if node.op == "permute.default":
        out = tuple(inner[d % rank] for d in node.args[1])
    elif node.op == "t.default":
        out = tuple(reversed(inner))
    else:
        out = list(inner)
        d0, d1 = node.args[1] % rank, node.args[2] % rank
        out[d0], out[d1] = inner[d1], inner[d0]
        out = tuple(out)
    return root, root_idx, out
