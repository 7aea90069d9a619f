"""The loops of a reduce component on the cpu target (a mixin of cpu.py's printer).

A reduce component computes, for every x < xnumel, its loops over r < rnumel
(one per reduction level, then one that stores per-element values) and a per-x
epilogue. Three loop orders, chosen per component:

* rows (the default): x is the parallel loop, each loop over r runs inside it, as
  a SIMD loop; values an earlier loop computed are kept in per-thread row buffers
  (rowbuf.py); an r unravelled over several dims runs as rows of the last one.
* one row (xnumel == 1, a reduction to a scalar): no x loop; each loop over r is
  itself parallel, with OpenMP reductions of the per-thread partial results.
* columns (dense version only, when the inputs are contiguous along x and strided
  along r, and for short rows): blocks of consecutive x are the parallel loop, r runs
  outside and the x of a block inside (columns.py).
"""
from __future__ import annotations

import math

from ...codegen import expr as E
from .flat import PARALLEL_GRAIN, simd_safe
from .index import lowering_value
from .dtypes import REDUCE_CLAUSE as _CLAUSE
from .dtypes import FLOATS, HALVES, INTS, acc_type, ctype
from .columns import TINY_R, ColumnOrder
from .row_lanes import row_lanes
from ...codegen.kernel import Component, Load, Reduce
from .invariant import row_invariants
from .rowbuf import RowPlan, plan_rows

# Float sums over r run in blocks of SUM_BLOCK elements: each block sums in float (SIMD
# lanes, as torch's vectorised sums do), and the blocks add up in double. A float
# accumulator alone drifts ~1e-3 over a row of 1e5 elements; double alone costs a
# conversion and two double adds per 8 elements (a masked softmax's kernel spent 15% of
# its time there). A lane adds SUM_BLOCK / lanes terms in float: 32 with AVX2 (16 with
# AVX-512, 64 with SSE2), so a long row's error is a few ulps whatever its length, as
# with torch's cascade sums (tests/codegen/test_reduction_numerics.py). The variance of
# rows with |mean| >> std (1e4 and 1e-2: squared deviations that repeat and round
# alike) is off by 11 ulps at 512, 5.5 at 256, 3 at 128; 128 cost 5-10% on row sums and
# var_mean rows of 768 and 100000 floats (one thread, 2026-11), 256 nothing measurable
# against 512.
SUM_BLOCK = 256
# rows expected at most this long run in the column order whatever their layout: the
# row order pays per row (accumulators, a loop of rnumel that does not fill a vector) as
# much as for the row's few elements; lanes over x vectorise. One thread, 2026-11:
# sum(x*x, -1) over [131072, 2] 1.23 -> 0.34 ms, [16384, 16] 0.26 -> 0.16 ms, var_mean
# over [16384, 4, 4] dim 2 2.3 -> 0.6 ms, softmax over [32768, 8] 1.46 -> 0.63 ms;
# rows of 32 were slower in columns (0.21 -> 0.26 ms)
SHORT_ROW = 16
# row-order reductions over rows expected at most this long get a version for that length
SMALL_R = 64


def column_major(c: Component, dense, numel: dict[str, int] | None = None) -> bool:
    """Whether the loads of `c`'s loops that stream through memory (their index depends
    on both x and r) read consecutive memory along x rather than along r (in the dense
    version: `dense(index)` is a load's index as it prints there), counting each load by
    its buffer's number of elements (`numel`, 1 each when not given): a big stream
    decides, not the small per-row vectors read beside it (capsule routing's weighted
    sums read a [512, 50, 64] stream along x and three [128, 4, 50] weights along r)."""
    along_x = along_r = 0
    x, r = E.Var("x"), E.Var("r")

    def last_digit(t, var) -> bool:
        return isinstance(t, E.Digit) and t.base == var and t.k == len(t.sizes) - 1
    for loop in c.loops:
        for s in loop.body:
            if not isinstance(s, Load):
                continue
            e = dense(s.index)
            if not {"r", "x"} <= E.free_vars(e):
                continue      # per x (a channel's weight) or per r (a row's mean): not streams
            terms = e.terms if isinstance(e, E.Add) else (e,)
            weight = numel.get(s.buffer, 1) if numel else 1
            # x or r itself, or the last digit of an unravelled x or r (rows of the last dim)
            along_x += weight * any(t == x or last_digit(t, x) for t in terms)
            along_r += weight * any(t == r or last_digit(t, r) for t in terms)
    return along_x > 0 and along_x > along_r


def short_rows(c: Component, expected) -> bool:
    """Whether `c`'s rows are expected to have at most SHORT_ROW elements (r's size
    at lowering time), over several rows."""
    rn = lowering_value(c.rnumel, expected)
    xn = lowering_value(c.xnumel, expected)
    return rn is not None and rn <= SHORT_ROW and (xn is None or xn > 1)


class ReduceLoops(ColumnOrder):
    """Printing of reduce components; mixed into cpu._Printer."""

    def reduce_component(self, depth: int, c: Component) -> None:
        if c.xnumel == E.ONE:
            self.single_row(depth, c)
            return
        numel = {b.name: max(1, math.prod(b.shape)) for b in self.k.buffers}
        by_columns = self.fast and column_major(c, lambda e: self.form(e, True), numel)
        if self.fast and (short_rows(c, self.expected) or by_columns):
            rn = lowering_value(c.rnumel, self.expected)
            known = type(rn) is int and not E.free_vars(c.rnumel)
            # (contiguous rows longer than TINY_R: blocks of rows, SIMD along each row)
            r_simd = known and TINY_R < rn <= SHORT_ROW and not by_columns
            if known and 1 < rn <= TINY_R or r_simd:
                # rows as long as expected get their own version: rnumel a constant, the
                # loop over r inside each lane loop, where it unrolls (loops over r of 4
                # around lane loops cost more than their few elements), or runs as SIMD
                # lanes along a contiguous row (ROWS_BLOCK)
                self.emit(depth, f"if (rnumel == {rn}) {{")
                self.emit(depth + 1, f"const int64_t rnumel = {rn};  // shadows: "
                                     + ("known trips" if r_simd else "r unrolls"))
                self.r_inside, self.r_simd, self.rn_known = True, r_simd, rn
                try:
                    self.columns(depth + 1, c)
                finally:
                    self.r_inside = self.r_simd = False
                    self.rn_known = None
                self.emit(depth, "} else {")
                self.columns(depth + 1, c)
                self.emit(depth, "}")
                return
            self.columns(depth, c)
            return
        rn = lowering_value(c.rnumel, self.expected)
        # (a size whose lowering-time value is symbolic, dynamic training's batch, has no
        # version of its own: the value must print as a C literal)
        if self.fast and type(rn) is int and 1 < rn <= SMALL_R and not E.free_vars(c.rnumel):
            # short rows as long as expected get their own version: rnumel a constant,
            # the loops over r have known trips (no remainder loops, SUM_BLOCK's blocks
            # fold away; mean over rows of 32: 1.25x Inductor's time with them)
            self.emit(depth, f"if (rnumel == {rn}) {{")
            self.emit(depth + 1, f"const int64_t rnumel = {rn};  // shadows: known trips")
            self.rn_known = rn
            try:
                self.row_order(depth + 1, c)
            finally:
                self.rn_known = None
            self.emit(depth, "} else {")
            self.row_order(depth + 1, c)
            self.emit(depth, "}")
            return
        self.row_order(depth, c)

    def row_order(self, depth: int, c: Component) -> None:
        """x the parallel loop, each loop over r inside it (the module docstring's rows)."""
        self.rowplan = plan_rows(c)
        parallel = f"if(parallel: xnumel > 1 && xnumel * rnumel >= {PARALLEL_GRAIN})"
        outer = depth
        if self.rowplan:
            self.emit(depth, f"#pragma omp parallel {parallel}")
            self.emit(depth, "{")
            depth += 1
            self.row_buffers(depth)
            self.emit(depth, "#pragma omp for schedule(static)")
        else:
            self.emit(depth, f"#pragma omp parallel for schedule(static) {parallel}")
        self.emit(depth, "for (int64_t x = 0; x < xnumel; ++x) {")
        self.row_loops(depth + 1, c)
        self.emit(depth, "}")
        if self.rowplan:
            self.free_row_buffers(depth)
            self.emit(outer, "}")
        self.rowplan = RowPlan()

    def single_row(self, depth: int, c: Component) -> None:
        """xnumel == 1: the loops over r are the parallel ones."""
        self.rowplan = plan_rows(c)
        self.emit(depth, "{  // one row: the loops over r run in parallel")
        self.emit(depth + 1, "const int64_t x = 0;")
        self.row_buffers(depth + 1)
        self.parallel_r = True
        self.row_loops(depth + 1, c)
        self.parallel_r = False
        self.free_row_buffers(depth + 1)
        self.emit(depth, "}")
        self.rowplan = RowPlan()

    def row_loops(self, depth: int, c: Component) -> None:
        everything = [s for loop in c.loops for s in loop.body] + list(c.body)
        self.masks(depth, everything, "xmask")
        env: dict[str, str] = {}
        for j, loop in enumerate(c.loops):
            self.loop(depth, j, loop.body, env)
        if c.body:
            if c.loops:
                self.emit(depth, "// per x")
            self.stmts(depth, c.body, env, None)

    def row_buffers(self, depth: int) -> None:
        """One row buffer per kept value (rowbuf.py), per thread."""
        for buf, dt in self.rowplan.buffers.items():
            ct = ctype(dt)
            self.emit(depth, f"{ct}* __restrict__ const {self.rowbuf(buf)} = ({ct}*)__builtin_malloc("
                             f"sizeof({ct}) * (rnumel > 0 ? rnumel : 1));")

    def free_row_buffers(self, depth: int) -> None:
        for buf in self.rowplan.buffers:
            if buf not in self.stashes:
                self.emit(depth, f"__builtin_free({self.rowbuf(buf)});")

    def rowbuf(self, name: str) -> str:
        return self.names.get("rowbuf", name)

    # -- accumulators
    def accumulators(self, depth: int, reduces, lanes: bool = False):
        """Declare and initialise each reduction's accumulator (an array over the block's
        columns with `lanes`): ({var: (acc, nan flag or None)}, OpenMP reduction clauses,
        whether the loop may run as SIMD lanes)."""
        accs, clauses, simd = {}, [], True
        for red in reduces:
            dt = red.dtype
            if red.var not in self.acc_names:    # the same names in both versions
                self.acc_names[red.var] = (self.names.fresh(self.var(red.var) + "_acc"),
                                           self.names.fresh(self.var(red.var) + "_nan"))
            acc, nan = self.acc_names[red.var]
            simd = simd and dt != "b8"
            # (rows of at most TINY_R or SHORT_ROW terms, r inside the lanes: no more
            # terms in float than a lane of the row order's SUM_BLOCK adds)
            decl, init = acc_type(red, lanes and self.r_inside)
            flag = nan if dt in FLOATS and red.kind in ("max", "min") else None
            if lanes:
                self.emit(depth, f"{decl} {acc}[{self.block}];")
                if flag:
                    self.emit(depth, f"int {flag}[{self.block}];  // saw a NaN")
                self.emit(depth, f"for (int64_t xl = 0; xl < xn; ++xl) {{ {acc}[xl] = {init};"
                                 + (f" {flag}[xl] = 0;" if flag else "") + " }")
                accs[red.var] = (f"{acc}[xl]", f"{flag}[xl]" if flag else None)
                continue
            self.emit(depth, f"{decl} {acc} = {init};")
            if flag:
                self.emit(depth, f"int {flag} = 0;  // saw a NaN")
                clauses.append(f"|:{flag}")
            if dt != "b8":
                clauses.append(f"{_CLAUSE[red.kind]}:{acc}")
            accs[red.var] = (acc, flag)
        return accs, clauses, simd

    def result(self, red: Reduce, acc: str, nan: str | None) -> str:
        """The C value of a finished reduction from its accumulator."""
        value = acc
        if nan:
            value = f"{nan} ? fs::nan : {acc}"
        elif red.dtype in INTS and red.kind in ("sum", "prod") or \
                red.dtype in FLOATS and red.kind == "sum":
            value = f"({ctype(red.dtype)}){acc}"
        if red.dtype in HALVES:
            value = f"fs::{red.dtype}_round({value})"
        return value

    # -- a loop over r (rows and one-row orders)
    def loop(self, depth: int, j: int, body, env: dict[str, str]) -> None:
        reduces = [s for s in body if isinstance(s, Reduce)]
        accs, clauses, simd = self.accumulators(depth, reduces)
        simd = simd and simd_safe(body, ("r",))
        self.emit(depth, f"// loop {j} over r")
        inside = dict(env)     # what the loop body sees: hoisted values, then its own
        invariant = self.invariant(j, body)
        outer = depth
        if invariant:
            # what is the same for every r of the row runs once, before the loop, in a
            # block the loop's own emptiness guards (nothing it computes ran for an empty
            # row before, and a load of the row's first element may not be valid then)
            self.emit(depth, "if (rnumel > 0) {")
            depth += 1
        # the per-x index terms the loop reads are computed once before it
        with self.hoisting(depth, {"x"}):
            if invariant:
                self.masks(depth, invariant, "rmask")
                for s in invariant:
                    self.stmt(depth, s, inside, accs)
            reduction = "".join(f" reduction({c})" for c in clauses)
            parallel = None
            if self.parallel_r and simd:
                parallel = (f"#pragma omp parallel for{reduction} schedule(static) "
                            f"if(parallel: rnumel >= {PARALLEL_GRAIN})")
            rows = self.split_sizes(body, "r")
            blocked = [red for red in reduces if red.kind == "sum" and red.dtype in FLOATS
                       and red.dtype != "f64"] if rows is None and simd and not parallel \
                else []
            body_accs = accs          # what the loop body accumulates into
            lanes = row_lanes(reduces, self.rn_known) \
                if simd and not parallel and rows is None else 0
            if lanes:
                # a row of known length in blocks of `lanes` lanes, each lane its own
                # accumulator, the lanes combined as a tree after the row (`row_lane_sums`)
                blocked = []
                self.emit(depth, "{")
                body_accs = self.row_lane_accumulators(depth + 1, reduces, accs, lanes)
                inner = self.open_row_lanes(depth + 1, lanes, True)
            elif blocked:
                # r in blocks: float partial sums per block, added into the double accumulators
                part_of = {accs[red.var][0]: self.names.fresh(self.var(red.var) + "_part")
                           for red in blocked}
                body_accs = {**accs, **{red.var: (part_of[accs[red.var][0]], None)
                                        for red in blocked}}
                reduction = "".join(
                    f" reduction(+:{part_of[c[2:]]})" if c.startswith("+:") and c[2:] in part_of
                    else f" reduction({c})" for c in clauses)
                self.emit(depth, "{")
                self.emit(depth + 1, f"for (int64_t rb = 0; rb < rnumel; rb += {SUM_BLOCK}) {{")
                self.emit(depth + 2, f"const int64_t rb_end = rnumel - rb < {SUM_BLOCK} ? "
                                     f"rnumel : rb + {SUM_BLOCK};")
                for part in part_of.values():
                    self.emit(depth + 2, f"float {part} = 0.0f;")
                self.emit(depth + 2, "#pragma omp simd" + reduction)
                self.emit(depth + 2, "for (int64_t r = rb; r < rb_end; ++r) {")
                inner = depth + 3
            elif rows is None:
                if parallel:
                    self.emit(depth, parallel.replace(" for", " for simd", 1))
                elif simd:
                    self.emit(depth, "#pragma omp simd" + reduction)
                self.emit(depth, "for (int64_t r = 0; r < rnumel; ++r) {")
                inner = depth + 1
            else:
                # r = ro * rinner + ri: the inner loop runs along the last dim r is unravelled
                # over (contiguous rows of a batch-norm reduction over N, H, W), dividing nothing
                last = self.index(rows[-1], {})
                self.emit(depth, "{")
                self.emit(depth + 1, f"const int64_t rinner = {last} > 0 ? {last} : 1;")
                self.emit(depth + 1, "const int64_t router = (rnumel + rinner - 1) / rinner;")
                if parallel:
                    self.emit(depth + 1, parallel)
                self.emit(depth + 1, "for (int64_t ro = 0; ro < router; ++ro) {")
                self.emit(depth + 2, "const int64_t ri_end = rnumel - ro * rinner < rinner ? "
                                     "rnumel - ro * rinner : rinner;")
                if simd:
                    self.emit(depth + 2, "#pragma omp simd" + reduction)
                self.emit(depth + 2, "for (int64_t ri = 0; ri < ri_end; ++ri) {")
                self.emit(depth + 3, "const int64_t r = ro * rinner + ri;")
                inner = depth + 3
            hoisted = frozenset(s.var for s in invariant)
            self.masks(inner, [s for s in body if getattr(s, "var", None) not in hoisted],
                       "rmask")
            self.rrows = rows
            self.loop_stmts(inner, j, body, inside, body_accs, hoisted)
            self.rrows = None
            if lanes:
                self.emit(depth + 2, "}")
                self.emit(depth + 1, "}")
                sums = self.row_lane_sums(depth + 1, reduces, body_accs, lanes)
                for red in reduces:
                    (acc, nan), (value, flag) = accs[red.var], sums[red.var]
                    self.emit(depth + 1, f"{acc} = {value};")
                    if nan:
                        self.emit(depth + 1, f"{nan} = {flag};")
            if blocked:
                self.emit(depth + 2, "}")
                for acc, part in part_of.items():
                    self.emit(depth + 2, f"{acc} += {part};")
                self.emit(depth + 1, "}")
            if rows is not None:
                self.emit(depth + 2, "}")
                self.emit(depth + 1, "}")
            self.emit(depth, "}")
        if invariant:
            self.emit(outer, "}")
            depth = outer
        # results, visible to later loops and the epilogue
        for red in reduces:
            self.emit(depth, f"const {ctype(red.dtype)} {self.var(red.var)} = "
                             f"{self.result(red, *accs[red.var])};")
            env[red.var] = red.dtype

    def invariant(self, j: int, body) -> list:
        """What loop `j` over r computes once per row, before it (invariant.py)."""
        plan = self.rowplan
        return row_invariants(body, frozenset(plan.reuses.get(j, {})), plan.live.get(j),
                              self.k.may_alias)

    def loop_stmts(self, depth: int, j: int, body, env: dict[str, str], accs,
                   hoisted=frozenset()) -> None:
        """The body of loop `j` over r: values kept from an earlier loop are read from
        their row buffer, values a later loop reads again are stored to one, and what
        nothing needs any more is not computed (rowbuf.py). `hoisted`: values computed
        before the loop (`invariant`), only saved here."""
        plan = self.rowplan
        reuses, saves = plan.reuses.get(j, {}), plan.saves.get(j, {})
        live = plan.live.get(j)
        for s in body:
            var = getattr(s, "var", None)
            if live is not None and var is not None and var not in live:
                continue
            if var in hoisted:
                if var in saves:
                    self.emit(depth, f"{self.rowbuf(saves[var])}[r] = {self.var(var)};")
                continue
            if var in reuses:
                dt = plan.buffers[reuses[var]]
                self.emit(depth, f"const {ctype(dt)} {self.var(var)} = "
                                 f"{self.rowbuf(reuses[var])}[r];")
                env[var] = dt
                continue
            self.stmt(depth, s, env, accs)
            if var in saves:
                self.emit(depth, f"{self.rowbuf(saves[var])}[r] = {self.var(var)};")
