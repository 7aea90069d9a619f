"""Scatter components on the cpu target (a mixin of printer.py's printer): the stores of
codegen/scatter.py's kernels at data-dependent positions, in order on one thread."""
from __future__ import annotations

from ...codegen import expr as E
from ...codegen.kernel import Component, Index, Load, Op, Store
from .index import split_rows


class ScatterLoops:
    """Printing of scatter components; mixed into printer._Printer."""

    def scatter_component(self, i: int, c: Component, xn: str) -> None:
        """Stores at data-dependent positions (codegen/scatter.py): one thread, in order,
        no vectors (two lanes may hit one element), after the components before it."""
        self.emit(1, f"// component {i}: scatter, x < {xn}, in order on one thread")
        self.emit(1, "{")
        self.emit(2, f"const int64_t xnumel = {xn};")
        rows = self.row_sizes(c)
        if rows is None:
            self.emit(2, "for (int64_t x = 0; x < xnumel; ++x) {")
            self.stmts(3, c.body, {}, None)
            self.emit(2, "}")
            self.emit(1, "}")
            return
        # rows of the source (x = xo * xinner + xi, still in order): the positions read
        # per row (an embedding's id) are read once per row, before the loop along it
        last = self.index(rows[-1], {})
        self.emit(2, f"const int64_t xinner = {last} > 0 ? {last} : 1;  // x = xo * xinner + xi")
        self.emit(2, "for (int64_t xo = 0; xo * xinner < xnumel; ++xo) {")
        self.emit(3, "const int64_t xi_end = xnumel - xo * xinner < xinner ? "
                     "xnumel - xo * xinner : xinner;")
        env: dict[str, str] = {}
        self.rows = rows
        moving = {"x", "xi"}
        inner = []
        for st in c.body:
            if isinstance(st, (Load, Index)):
                reads = E.free_vars(split_rows(self.form(st.index, isinstance(st, Load)), rows))
            elif isinstance(st, Op):
                reads = set(st.args)
            else:
                reads = set()
            if isinstance(st, Store) or reads & moving:
                moving.add(getattr(st, "var", None))
                inner.append(st)
            else:
                self.stmt(3, st, env, None)
        with self.hoisting(3, {"xo"}):
            self.emit(3, "for (int64_t xi = 0; xi < xi_end; ++xi) {")
            self.emit(4, "const int64_t x = xo * xinner + xi;")
            self.stmts(4, inner, env, None)
            self.emit(3, "}")
        self.rows = None
        self.emit(2, "}")
        self.emit(1, "}")
