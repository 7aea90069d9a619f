"""The column order of a reduce component on the cpu target (a mixin of reduce.py's
printer; reduce.py's docstring lists the three orders).

Dense version only, when the inputs are contiguous along x and strided along r (bias
gradients, layer-norm weight gradients, column sums): blocks of COLUMN_BLOCK
consecutive x are the parallel loop, r runs outside and the x of a block inside (one
SIMD lane per column), so every load reads consecutive memory; accumulators and
results are arrays over the block; float sums add blocks of COLUMN_SUM_BLOCK rows in
float, then in double. Values a later loop reads again live in per-thread row buffers
when they fit COLUMN_ROWBUF_BYTES, else in the output a later loop stores at the same
(x, r) when computing them calls an exp or the like (`output_stash`), else are computed
again. The same blocks serve short rows (at most reduce.SHORT_ROW, contiguous or not):
rows of at most TINY_R unroll r inside each lane, contiguous rows up to SHORT_ROW run
blocks of ROWS_BLOCK rows with each row's r as the SIMD lanes (`r_simd`).
"""
from __future__ import annotations

import contextlib

from ...codegen import expr as E
from ...codegen.kernel import Component, Constant, Index, Load, Op, Reduce, Store, varies_with_r
from .dtypes import REDUCE_CLAUSE as _CLAUSE
from .dtypes import HALVES, acc_type, ctype
from .flat import PARALLEL_GRAIN, simd_safe
from .index import lowering_value
from .row_lanes import RowLanes, row_lanes
from .rowbuf import RowPlan, costly, plan_rows, uses

# columns of one block of the column order (one cache line of f32 x 4, SIMD lanes x 8)
COLUMN_BLOCK = 64
# Row buffers of the column order hold COLUMN_BLOCK (or the row's length) x rnumel values
# per thread: used when all of them together take at most this many bytes at the
# lowering-time sizes (values stored as float or wider), so they stay in the L2 cache;
# beyond it the later loops compute the values again
COLUMN_ROWBUF_BYTES = 512 * 1024
# column reductions whose rows are expected at most this long get a version for that
# length (`if (rnumel == 4)`): a constant r loop inside the lane loops unrolls, where r
# outside ran a 16- or 64-lane loop per element of the row (var over [4096, 4, 16] dim
# 1: 2x Inductor's time)
TINY_R = 8
# Contiguous rows expected longer than TINY_R and at most SHORT_ROW get a version in
# blocks of ROWS_BLOCK rows whose loops over r run inside each row, as SIMD lanes along
# the row (`r_simd`): lanes over rows read a row of 16 floats with one strided load per
# element (gathers, scatters for the stores: var over [4096, 64, 16] dim 2 was 1.5x
# Inductor's time), and the plain row order runs each row's three loops as one chain of
# horizontal sums and divisions; blocks keep the per-row values (the pivot, the mean) in
# lane arrays computed once per block, vectorised over its rows. Same case, one thread,
# 2026-11: 16 rows per block 0.97-1.01x Inductor, 64 rows 1.06-1.17x.
ROWS_BLOCK = 16
# Float sums of the column order run over r in blocks of COLUMN_SUM_BLOCK rows: each
# column sums a block in float, and the blocks add up in double (as the row order's
# SUM_BLOCK: a column adds as many terms in float as a SIMD lane of the row order does
# with AVX2); a double accumulator per element cost a conversion and two double adds per
# 8 lanes, loaded and stored each row (sum over [2048, 64, 32] dim 0: 10.1 -> 8.3 ms)
COLUMN_SUM_BLOCK = 32


def _always(mask: str | None, defs: dict) -> bool:
    """Whether a mask is true for every x < xnumel, r < rnumel: none, xmask, rmask, or
    an `and` of such."""
    if mask is None or mask in ("xmask", "rmask"):
        return True
    s = defs.get(mask)
    return isinstance(s, Op) and s.op == "and" and all(_always(a, defs) for a in s.args)


def _moving_with_r(body, kept=frozenset()) -> frozenset[str]:
    """kernel.varies_with_r where rmask is the constant `true` (it is in every loop of
    this target): the variables of a loop over r that depend on r itself, or on the
    values `kept` in row buffers (read per r, whatever they depend on)."""
    return varies_with_r(body, {"r"} | set(kept))


def _dtype(s) -> str:
    """The dtype of a statement's value (Index values are int64 on this target)."""
    return "i64" if isinstance(s, Index) else s.dtype

class ColumnOrder(RowLanes):
    """Printing of the column order; mixed into reduce.ReduceLoops (which provides
    `accumulators` and `result`, shared with the row order)."""

    def columns(self, depth: int, c: Component, exact: int | None = None) -> None:
        """Blocks of COLUMN_BLOCK columns: per block, each loop over r runs the block's
        lanes inside. What does not vary with r (a column's pivot, its mean, a broadcast
        operand read at x % n) is computed once per block into lane arrays before the
        loop, not once per element (a division or an exp per element otherwise); values a
        later loop reads again are kept in per-thread row buffers of COLUMN_BLOCK x rnumel
        elements (rowbuf.py) when they fit COLUMN_ROWBUF_BYTES at the lowering-time size."""
        # x is split in rows only for the streams (accesses that move with r and x): a
        # block then holds consecutive x of one row. When the streams read x itself, a
        # block spans rows (rows of 16 gave 16-lane blocks whose loop over r cost more
        # than its lanes); operands read at digits of x alone are per block (lane arrays)
        streams = [s for loop in c.loops for s in loop.body
                   if isinstance(s, (Load, Store)) and "r" in E.free_vars(s.index)]
        rows = self.split_sizes(streams, "x")
        inner = lowering_value(rows[-1], self.expected) if rows is not None else None
        if exact is None and self.r_inside and type(inner) is int and \
                1 < inner <= COLUMN_BLOCK and not E.free_vars(rows[-1]):
            # rows as long as expected (and x made of whole rows): blocks of one row with
            # a constant number of lanes, whose lane loops then have known trips too
            last = self.index(rows[-1], {})
            self.emit(depth, f"if ({last} == {inner} && xnumel % {inner} == 0) {{")
            self.columns(depth + 1, c, exact=inner)
            self.emit(depth, "} else {")
            self.columns(depth + 1, c, exact=0)
            self.emit(depth, "}")
            return
        exact = exact or None
        # (a block of one whole row of x holds up to COLUMN_BLOCK lanes)
        B = self.block = ROWS_BLOCK if self.r_simd and not exact else COLUMN_BLOCK
        try:
            self.column_blocks(depth, c, rows, exact, B)
        finally:
            self.block = COLUMN_BLOCK

    def column_blocks(self, depth: int, c: Component, rows, exact: int | None,
                      B: int) -> None:
        """The blocks of `columns`, B lanes each (`exact`: one whole row of x each)."""
        self.emit(depth, f"// columns: blocks of {B} x, " + (
            "each x's r inside, SIMD along r" if self.r_simd else "r outside, x inside"))
        if rows is None:
            self.emit(depth, f"const int64_t xblocks = (xnumel + {B - 1}) / {B};")
        else:
            # x = xo * xinner + xi: a block holds consecutive xi of one xo, so the lanes
            # read consecutive memory and the xo terms (with divisions) are per block
            last = self.index(rows[-1], {})
            if exact:
                self.emit(depth, f"const int64_t xinner = {exact};  // x = xo * xinner + xi")
                self.emit(depth, "const int64_t xblocks = xnumel / xinner;")
            else:
                self.emit(depth, f"const int64_t xinner = {last} > 0 ? {last} : 1;  "
                                 "// x = xo * xinner + xi")
                self.emit(depth, f"const int64_t xrow_blocks = (xinner + {B - 1}) / {B};")
                self.emit(depth, "const int64_t xblocks = (xnumel + xinner - 1) / xinner * "
                                 "xrow_blocks;")
        rn = lowering_value(c.rnumel, self.expected)
        # a block holds at most one row of xinner lanes: the buffers' size at the
        # lowering-time sizes is that many lanes, not B (rows of 16 x 2048
        # recomputed an exp per element in the second loop for want of 512 KiB)
        width = B
        if rows is not None:
            inner = lowering_value(rows[-1], self.expected)
            if inner is not None:
                width = max(1, min(B, inner))
        plan = plan_rows(c) if rn is not None else RowPlan()
        per_element = sum(8 if dt in ("f64", "i64") else 4
                          for dt in plan.buffers.values())
        self.rowplan, self.stashes = plan, {}
        if plan and rn * width * per_element > COLUMN_ROWBUF_BYTES:
            # too big for the cache: the values are computed again, or kept in the output
            # a later loop stores at the same (x, r) when computing them costs more
            # (values that no output can hold are computed again, from those that one
            # holds: var's squared deviations from the exp of its first loop)
            exclude: set[tuple[int, str]] = set()
            while plan:
                self.stashes = self.output_stash(c, plan)
                dropped = {(i, u) for i, saved in plan.saves.items()
                           for u, buf in saved.items() if buf not in self.stashes}
                if not dropped:
                    break
                exclude |= dropped
                plan = plan_rows(c, frozenset(exclude))
            self.rowplan = plan
        parallel = f"if(parallel: xblocks > 1 && xnumel * rnumel >= {PARALLEL_GRAIN})"
        outer = depth
        if self.rowplan:
            self.emit(depth, f"const int64_t rbw = xnumel < {B} ? "
                             f"(xnumel > 0 ? xnumel : 1) : {B};  // row buffer width")
            self.emit(depth, f"#pragma omp parallel {parallel}")
            self.emit(depth, "{")
            depth += 1
            for buf, dt in self.rowplan.buffers.items():
                if buf in self.stashes:
                    continue
                ct = ctype(dt)
                # xn <= min(xnumel, B) lanes: a buffer never exceeds the
                # input's size, whatever rnumel is at run time
                self.emit(depth, f"{ct}* __restrict__ const {self.rowbuf(buf)} = ({ct}*)"
                                 f"__builtin_malloc(sizeof({ct}) * rbw * "
                                 "(rnumel > 0 ? rnumel : 1));")
            self.emit(depth, "#pragma omp for schedule(static)")
        else:
            self.emit(depth, f"#pragma omp parallel for schedule(static) {parallel}")
        self.emit(depth, "for (int64_t xb = 0; xb < xblocks; ++xb) {")
        d = depth + 1
        if rows is None:
            self.emit(d, f"const int64_t x0 = xb * {B};")
            self.emit(d, f"const int64_t xn = xnumel - x0 < {B} ? xnumel - x0 : {B};")
        elif exact:
            self.emit(d, "const int64_t xo = xb;")
            self.emit(d, "const int64_t xi0 = 0;")
            self.emit(d, "const int64_t x0 = xo * xinner;")
            self.emit(d, "const int64_t xn = xinner;")
        else:
            self.emit(d, "const int64_t xo = xb / xrow_blocks;")
            self.emit(d, f"const int64_t xi0 = (xb % xrow_blocks) * {B};")
            self.emit(d, "const int64_t x0 = xo * xinner + xi0;")
            self.emit(d, f"int64_t xn = xinner - xi0 < {B} ? xinner - xi0 : {B};")
            self.emit(d, "if (xn > xnumel - x0) xn = xnumel - x0;")
        # values held per lane of the block: var -> (dtype, C array)
        lanes: dict[str, tuple[str, str]] = {}
        self.rows = rows
        try:
            with self.hoisting(d, {"xo"}) if rows is not None else contextlib.nullcontext():
                for j, loop in enumerate(c.loops):
                    self.column_loop(d, j, loop.body, lanes)
                if c.body:
                    self.emit(d, "// per x")
                    self.lane_loop(d, c.body, lanes, None, simd_safe(c.body, ("x",)))
        finally:
            self.rows = None
        self.emit(depth, "}")
        if self.rowplan:
            self.free_row_buffers(depth)
            self.emit(outer, "}")
        self.rowplan, self.stashes = RowPlan(), {}

    def output_stash(self, c: Component, plan: RowPlan) -> dict[str, Store]:
        """Row buffers of `plan` (column order, too big to keep per thread) whose values
        the output that a later loop stores at the same (x, r) holds in between: {buffer:
        that Store}. The loop that computes the value stores it there, the loops that
        read it load it back, and the last one overwrites it with the output's value
        (Inductor keeps exp(-x*x) * w of an amax over 32768 rows in the output it then
        rewrites; computing the exp again cost us 1.2-1.4x its time). Only for values
        whose computing calls an EXPENSIVE op (a load and a store of the output cost
        more than a few cheap ops), and only where it is exact: the output has the
        value's dtype (no half), aliases no input, and this component does not read it
        nor store it elsewhere; the store is unmasked (its mask is xmask & rmask, true
        on this target) at an index of x and r alone, so every (x, r) has its own element
        (an output is stored once per element), and follows the reads of its loop."""
        loads = {s.buffer for loop in c.loops for s in loop.body if isinstance(s, Load)}
        loads |= {s.buffer for s in c.body if isinstance(s, Load)}
        stores = [s for comp in self.k.components
                  for body in [comp.body] + [loop.body for loop in comp.loops]
                  for s in body if isinstance(s, Store)]
        count = {b: sum(s.buffer == b for s in stores) for b in {s.buffer for s in stores}}
        out: dict[str, Store] = {}
        for buf, dt in plan.buffers.items():
            readers = sorted(j for j, rv in plan.reuses.items() if buf in rv.values())
            if not readers or dt in HALVES or not costly(c, plan, buf):
                continue
            last = c.loops[readers[-1]].body
            read_at = max(k for k, s in enumerate(last)
                          if plan.reuses[readers[-1]].get(getattr(s, "var", None)) == buf)
            defs = {s.var: s for s in last if hasattr(s, "var")}
            for k, s in enumerate(last):
                b = self.buffers.get(getattr(s, "buffer", None))
                if not isinstance(s, Store) or k < read_at or b is None or \
                        not b.is_output or b.dtype != dt or b.name in self.k.may_alias or \
                        b.name in loads or count[b.name] != 1 or \
                        any(st.buffer == b.name for st in out.values()) or \
                        E.free_vars(self.form(s.index, True)) != {"x", "r"} or \
                        not _always(s.mask, defs):
                    continue
                out[buf] = s
                break
        return out

    def kept(self, buf: str, at: str, env: dict[str, str]) -> str:
        """Where a lane's value kept in row buffer `buf` lives: the buffer at `at`, or the
        output element of its stash (`output_stash`)."""
        s = self.stashes.get(buf)
        if s is None:
            return f"{self.rowbuf(buf)}[{at}]"
        return f"{self.buf(s.buffer)}[{self.index(s.index, env, access=True)}]"

    def column_loop(self, d: int, j: int, body, lanes: dict) -> None:
        """Loop j over r of the column order: its r-invariant statements once per block
        (into lane arrays), then r outside and the block's lanes inside."""
        plan = self.rowplan
        live = plan.live.get(j)
        reuses, saves = plan.reuses.get(j, {}), plan.saves.get(j, {})
        # rmask is `true` in every loop this target prints (r runs exactly to rnumel):
        # a load masked by xmask & rmask that reads no r (a broadcast operand at x % n)
        # is per block too; values kept in row buffers stay in the loop over r
        moving = _moving_with_r(body, set(reuses) | set(saves))
        body = [s for s in body if live is None or getattr(s, "var", None) is None
                or s.var in live]
        fixed = [s for s in body if isinstance(s, (Load, Index, Op)) and s.var not in moving]
        # bools that do not vary with r (xmask & rmask) are computed in both places, never
        # kept in lane arrays: a load masked by a bool read from memory does not vectorise
        both = {s.var for s in fixed if _dtype(s) == "b8"}
        consts = [s for s in body if isinstance(s, Constant)]
        rest = [s for s in body if (s not in fixed or s.var in both)
                and not isinstance(s, Constant)]
        read = {a for s in rest for a in uses(s)}
        kept = [s for s in fixed if s.var in read and s.var not in both]
        if kept:
            self.emit(d, f"// loop {j}: what does not vary with r, once per block")
            for s in kept:
                self.emit(d, f"{ctype(_dtype(s))} {self.lane(s.var)}[{self.block}];")
            self.lane_loop(d, consts + fixed, lanes, None, True, mask="rmask",
                           after=[(s.var, self.lane(s.var)) for s in kept])
            for s in kept:
                lanes[s.var] = (_dtype(s), self.lane(s.var))
        reduces = [s for s in rest if isinstance(s, Reduce)]
        accs, _, simd = self.accumulators(d, reduces, lanes=True)
        self.emit(d, f"// loop {j} over r")
        if self.r_inside:
            # (r_simd: the lanes' loop runs in order, each row's loop over r as SIMD lanes)
            self.lane_loop(d, consts + rest, lanes, accs,
                           simd and simd_safe(rest, ("r",) if self.r_simd else ("x",)),
                           mask="rmask", reuses=reuses, saves=saves, r_inside=True,
                           reduces=reduces)
        else:
            self.r_outside(d, consts + rest, lanes, reduces, accs,
                           simd and simd_safe(rest, ("x",)), reuses, saves)
        for red in reduces:
            col = self.lane(red.var)
            acc, nan = accs[red.var]
            self.emit(d, f"{ctype(red.dtype)} {col}[{self.block}];")
            self.emit(d, f"for (int64_t xl = 0; xl < xn; ++xl) {col}[xl] = "
                         f"{self.result(red, acc, nan)};")
            lanes[red.var] = (red.dtype, col)

    def r_outside(self, d: int, body, lanes: dict, reduces, accs, simd: bool, reuses,
                  saves) -> None:
        """The loop over r outside the block's lanes; float sums accumulated in double
        add up blocks of COLUMN_SUM_BLOCK rows summed in float (lane arrays per block)."""
        blocked = [red for red in reduces if red.dtype != "f64" and
                   acc_type(red, False)[0] == "double"]
        if not blocked:
            self.emit(d, "for (int64_t r = 0; r < rnumel; ++r) {")
            self.lane_loop(d + 1, body, lanes, accs, simd, mask="rmask", reuses=reuses,
                           saves=saves)
            self.emit(d, "}")
            return
        part = {red.var: self.names.fresh(self.var(red.var) + "_part") for red in blocked}
        n = COLUMN_SUM_BLOCK
        self.emit(d, f"for (int64_t rb = 0; rb < rnumel; rb += {n}) {{")
        self.emit(d + 1, f"const int64_t rb_end = rnumel - rb < {n} ? rnumel : rb + {n};")
        for p in part.values():
            self.emit(d + 1, f"float {p}[{self.block}];")
            self.emit(d + 1, f"for (int64_t xl = 0; xl < xn; ++xl) {p}[xl] = 0.0f;")
        self.emit(d + 1, "for (int64_t r = rb; r < rb_end; ++r) {")
        self.lane_loop(d + 2, body, lanes,
                       {**accs, **{v: (f"{p}[xl]", None) for v, p in part.items()}}, simd,
                       mask="rmask", reuses=reuses, saves=saves)
        self.emit(d + 1, "}")
        for v, p in part.items():
            self.emit(d + 1, f"for (int64_t xl = 0; xl < xn; ++xl) {accs[v][0]} += {p}[xl];")
        self.emit(d, "}")

    def lane_loop(self, depth: int, body, lanes: dict, accs, simd: bool,
                  mask: str | None = None, after=(), reuses=None, saves=None,
                  r_inside: bool = False, reduces=()) -> None:
        """for xl in the block: x = x0 + xl (xi = xi0 + xl when x is split in rows), the
        lane values `body` reads unpacked, `body`, then `after` (var, array) stored.
        `reuses` / `saves`: values read from / kept in row buffers (at r * rbw + xl, or
        xl * rnumel + r with r_simd). `r_inside`: `body` runs in a loop over r inside the
        lane's iteration (each lane's r in order as before; lanes are independent); with
        `self.r_simd` that loop runs as SIMD lanes (`simd`) instead of the lanes' loop,
        and `reduces` accumulate into scalars per row, stored into `accs` after it."""
        reuses, saves = reuses or {}, saves or {}
        r_simd = r_inside and self.r_simd
        at = "xl * rnumel + r" if self.r_simd else "r * rbw + xl"
        if simd and not r_simd:
            self.emit(depth, "#pragma omp simd")
        self.emit(depth, "for (int64_t xl = 0; xl < xn; ++xl) {")
        self.emit(depth + 1, "const int64_t x = x0 + xl;")
        if self.rows is not None:
            self.emit(depth + 1, "const int64_t xi = xi0 + xl;")
        self.masks(depth + 1, body, "xmask")
        if mask:
            self.masks(depth + 1, body, mask)
        read = {a for s in body for a in uses(s)}
        env: dict[str, str] = {}
        for var, (dt, arr) in lanes.items():
            if var in read:
                self.emit(depth + 1, f"const {ctype(dt)} {self.var(var)} = {arr}[xl];")
                env[var] = dt
        row_accs = {}
        lanes_of = row_lanes(reduces, self.rn_known) if r_simd else 0
        if lanes_of:
            # one row in blocks of `lanes_of` lanes, each lane its own accumulator, the
            # lanes then summed as a tree (`row_lane_sums`)
            row_accs = self.row_lane_accumulators(depth + 1, reduces, accs, lanes_of)
            depth = self.open_row_lanes(depth + 1, lanes_of, simd) - 1
        elif r_simd:
            # one row: scalar accumulators, reduced over the SIMD lanes along r
            clauses = ""
            for red in reduces:
                decl, init = acc_type(red, True)
                part = self.names.fresh(self.var(red.var) + "_row")
                self.emit(depth + 1, f"{decl} {part} = {init};")
                flag = None
                if accs[red.var][1]:
                    flag = self.names.fresh(self.var(red.var) + "_rownan")
                    self.emit(depth + 1, f"int {flag} = 0;  // saw a NaN")
                    clauses += f" reduction(|:{flag})"
                if red.dtype != "b8":
                    clauses += f" reduction({_CLAUSE[red.kind]}:{part})"
                row_accs[red.var] = (part, flag)
            if simd:
                self.emit(depth + 1, "#pragma omp simd" + clauses)
            self.emit(depth + 1, "for (int64_t r = 0; r < rnumel; ++r) {")
            depth += 1
        elif r_inside:
            # unrolled (GCC keeps a loop with an exp inside), or the lane loop around it
            # does not vectorise ("not suitable for strided load")
            self.emit(depth + 1, f"#pragma GCC unroll {TINY_R}")
            self.emit(depth + 1, "for (int64_t r = 0; r < rnumel; ++r) {")
            depth += 1
        for s in body:
            var = getattr(s, "var", None)
            if var in reuses:
                dt = self.rowplan.buffers[reuses[var]]
                self.emit(depth + 1, f"const {ctype(dt)} {self.var(var)} = "
                                     f"{self.kept(reuses[var], at, env)};")
                env[var] = dt
                continue
            self.stmt(depth + 1, s, env, {**accs, **row_accs} if accs else accs)
            if var in saves:
                self.emit(depth + 1, f"{self.kept(saves[var], at, env)} = {self.var(var)};")
        if lanes_of:
            self.emit(depth + 1, "}")
            self.emit(depth, "}")
            depth -= 2
            row_accs = self.row_lane_sums(depth + 1, reduces, row_accs, lanes_of)
        elif r_inside:
            depth -= 1
            self.emit(depth + 1, "}")
        for var, (part, flag) in row_accs.items():
            acc, nan = accs[var]
            self.emit(depth + 1, f"{acc} = {part};")
            if flag:
                self.emit(depth + 1, f"{nan} = {flag};")
        for var, arr in after:
            self.emit(depth + 1, f"{arr}[xl] = {self.var(var)};")
        self.emit(depth, "}")

    def lane(self, var: str) -> str:
        """The lane array of a value held per column of a block."""
        return self.names.get("column", var)
