"""Flat components on the cpu target (a mixin of cpu.py's printer): the parallel loop
over x, unsplit or in rows (x = xo * xinner + xi, see cpu.py's docstring), and the
thresholds that decide it.

    PARALLEL_GRAIN      work below which a component runs serially (reductions too)
    serial_pragma(t)    what a thread-team pragma becomes in a component statically
                        below it (printed with no OpenMP region at all)
    simd_safe(body, v)  whether a loop over v may run as SIMD lanes (reductions too)
"""
from __future__ import annotations

import contextlib
import math
import re

from ...codegen import expr as E
from .index import digit_sizes, lowering_value, split_rows, split_term, static_value
from .dtypes import ctype
from ...codegen.kernel import TRANSCENDENTAL_OPS, Component, Constant, Index, Load, Op, Store
from .rowbuf import uses


# below this much work (x iterations, or x*r for reductions) a component runs serially
PARALLEL_GRAIN = 32768
# a flat loop split in rows runs blocks of at most this many elements of a row; it is
# split only when rows are expected to have at least MIN_ROW elements, or MIN_COSTLY_ROW
# when the loop calls a math function (COSTLY_OPS): unsplit, a broadcast operand's index
# costs an int64 division or modulo per element, which no x86 SIMD unit has, so the loop
# and its exp, tanh or sin run scalar: tanh(x + w[4]) over [8, 8192, 4] took 8.5-12.5 ms
# unsplit against 1.1-1.3 ms in rows of 4 (one thread, 2026-11; Inductor 2.6 ms). A cheap
# body gains nothing from rows that short (x + w[4]: 0.7 ms unsplit, 0.5-1.2 in rows)
ROW_BLOCK = 4096
# rows expected shorter than this may run across rows (xi outside, xo inside: across_rows)
ACROSS_ROW = 8
# row caches (FlatLoops.row_cache) hold this many blocks of ROW_BLOCK values per thread
RC_SLOTS = 16
# a flat loop in rows that reads or writes across them (a transposition of the last two
# dims: contiguous along the rows' index, strided along a row) runs in tiles of TILE_ROWS
# rows by TILE_COLS elements of a row (FlatLoops.tiled), for rows of TILE_COLS or more
TILE_ROWS = 16
TILE_COLS = 64
MIN_ROW = 16
MIN_COSTLY_ROW = 2
# a static loop in rows over three or more sizes whose rows are shorter than MIN_ROW runs
# as nested loops, one per size (FlatLoops.nested); the leading ones are collapsed into
# the parallel loop until it has at least NEST_PARALLEL iterations
NEST_PARALLEL = 64
COSTLY_OPS = TRANSCENDENTAL_OPS     # math functions: a libmvec or preamble call each


# the pragmas that start or share out a team of threads
OMP_THREADS = ("#pragma omp parallel", "#pragma omp for")


def serial_pragma(text: str) -> str | None:
    """What a thread-team pragma becomes in a component that runs on one thread: a
    `parallel for simd` loop keeps its `simd` and reductions (the same vector code and
    sums as before, where one thread ran it), any other goes (its region is a block)."""
    if not text.startswith("#pragma omp parallel for simd"):
        return None
    return "#pragma omp simd" + "".join(
        " " + m for m in re.findall(r"reduction\([^)]*\)", text))

def digits_of(e: E.Expr, var: str) -> set[E.Expr]:
    """The digits of loop variable `var` over two or more sizes in `e` (each one a
    division or a modulo when printed)."""
    if isinstance(e, E.Digit) and e.base == E.Var(var) and len(e.sizes) >= 2:
        return {e}
    return {d for c in E.children(e) for d in digits_of(c, var)}


def simd_safe(body, loop_vars: tuple[str, ...]) -> bool:
    """Whether the iterations of a loop over `loop_vars` may run as SIMD lanes: every
    store writes an index that moves with the loop and reads no loaded value."""
    for s in body:
        if isinstance(s, Store):
            fv = E.free_vars(s.index)
            if not fv & set(loop_vars) or fv - {"x", "r"}:
                return False
    return True


class FlatLoops:
    """Printing of flat components; mixed into cpu._Printer."""

    def flat_loop(self, depth: int, c: Component) -> None:
        simd = "simd " if simd_safe(c.body, ("x",)) else ""
        rows = self.row_sizes(c)
        if rows is None:
            self.emit(depth, f"#pragma omp parallel for {simd}schedule(static) "
                             f"if(parallel: xnumel >= {PARALLEL_GRAIN})")
            self.emit(depth, "for (int64_t x = 0; x < xnumel; ++x) {")
            self.masks(depth + 1, c.body, "xmask")
            self.stmts(depth + 1, c.body, {}, None)
            self.emit(depth, "}")
            return
        if self.transposed(c, rows):
            self.flat_transposed(depth, c, rows, simd)
            return
        if self.across_rows(c.body, rows):
            self.flat_across_rows(depth, c, rows, simd)
            return
        if self.nested(c, rows):
            self.flat_nested(depth, c, rows, simd)
            return
        if self.tiled(c, rows):
            self.flat_tiled(depth, c, rows, simd)
            return
        k = self.tile_digit(c, rows)
        if k is not None:
            self.flat_tiled_along(depth, c, rows, simd, k)
            return
        # x = xo * xinner + xi with 0 <= xi < xinner: the last digit of x over `rows` is
        # xi and the others are digits of xo, exactly, whatever xnumel is (the last row
        # may be partial). The inner loop divides nothing (broadcast operands) and
        # vectorises; the parallel loop runs over blocks of rows.
        last = self.index(rows[-1], {})
        self.emit(depth, f"const int64_t xinner = {last} > 0 ? {last} : 1;  "
                         f"// x = xo * xinner + xi")
        self.emit(depth, "const int64_t xouter = (xnumel + xinner - 1) / xinner;")
        self.emit(depth, f"const int64_t xblocks = (xinner + {ROW_BLOCK - 1}) / {ROW_BLOCK};")
        cache = self.row_cache(c.body, rows)
        outer = depth
        if cache:
            # per thread: RC_SLOTS blocks of a row's values (a row longer than ROW_BLOCK
            # runs in blocks, which alternate), each with the key of the row group and
            # block it holds (rc_keys) and its end (rc_ends)
            self.emit(depth, f"const int64_t xrc = xinner < {ROW_BLOCK} ? xinner : {ROW_BLOCK};")
            self.emit(depth, f"const int64_t rc_slots = xblocks < {RC_SLOTS} ? xblocks : "
                             f"{RC_SLOTS};")
            self.emit(depth, f"#pragma omp parallel if(parallel: xnumel >= {PARALLEL_GRAIN})")
            self.emit(depth, "{")
            depth += 1
            for var, (dt, arr) in cache.items():
                ct = ctype(dt)
                self.emit(depth, f"{ct}* __restrict__ const {arr} = ({ct}*)"
                                 f"__builtin_malloc(sizeof({ct}) * xrc * rc_slots);")
            self.emit(depth, f"int64_t rc_keys[{RC_SLOTS}], rc_ends[{RC_SLOTS}];")
            self.emit(depth, f"for (int i = 0; i < {RC_SLOTS}; ++i) "
                             "{ rc_keys[i] = -1; rc_ends[i] = -1; }")
            self.emit(depth, "#pragma omp for schedule(static)")
        else:
            self.emit(depth, f"#pragma omp parallel for schedule(static) "
                             f"if(parallel: xnumel >= {PARALLEL_GRAIN})")
        self.emit(depth, "for (int64_t xblock = 0; xblock < xouter * xblocks; ++xblock) {")
        # rows are mostly shorter than a block: no division per (short) row then
        self.emit(depth + 1, "const int64_t xo = xblocks == 1 ? xblock : xblock / xblocks;")
        self.emit(depth + 1, f"const int64_t xi_begin = xblocks == 1 ? 0 : "
                             f"(xblock % xblocks) * {ROW_BLOCK};")
        self.emit(depth + 1, f"int64_t xi_end = xi_begin + {ROW_BLOCK} < xinner ? "
                             f"xi_begin + {ROW_BLOCK} : xinner;")
        self.emit(depth + 1, "if (xi_end > xnumel - xo * xinner) xi_end = xnumel - xo * xinner;")
        # index terms of the row (xo only: its base offsets, with divisions) are computed
        # once before the inner loop, which then vectorises
        with self.hoisting(depth + 1, {"xo"}):
            self.rows = rows
            body, env = c.body, {}
            if cache:
                body, env = self.fill_row_cache(depth + 1, c.body, rows, cache)
            if simd:
                self.emit(depth + 1, "#pragma omp simd")
            self.emit(depth + 1, "for (int64_t xi = xi_begin; xi < xi_end; ++xi) {")
            self.emit(depth + 2, "const int64_t x = xo * xinner + xi;")
            self.masks(depth + 2, body, "xmask")
            for var, (dt, arr) in cache.items():
                self.emit(depth + 2, f"const {ctype(dt)} {self.var(var)} = "
                                     f"{arr}[rc_base + xi - xi_begin];")
            self.stmts(depth + 2, body, env, None)
            self.rows = None
            self.emit(depth + 1, "}")
        self.emit(depth, "}")
        if cache:
            for _, arr in cache.values():
                self.emit(depth, f"__builtin_free({arr});")
            self.emit(outer, "}")

    def across_rows(self, body, rows) -> bool:
        """Whether x = xo * xinner + xi runs xi outside and xo inside: rows expected
        shorter than ACROSS_ROW (a loop over them fills no vector) over two sizes, whose
        accesses read a row's value (at xo alone) more often than they read along xi.
        A stack of per-row vectors (cat of [N, 1] columns into [N, 4]) then reads each
        operand contiguously with its select uniform, where rows of 4 ran a select chain
        per element (3x Inductor's four strided copies)."""
        last = lowering_value(rows[-1], self.expected)
        if len(rows) != 2 or type(last) is not int or last >= ACROSS_ROW:
            return False
        per_row = along = 0
        for s in body:
            if isinstance(s, (Load, Store)):
                fv = E.free_vars(split_rows(self.form(s.index, True), rows))
                if "xi" in fv or "x" in fv:
                    along += 1
                elif "xo" in fv:
                    per_row += 1
        return per_row > along

    def flat_across_rows(self, depth: int, c: Component, rows, simd: str) -> None:
        """The flat loop with xi outside and xo inside, in blocks of ROW_BLOCK rows (the
        parallel loop)."""
        last = self.index(rows[-1], {})
        self.emit(depth, f"const int64_t xinner = {last} > 0 ? {last} : 1;  "
                         f"// x = xo * xinner + xi, xi outside")
        self.emit(depth, "const int64_t xouter = (xnumel + xinner - 1) / xinner;")
        self.emit(depth, f"#pragma omp parallel for schedule(static) "
                         f"if(parallel: xnumel >= {PARALLEL_GRAIN})")
        self.emit(depth, f"for (int64_t xob = 0; xob < xouter; xob += {ROW_BLOCK}) {{")
        self.emit(depth + 1, f"const int64_t xo_block_end = xouter - xob < {ROW_BLOCK} ? "
                             f"xouter : xob + {ROW_BLOCK};")
        self.emit(depth + 1, "for (int64_t xi = 0; xi < xinner; ++xi) {")
        d = depth + 2
        # the rows holding element xi: xo * xinner + xi < xnumel (the last may be partial)
        self.emit(d, "const int64_t xo_lim = (xnumel - xi + xinner - 1) / xinner;")
        self.emit(d, "const int64_t xo_end = xo_block_end < xo_lim ? xo_block_end : xo_lim;")
        with self.hoisting(d, {"xi"}):
            if simd:
                self.emit(d, "#pragma omp simd")
            self.emit(d, "for (int64_t xo = xob; xo < xo_end; ++xo) {")
            self.emit(d + 1, "const int64_t x = xo * xinner + xi;")
            self.masks(d + 1, c.body, "xmask")
            self.rows = rows
            self.stmts(d + 1, c.body, {}, None)
            self.rows = None
            self.emit(d, "}")
        self.emit(depth + 1, "}")
        self.emit(depth, "}")

    def transposed(self, c: Component, rows) -> bool:
        """Whether x over `rows` (static, exactly xnumel, rows shorter than ACROSS_ROW)
        runs as a transposition: the last row dim innermost, xi just outside it. So when
        a load reads along that dim contiguously (NCHW read into NHWC with C = 3, every
        conv net's first layer run channels-last): rows of 3 ran a loop of 3 per row,
        2.2x Inductor's copy."""
        values = [lowering_value(r, self.expected) for r in rows]
        total = lowering_value(c.xnumel, self.expected)
        if len(rows) < 2 or None in values or total is None or values[-1] >= ACROSS_ROW \
                or values[-2] < MIN_ROW or math.prod(values) != total:
            return False
        last = E.Digit(E.Var("xo"), tuple(rows[:-1]), len(rows) - 2)
        for s in c.body:
            if isinstance(s, Load):
                e = split_rows(self.form(s.index, True), rows)
                terms = e.terms if isinstance(e, E.Add) else (e,)
                if last in terms and E.Var("xi") not in terms:
                    return True
        return False

    def tiled(self, c: Component, rows) -> bool:
        """Whether the loop in rows runs in tiles (`flat_tiled`): some load or store reads
        the last digit of xo at unit stride and xi at a larger one (an NHWC operand read
        into NCHW, NCHW into NHWC rows, a matrix's transpose), rows have TILE_COLS or
        more elements and xo's last digit runs over TILE_ROWS or more. Row by row, such
        an access touches a new cache line per element, each one read again by the next
        rows only after the whole row went by (a [8, 256, 56, 56] batch norm over an
        NHWC convolution's output: 3.6x Inductor's tiled transposition); a tile reads
        TILE_COLS lines TILE_ROWS times over while they are in L1."""
        inner = lowering_value(rows[-1], self.expected)
        if inner is None or inner < TILE_COLS or self.row_cache(c.body, rows):
            return False
        for s in c.body:
            if not isinstance(s, (Load, Store)):
                continue
            e = split_rows(self.form(s.index, True), rows)
            along = across = None
            for t in e.terms if isinstance(e, E.Add) else (e,):
                pos, coef = split_term(t, self.expected)
                step = lowering_value(coef, self.expected)
                if pos == E.Var("xi"):
                    along = step
                elif step == 1 and self.last_digit_of_xo(pos) >= TILE_ROWS:
                    across = step
            if across is not None and along is not None and abs(along) >= 2:
                return True
        return False

    def last_digit_of_xo(self, pos: E.Expr | None) -> int:
        """The expected size of the range of `pos` when it is xo or its last digit over
        some sizes (consecutive rows, consecutive positions), else 0."""
        if pos == E.Var("xo"):
            return 1 << 62
        if isinstance(pos, E.Digit) and pos.k == len(pos.sizes) - 1:
            # (a digit over one size is its base: xo over [xouter] as split_rows gives it)
            base = self.last_digit_of_xo(pos.base)
            if base and len(pos.sizes) == 1:
                return base
            return min(base, lowering_value(pos.sizes[-1], self.expected) or 0)
        return 0

    def flat_tiled(self, depth: int, c: Component, rows, simd: str) -> None:
        """The loop in rows x = xo * xinner + xi as tiles of TILE_ROWS rows (xo) by
        TILE_COLS elements (xi), a tile's rows one after the other (`tiled`)."""
        last = self.index(rows[-1], {})
        self.emit(depth, f"const int64_t xinner = {last} > 0 ? {last} : 1;  "
                         f"// x = xo * xinner + xi, in tiles of {TILE_ROWS} x {TILE_COLS}")
        self.emit(depth, "const int64_t xouter = (xnumel + xinner - 1) / xinner;")
        self.emit(depth, f"const int64_t xtiles = (xinner + {TILE_COLS - 1}) / {TILE_COLS};")
        self.emit(depth, f"#pragma omp parallel for schedule(static) "
                         f"if(parallel: xnumel >= {PARALLEL_GRAIN})")
        self.emit(depth, f"for (int64_t xtile = 0; xtile < (xouter + {TILE_ROWS - 1}) / "
                         f"{TILE_ROWS} * xtiles; ++xtile) {{")
        d = depth + 1
        self.emit(d, f"const int64_t xo_begin = xtile / xtiles * {TILE_ROWS};")
        self.emit(d, f"const int64_t xo_end = xo_begin + {TILE_ROWS} < xouter ? "
                     f"xo_begin + {TILE_ROWS} : xouter;")
        self.emit(d, f"const int64_t xi_begin = xtile % xtiles * {TILE_COLS};")
        self.emit(d, f"const int64_t xi_stop = xi_begin + {TILE_COLS} < xinner ? "
                     f"xi_begin + {TILE_COLS} : xinner;")
        self.tile(d, c, rows, simd, self.staged_accesses(c, rows),
                  [f"xo_end - xo_begin == {TILE_ROWS}", f"xi_stop - xi_begin == {TILE_COLS}",
                   "xo_end * xinner <= xnumel"], TILE_ROWS, None)
        self.emit(depth, "}")

    def tile(self, d: int, c: Component, rows, simd: str, staged, whole: list[str],
             trows: int, step: str | None) -> None:
        """One tile's rows (`tile_rows`). With `staged` loads, a whole tile (`whole`, C
        conditions) reads its transposed operands through tiles of their own, each
        filled by 8 x 8 transpositions in registers; a partial one (the last rows or
        columns) reads them element by element."""
        if not staged:
            self.tile_rows(d, c, rows, simd, step)
            return
        conds = whole + sorted({t for _, _, cs in staged.values() for t in cs})
        self.emit(d, f"if ({' && '.join(conds)}) {{")
        if step is None:
            writes = self.stage(d + 1, staged, rows)
        else:
            writes = self.stage(d + 1, staged, rows, trows, step, "xr")
        self.tile_rows(d + 1, c, rows, simd, step)
        self.staged = {}
        self.write_staged(d + 1, writes, rows)
        self.emit(d, "} else {")
        self.tile_rows(d + 1, c, rows, simd, step)
        self.emit(d, "}")

    def tile_rows(self, d: int, c: Component, rows, simd: str, step: str | None = None
                  ) -> None:
        """The rows of one tile (`flat_tiled`): consecutive rows xo_begin .. xo_end, or
        with `step` (the stride of the tile's digit in xo, `flat_tiled_along`) xrows
        rows xo = xo_begin + xr * step."""
        if step is None:
            self.emit(d, "for (int64_t xo = xo_begin; xo < xo_end; ++xo) {")
        else:
            self.emit(d, "for (int64_t xr = 0; xr < xrows; ++xr) {")
            self.emit(d + 1, f"const int64_t xo = xo_begin + xr * {step};")
        # the last row may be partial
        self.emit(d + 1, "const int64_t xi_end = xi_stop < xnumel - xo * xinner ? xi_stop : "
                         "xnumel - xo * xinner;")
        with self.hoisting(d + 1, {"xo"}):
            self.rows = rows
            if simd:
                self.emit(d + 1, "#pragma omp simd")
            self.emit(d + 1, "for (int64_t xi = xi_begin; xi < xi_end; ++xi) {")
            self.emit(d + 2, "const int64_t x = xo * xinner + xi;")
            self.masks(d + 2, c.body, "xmask")
            self.stmts(d + 2, c.body, {}, None)
            self.rows = None
            self.emit(d + 1, "}")
        self.emit(d, "}")

    def tile_digit(self, c: Component, rows) -> int | None:
        """The digit k of xo (over rows[:-1], all of constant binding, their product
        xnumel) that tiles run along (`flat_tiled_along`) when it is not the last: some
        load or store reads it at unit stride and xi at a stride of two or more, over 8
        or more values, rows of 8 or more. A permutation that brings a leading dim last
        ([16, 32, 16, 32] from [32, 32, 16, 16] with dims 0 and 3 swapped) read a new
        cache line per element, each read again only when that leading digit moved: 4x
        Inductor's tiled copy."""
        values = [static_value(r, self.constants) for r in rows]
        if len(rows) < 3 or None in values or 0 in values or values[-1] < 8 \
                or math.prod(values) != static_value(c.xnumel, self.constants) \
                or self.row_cache(c.body, rows):
            return None
        sizes = tuple(rows[:-1])
        for s in c.body:
            if not isinstance(s, (Load, Store)):
                continue
            e = split_rows(self.form(s.index, True), rows)
            along, across = None, []
            for t in e.terms if isinstance(e, E.Add) else (e,):
                pos, coef = split_term(t, self.expected)
                step = lowering_value(coef, self.expected)
                if pos == E.Var("xi"):
                    along = step
                elif step == 1 and isinstance(pos, E.Digit) and pos.base == E.Var("xo") \
                        and pos.sizes == sizes and values[pos.k] >= 8:
                    across.append(pos.k)
            if along is not None and abs(along) >= 2 and across:
                return across[0]
        return None

    def flat_tiled_along(self, depth: int, c: Component, rows, simd: str, k: int) -> None:
        """The loop in rows as tiles of TILE_ROWS (or 8) values of xo's digit k by
        TILE_COLS elements of xi (`tile_digit`): x = xo * xinner + xi with xo = (a * Sk +
        j) * step + b (Sk the digit's size, step the product of the sizes after it), a
        tile one (a, b) and a block of j, its rows step apart."""
        sizes = [self.index(r, {}) for r in rows]
        size_k = static_value(rows[k], self.constants)
        trows = TILE_ROWS if size_k >= TILE_ROWS else 8
        step = " * ".join(f"({z})" for z in sizes[k + 1:-1]) or "1"
        self.emit(depth, f"// x = xo * {sizes[-1]} + xi, in tiles of {trows} x {TILE_COLS} "
                         f"along xo's digit {k} (stride {step})")
        self.emit(depth, f"const int64_t xinner = {sizes[-1]};")
        self.emit(depth, f"const int64_t xstep = {step};")
        self.emit(depth, f"const int64_t xsk = {sizes[k]};")
        self.emit(depth, f"const int64_t xkb = (xsk + {trows - 1}) / {trows};")
        self.emit(depth, f"const int64_t xtiles = (xinner + {TILE_COLS - 1}) / {TILE_COLS};")
        self.emit(depth, "const int64_t xgroups = xnumel / (xinner * xsk * xstep);")
        self.emit(depth, f"#pragma omp parallel for schedule(static) "
                         f"if(parallel: xnumel >= {PARALLEL_GRAIN})")
        self.emit(depth, "for (int64_t xtile = 0; xtile < xgroups * xkb * xstep * xtiles; "
                         "++xtile) {")
        d = depth + 1
        # xtile = ((a * xkb + jb) * xstep + b) * xtiles + t
        self.emit(d, "const int64_t xt = xtile % xtiles, xq = xtile / xtiles;")
        self.emit(d, "const int64_t xb = xq % xstep, xq2 = xq / xstep;")
        self.emit(d, "const int64_t xjb = xq2 % xkb, xa = xq2 / xkb;")
        self.emit(d, f"const int64_t xj_begin = xjb * {trows};")
        self.emit(d, f"const int64_t xrows = xsk - xj_begin < {trows} ? xsk - xj_begin : "
                     f"{trows};")
        self.emit(d, "const int64_t xo_begin = (xa * xsk + xj_begin) * xstep + xb;")
        self.emit(d, f"const int64_t xi_begin = xt * {TILE_COLS};")
        self.emit(d, f"const int64_t xi_stop = xi_begin + {TILE_COLS} < xinner ? "
                     f"xi_begin + {TILE_COLS} : xinner;")
        self.tile(d, c, rows, simd, self.staged_accesses(c, rows, k),
                  [f"xrows == {trows}", "(xi_stop - xi_begin) % 8 == 0"], trows, "xstep")
        self.emit(depth, "}")

    def staged_accesses(self, c: Component, rows, k: int | None = None
                        ) -> dict[str | int, tuple[Load | Store, str, list[str]]]:
        """The float loads (and stores) of a tiled loop that read (write) a tile
        transposed: xi at a stride of two or more and the last digit of xo at unit
        stride (an NHWC operand read as NCHW rows, an NHWC copy written from them), the
        other terms fixed within an aligned tile of TILE_ROWS rows, unmasked: {a load's
        var or a store's id: (it, its stride along xi printed, conditions)}, the conditions
        (C text) that make the tile of rows consecutive in memory at run time (that unit
        stride, the digit's size a multiple of TILE_ROWS) where the expected values are
        not compile-time constants. Read element by element, each is a gather that
        touches a new cache line per element (the sum of two channels-last images read
        as NCHW: 2.5-3.5x Inductor's tiled transpositions); each store one scattered
        store (an activation and its NHWC copy: 2.2x). With `k`, the tile's rows are
        the values of xo's digit k (`flat_tiled_along`): that digit at unit stride, the
        others fixed."""
        out = {}
        for s in c.body:
            b = self.buffers.get(getattr(s, "buffer", None))
            if not isinstance(s, (Load, Store)) or s.mask not in (None, "xmask") or b is None \
                    or b.dtype != "f32":
                continue
            if isinstance(s, Load) and s.dtype != "f32":
                continue
            # a store is written when the tile is done: not one that accumulates, nor
            # into a buffer that may alias another (an in-place output its loads read)
            if isinstance(s, Store) and (s.accumulate or b.name in self.k.may_alias):
                continue
            e = split_rows(self.form(s.index, True), rows)
            terms = e.terms if isinstance(e, E.Add) else (e,)
            along = unit = unit_coef = None
            rest = []
            for t in terms:
                pos, coef = split_term(t, self.expected)
                if pos == E.Var("xi") and along is None:
                    along = coef
                elif unit is None and lowering_value(coef, self.expected) == 1 \
                        and self.row_digit(pos, None if k is None else (rows[:-1], k)):
                    unit, unit_coef = pos, coef
                else:
                    rest.append(t)
            step = None if along is None else lowering_value(along, self.expected)
            if step is None or step < 2 or unit is None:
                continue
            sizes = unit.sizes if isinstance(unit, E.Digit) else None
            if not all(self.fixed_in_tile(t, sizes, unit.k if k is not None else None)
                       for t in rest):
                continue
            conds = []
            if unit_coef != E.ONE:
                conds.append(f"{self.index(unit_coef, {})} == 1")
            if sizes is not None and k is None:
                conds.append(f"{self.index(sizes[-1], {})} % {TILE_ROWS} == 0")
            out[s.var if isinstance(s, Load) else id(s)] = (s, self.index(along, {}), conds)
        return out

    @staticmethod
    def row_digit(pos, digit=None) -> bool:
        """Whether `pos` is xo or its last digit over two or more sizes; with `digit`
        (sizes, k): whether it is xo's digit k over those sizes."""
        if digit is not None:
            return isinstance(pos, E.Digit) and pos.base == E.Var("xo") \
                and pos.sizes == tuple(digit[0]) and pos.k == digit[1]
        return pos == E.Var("xo") or (isinstance(pos, E.Digit) and pos.base == E.Var("xo")
                                      and pos.k == len(pos.sizes) - 1 and len(pos.sizes) >= 2)

    def fixed_in_tile(self, t: E.Expr, sizes, k: int | None = None) -> bool:
        """Whether term `t` has one value over a tile of rows: it reads xo only through
        digits over `sizes` other than the tile's (the last, aligned; or `k`), and no
        other loop variable or loaded value."""
        if isinstance(t, E.Digit) and t.base == E.Var("xo"):
            tile = len(sizes) - 1 if sizes is not None and k is None else k
            return sizes is not None and t.sizes == sizes and t.k != tile \
                and all(self.fixed_in_tile(z, sizes, k) for z in t.sizes)
        if isinstance(t, (E.Var, E.Value)):
            return False
        return all(self.fixed_in_tile(z, sizes, k) for z in E.children(t))

    def stage(self, d: int, staged, rows, trows: int = TILE_ROWS, step: str | None = None,
              row: str = "(xo - xo_begin)") -> list:
        """Fill each staged load's tile st[row][col] (trows x TILE_COLS, rows along xo,
        `step` apart when given) from 8 x 8 blocks of its source, declare each staged
        store's, and have the loads and stores print it (the tile's row number is `row`
        where they are printed). Returns the stores' write-outs (`write_staged`)."""
        first = "xo_begin + xob" if step is None else f"xo_begin + xob * {step}"
        writes = []
        for key, (s, along, _) in staged.items():
            name = self.names.fresh("st_" + (self.var(key) if isinstance(s, Load)
                                             else self.buf(s.buffer)))
            self.emit(d, f"alignas(64) float {name}[{trows * TILE_COLS}];")
            self.staged[key] = f"{name}[{row} * {TILE_COLS} + (xi - xi_begin)]"
            if isinstance(s, Store):
                writes.append((s, along, name, trows, first))
            else:
                self.blocks(d, rows, s, along, name, trows, first)
        return writes

    def write_staged(self, d: int, writes, rows) -> None:
        """Each staged store's tile written to its buffer, transposed in 8 x 8 blocks."""
        for s, along, name, trows, first in writes:
            self.blocks(d, rows, s, along, name, trows, first)

    def blocks(self, d: int, rows, s, along: str, name: str, trows: int, first: str) -> None:
        """The 8 x 8 transpositions between a staged access's tile `name` and its buffer:
        from the buffer for a load, to it for a store."""
        self.rows = rows
        self.emit(d, "for (int64_t xib = 0; xib < xi_stop - xi_begin; xib += 8) {")
        self.emit(d + 1, f"for (int64_t xob = 0; xob < {trows}; xob += 8) {{")
        self.emit(d + 2, f"const int64_t xo = {first}, xi = xi_begin + xib;")
        mem = f"&{self.buf(s.buffer)}[{self.index(s.index, {}, access=True)}]"
        tile = f"{name} + xob * {TILE_COLS} + xib"
        call = f"{mem}, {along}, {tile}, {TILE_COLS}" if isinstance(s, Load) else \
            f"{tile}, {TILE_COLS}, {mem}, {along}"
        self.emit(d + 2, f"fs::tr8x8({call});")
        self.emit(d + 1, "}")
        self.emit(d, "}")
        self.rows = None

    def xo_digit_var(self, e: E.Expr) -> E.Expr | None:
        if isinstance(e, E.Digit) and e.base == E.Var("xo") and e.sizes == self.xo_digits:
            return E.Var(f"xa{e.k}")
        return None

    def flat_transposed(self, depth: int, c: Component, rows, simd: str) -> None:
        """The flat loop as nested loops over the row dims, xi just outside the last one
        (`transposed`), in order within each dim: x = ((xa0 * R1 + xa1) ...) * C + xi."""
        sizes = [self.index(r, {}) for r in rows]
        lead = len(rows) - 1
        self.emit(depth, f"// x = ((xa0 * R1 + xa1) ...) * {sizes[-1]} + xi, xi outside "
                         f"the last row dim: a transposition")
        self.emit(depth, f"#pragma omp parallel for schedule(static) "
                         f"if(parallel: xnumel >= {PARALLEL_GRAIN})")
        d = depth
        for k in range(lead - 1):
            self.emit(d, f"for (int64_t xa{k} = 0; xa{k} < {sizes[k]}; ++xa{k}) {{")
            d += 1
        self.emit(d, f"for (int64_t xi = 0; xi < {sizes[-1]}; ++xi) {{")
        if simd:
            self.emit(d + 1, "#pragma omp simd")
        k = lead - 1
        self.emit(d + 1, f"for (int64_t xa{k} = 0; xa{k} < {sizes[k]}; ++xa{k}) {{")
        xo = "xa0"
        for j in range(1, lead):
            xo = f"({xo} * {sizes[j]} + xa{j})"
        self.emit(d + 2, f"const int64_t xo = {xo};")
        self.emit(d + 2, f"const int64_t x = xo * {sizes[-1]} + xi;")
        self.masks(d + 2, c.body, "xmask")
        self.rows, self.xo_digits = rows, tuple(rows[:-1])
        self.stmts(d + 2, c.body, {}, None)
        self.rows = self.xo_digits = None
        for dd in range(d + 1, depth - 1, -1):
            self.emit(dd, "}")

    def nested(self, c: Component, rows) -> bool:
        """Whether the loop in rows runs as nested loops over every row size
        (`flat_nested`): three or more sizes of constant binding whose product is
        xnumel, rows shorter than MIN_ROW and no row cache. In rows, each short row paid
        its base offsets' divisions and a vector loop's set-up for a few elements: a convolution's patches
        gathered as GEMM rows [4096, 3 * 2 * 2] (the [..., C, kh, kw] copy of every
        patchify convolution) took 0.19 ms against Inductor's nested loops' 0.03."""
        # sizes the same at every launch: the loops cover x exactly
        values = [static_value(r, self.constants) for r in rows]
        total = static_value(c.xnumel, self.constants)
        return len(rows) >= 3 and None not in values and total is not None \
            and math.prod(values) == total and values[-1] < MIN_ROW \
            and not self.row_cache(c.body, rows)

    def flat_nested(self, depth: int, c: Component, rows, simd: str) -> None:
        """The flat loop as one loop per row size, in order, xi innermost (`nested`): x =
        ((xa0 * R1 + xa1) ...) * C + xi; index digits of xo over the rows are the loop
        variables, so no access divides, and an offset reading only the outer variables
        is computed once per row."""
        sizes = [self.index(r, {}) for r in rows]
        values = [lowering_value(r, self.expected) for r in rows]
        lead = len(rows) - 1
        collapse = 1
        while collapse < lead and math.prod(values[:collapse]) < NEST_PARALLEL:
            collapse += 1
        self.emit(depth, f"// x = ((xa0 * R1 + xa1) ...) * {sizes[-1]} + xi: nested loops")
        clause = f" collapse({collapse})" if collapse > 1 else ""
        self.emit(depth, f"#pragma omp parallel for{clause} schedule(static) "
                         f"if(parallel: xnumel >= {PARALLEL_GRAIN})")
        d = depth
        for k in range(lead):
            self.emit(d, f"for (int64_t xa{k} = 0; xa{k} < {sizes[k]}; ++xa{k}) {{")
            d += 1
        xo = "xa0"
        for j in range(1, lead):
            xo = f"({xo} * {sizes[j]} + xa{j})"
        self.emit(d, f"const int64_t xo = {xo};")
        with self.hoisting(d, {"xo"} | {f"xa{k}" for k in range(lead)}):
            self.rows, self.xo_digits = rows, tuple(rows[:-1])
            if simd:
                self.emit(d, "#pragma omp simd")
            self.emit(d, f"for (int64_t xi = 0; xi < {sizes[-1]}; ++xi) {{")
            self.emit(d + 1, f"const int64_t x = xo * {sizes[-1]} + xi;")
            self.masks(d + 1, c.body, "xmask")
            self.stmts(d + 1, c.body, {}, None)
            self.rows = self.xo_digits = None
            self.emit(d, "}")
        for dd in range(d - 1, depth - 1, -1):
            self.emit(dd, "}")

    def row_cache(self, body, rows) -> dict[str, tuple[str, str]]:
        """Values of a flat loop in rows over three or more sizes that do not depend on
        the last digit of xo (an exp of a [A, 1, C] operand broadcast to [A, B, C]) and
        that the rest of the body reads: {var: (dtype, cache array)}, when computing them
        calls a math function (COSTLY_OPS); else empty. The loop computes them once per
        row group (consecutive rows of one thread that share xo / rows[-2]), not once per
        row: Inductor materialises such an operand; recomputed, it cost B times its exp."""
        if len(rows) < 3:
            return {}
        fixed = self.row_invariant(body, rows)
        if not any(isinstance(s, Op) and s.op in COSTLY_OPS and s.var in fixed for s in body):
            return {}
        read = {a for s in body if getattr(s, "var", None) not in fixed for a in uses(s)}
        out = {}
        for s in body:
            var = getattr(s, "var", None)
            if var in fixed and var in read and not isinstance(s, Constant):
                dt = "i64" if isinstance(s, Index) else s.dtype
                if dt == "b8":      # a select reading a bool from memory does not vectorise
                    return {}
                out[var] = (dt, self.names.fresh("rc_" + self.var(var)))
        return out

    def row_invariant(self, body, rows) -> set[str]:
        """The variables of `body` (printed in rows over `rows`) that read neither x, nor
        xo other than through its digits before the last."""
        last = len(rows) - 2            # the last digit of xo over rows[:-1]
        fixed: set[str] = {"xmask"}

        def ok(e: E.Expr) -> bool:
            if isinstance(e, E.Var):
                return e.name == "xi"
            if isinstance(e, E.Value):
                return e.var in fixed
            if isinstance(e, E.Digit) and e.base == E.Var("xo"):
                return e.k < last and all(ok(z) for z in e.sizes)
            return all(ok(t) for t in E.children(e))
        for s in body:
            if isinstance(s, Constant):
                fixed.add(s.var)
            elif isinstance(s, (Load, Index)):
                e = self.form(s.index, isinstance(s, Load))
                mask = getattr(s, "mask", None)
                if ok(split_rows(e, rows)) and (mask is None or mask in fixed):
                    fixed.add(s.var)
            elif isinstance(s, Op) and all(a in fixed for a in s.args):
                fixed.add(s.var)
        return fixed - {"xmask"}

    def fill_row_cache(self, depth: int, body, rows, cache):
        """Recompute the cached values when the row group or the row's range changed;
        returns the statements left for the row's loop and their environment."""
        fixed = self.row_invariant(body, rows)
        group = self.index(rows[-2], {})
        self.emit(depth, "const int64_t rc_block = xblocks == 1 ? 0 : xblock % xblocks;")
        # the row group (xo without its last digit) and the block of the row
        self.emit(depth, f"const int64_t rc_now = xo / ({group} > 0 ? {group} : 1) * xblocks "
                         "+ rc_block;")
        self.emit(depth, f"const int64_t rc_slot = rc_block % {RC_SLOTS};")
        self.emit(depth, "const int64_t rc_base = rc_slot * xrc;")
        self.emit(depth, "if (rc_now != rc_keys[rc_slot] || xi_end != rc_ends[rc_slot]) {")
        kept = [s for s in body if isinstance(s, Constant) or getattr(s, "var", None) in fixed]
        self.emit(depth + 1, "#pragma omp simd")
        self.emit(depth + 1, "for (int64_t xi = xi_begin; xi < xi_end; ++xi) {")
        self.masks(depth + 2, kept, "xmask")
        self.stmts(depth + 2, kept, {}, None)
        for var, (_, arr) in cache.items():
            self.emit(depth + 2, f"{arr}[rc_base + xi - xi_begin] = {self.var(var)};")
        self.emit(depth + 1, "}")
        self.emit(depth + 1, "rc_keys[rc_slot] = rc_now; rc_ends[rc_slot] = xi_end;")
        self.emit(depth, "}")
        env = {var: dt for var, (dt, _) in cache.items()}
        rest = [s for s in body if isinstance(s, Constant) or getattr(s, "var", None) not in fixed]
        return rest, env

    @contextlib.contextmanager
    def hoisting(self, depth: int, reads):
        """Index terms of the loads and stores printed inside that read only the variables
        `reads` (a row's base offset, often with divisions) are defined once, at `depth`,
        before the first line printed inside: the loop there then vectorises."""
        start, saved = len(self.lines), (self.hoisted, self.hoist_vars)
        self.hoisted, self.hoist_vars = {}, frozenset(reads)
        try:
            yield
            self.lines[start:start] = ["    " * depth + f"const int64_t {name} = {base};"
                                       for base, name in self.hoisted.items()]
        finally:
            self.hoisted, self.hoist_vars = saved

    def row_sizes(self, c: Component) -> tuple[E.Expr, ...] | None:
        return self.split_sizes(c.body, "x")

    def split_sizes(self, body, var: str) -> tuple[E.Expr, ...] | None:
        """The sizes S that loop variable `var` is most often unravelled over in `body`
        (in this version of the component), if rows of S[-1] are long enough to be
        worth a loop of their own."""
        count: dict[tuple[E.Expr, ...], int] = {}
        digits: set[E.Expr] = set()
        for s in body:
            if isinstance(s, (Load, Store, Index)):
                e = self.form(s.index, not isinstance(s, Index))
                for sizes in digit_sizes(e, var):
                    count[sizes] = count.get(sizes, 0) + 1
                digits |= digits_of(e, var)
        costly = any(isinstance(s, Op) and s.op in COSTLY_OPS for s in body)
        # each digit of `var` unsplit is an int64 division or modulo per element, which
        # no SIMD unit has: with two or more (a layer norm's mean and rstd at x / n, its
        # weight at x % n) rows of 2 already pay (layer norm's scale over [16384, 4, 4]:
        # 1.8 ms unsplit, 4x Inductor's; a stack of 4 columns 3x). One (x + w[4]) gains
        # nothing from rows that short
        least = MIN_COSTLY_ROW if costly or len(digits) >= 2 else MIN_ROW
        for sizes in sorted(count, key=count.get, reverse=True):
            last = lowering_value(sizes[-1], self.expected)
            if len(sizes) >= 2 and (last is None or last >= least):
                return sizes
        return None
