"""Reductions along a row of known length in accumulator lanes (a mixin of the reduce
printer: reduce.py, columns.py): each reduction accumulates in ROW_LANES lanes, lane l
taking the row's elements l, l + ROW_LANES, ..., and the lanes are combined as a tree
after the row.

GCC ends a `#pragma omp simd reduction` loop by adding its vector's lanes one after
another in scalar code: 16 dependent adds per row with AVX-512, more than the row's own
work when rows are short (var over [4096, 64, 16] dim 2: 6.3 ms, against 4.1 ms in
lanes; layer_norm over rows of 32: 2.2x Inductor's time, 1.1x in lanes). The lanes also
fix the order of the sums: the same bits whatever vector width GCC picks.
"""
from __future__ import annotations

from .dtypes import acc_type, reduce_step


# a row's loop over r as SIMD lanes accumulates each reduction in this many lanes (a
# vector of AVX-512 floats, two of AVX2), combined as a tree after the row: the same
# sums in the same order whatever vector width GCC picks
ROW_LANES = 16


def row_lanes(reduces, rn) -> int:
    """How many accumulator lanes a row of known length `rn` uses (`row_lane_sums`): the
    largest of ROW_LANES, 8 that divides it (the loop then needs no tail, whose lanes
    would read and write row buffers past the row), else 0 (a `simd reduction` clause)."""
    if not reduces or type(rn) is not int or rn <= 0:
        return 0
    return next((w for w in (ROW_LANES, 8) if rn % w == 0), 0)


class RowLanes:
    """The lane accumulators and their tree; mixed into columns.ColumnOrder
    and, through it, reduce.ReduceLoops."""

    def row_lane_accumulators(self, depth: int, reduces, accs, lanes: int) -> dict:
        """Per reduction, an array of `lanes` accumulators (and NaN flags) set to its
        identity: {var: (accumulator of lane rl, its flag or None)}."""
        out = {}
        for red in reduces:
            decl, init = acc_type(red, True)
            part = self.names.fresh(self.var(red.var) + "_lanes")
            self.emit(depth, f"{decl} {part}[{lanes}];")
            flag = None
            if accs[red.var][1]:
                flag = self.names.fresh(self.var(red.var) + "_lanenan")
                self.emit(depth, f"int {flag}[{lanes}];  // a lane saw a NaN")
            self.emit(depth, f"for (int rl = 0; rl < {lanes}; ++rl) {{ {part}[rl] = {init};"
                             + (f" {flag}[rl] = 0;" if flag else "") + " }")
            out[red.var] = (f"{part}[rl]", f"{flag}[rl]" if flag else None)
        return out

    def open_row_lanes(self, depth: int, lanes: int, simd: bool) -> int:
        """The loops over a row in blocks of `lanes` (`rb`) and over a block's lanes
        (`rl`, SIMD where `simd`), with r defined: the depth of their body. Two closing
        braces end them."""
        self.emit(depth, f"for (int64_t rb = 0; rb < rnumel; rb += {lanes}) {{")
        if simd:
            self.emit(depth + 1, "#pragma omp simd")
        self.emit(depth + 1, f"for (int64_t rl = 0; rl < {lanes}; ++rl) {{")
        self.emit(depth + 2, "const int64_t r = rb + rl;")
        return depth + 2

    def row_lane_sums(self, depth: int, reduces, lane_accs: dict, lanes: int) -> dict:
        """The lanes of each reduction combined as a tree (lane l with lane l + w, w
        halving), into lane 0: {var: (its value, its flag or None)}. GCC's own end of a
        `simd reduction` adds the lanes one after another in scalar code (16 dependent
        adds per row with AVX-512): var over [4096, 64, 16] dim 2, one thread, 2026-11,
        6.3 -> 4.1 ms (Inductor 4.1)."""
        out = {}
        for red in reduces:
            part, flag = (a.removesuffix("[rl]") if a else None for a in lane_accs[red.var])
            w = lanes // 2
            while w >= 1:
                step = reduce_step(red.kind, red.dtype, f"{part}[rl]", f"{part}[rl + {w}]")
                if flag:
                    step += f" {flag}[rl] |= {flag}[rl + {w}];"
                # (without the pragma GCC adds the lanes of a register one by one again)
                self.emit(depth, "#pragma omp simd")
                self.emit(depth, f"for (int rl = 0; rl < {w}; ++rl) {{ {step} }}")
                w //= 2
            out[red.var] = (f"{part}[0]", f"{flag}[0]" if flag else None)
        return out

