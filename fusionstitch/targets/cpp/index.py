"""Index expressions of the C++ printer (targets/cpp/printer.py).

- `specialize`: the dense version of a component. Each component is printed twice
  when its accesses simplify for the expected strides (contiguous inputs: `in0[x]`
  instead of a division and a modulo per dimension; r-loops with unit stride
  vectorise), with the run-time checks that pick the version;
- `split_rows`: a loop variable split into rows (x = xo * xinner + xi);
- `rename_expr`: leaves renamed to their C spelling.
"""
from __future__ import annotations

import dataclasses

from ...codegen import expr as E
from ...codegen.kernel import Kernel


def rename_expr(e: E.Expr, value_name, sym_name) -> E.Expr:
    """The expression with Value and Sym leaves renamed (to their C spelling)."""
    if isinstance(e, E.Value):
        return E.Value(value_name(e.var))
    if isinstance(e, E.Sym):
        return dataclasses.replace(e, name=sym_name(e.name))
    if isinstance(e, (E.Var, E.Const)):
        return e
    if isinstance(e, E.Add):
        return E.Add(tuple(rename_expr(t, value_name, sym_name) for t in e.terms))
    if isinstance(e, E.Mul):
        return E.Mul(tuple(rename_expr(t, value_name, sym_name) for t in e.factors))
    if isinstance(e, E.FloorDiv):
        return E.FloorDiv(rename_expr(e.a, value_name, sym_name),
                          rename_expr(e.b, value_name, sym_name))
    if isinstance(e, E.Mod):
        return E.Mod(rename_expr(e.a, value_name, sym_name),
                     rename_expr(e.b, value_name, sym_name))
    if isinstance(e, E.Digit):
        return E.Digit(rename_expr(e.base, value_name, sym_name),
                       tuple(rename_expr(s, value_name, sym_name) for s in e.sizes), e.k)
    raise TypeError(e)


# ---------------------------------------------------------------------------
# dense versions: each component is printed twice when its accesses can be simplified
# for the expected strides, and the simple version runs when the strides at launch are
# those (contiguous inputs: `in0[x]` instead of a division and a modulo per dimension,
# and r-loops with unit stride vectorise).


def expected_values(k: Kernel) -> dict[str, int]:
    """What each sym is expected to be at launch: a stride that `Kernel.bindings` binds
    to a buffer's dimension is the buffer's `expected` stride (a view's, known from the
    graph), else row-major for the buffer's shape (contiguous inputs are the common
    case); any other sym its value at lowering time (`Sym.value`)."""
    buffers = {b.name: b for b in k.buffers}
    out: dict[str, int] = {}
    for name, how in k.bindings:
        if how and how[0] == "stride" and how[1] in buffers:
            b = buffers[how[1]]
            if b.expected is not None:
                out[name] = b.expected[how[2]]
                continue
            out[name] = 1
            for n in b.shape[how[2] + 1:]:
                out[name] *= n
    return out


def fixed_strides(k: Kernel, expected: dict[str, int]) -> dict[str, int]:
    """The input strides the dense version may print as constants: in a kernel of static
    sizes (every sym that is no stride bound to a constant), every stride sym, expected
    row-major (`expected_values`). A constant stride is what lets GCC see the access
    pattern (`in0[4 * r + 2]`: an interleaved group it loads as whole vectors; with
    `in0[r * in0_s0 + 2 * in0_s1]` it builds each vector element by element). Where a
    size is a run-time sym (a symbolic program's, a kernel without bindings) the
    row-major value is a size at the hints, so the dense version would be
    size-specific: there only a unit stride is assumed (`specialize`)."""
    how = {name: h for name, h in k.bindings if h}
    strides = {name for name, h in how.items() if h[0] == "stride"}
    if any(s.name not in strides and how.get(s.name, ("",))[0] != "const" for s in k.syms):
        return {}
    return {name: v for name, v in expected.items() if name in strides}


def lowering_value(e: E.Expr, values: dict[str, int]) -> int | None:
    """The expected value of a size/stride expression (`values`, else Sym.value); None
    if it reads a loop variable or a loaded value."""
    return E.evaluate(e, lambda s: values.get(s.name, s.value))


def static_value(e: E.Expr, constants: dict[str, int]) -> int | None:
    """The value of a size expression at every launch: None unless every sym in it is one
    of `constants` (the syms of constant binding, kernel.constant_syms). Unlike
    `lowering_value`, never a symbolic size's hint."""
    return E.evaluate(e, lambda s: constants.get(s.name))


def split_term(t: E.Expr, values) -> tuple[E.Expr | None, E.Expr]:
    """term = position * coefficient, the coefficient free of loop variables and values."""
    if isinstance(t, E.Mul):
        pos = [f for f in t.factors if lowering_value(f, values) is None]
        if len(pos) == 1:
            return pos[0], E.mul(*(f for f in t.factors if f is not pos[0]))
        return None, t
    if lowering_value(t, values) is None:
        return t, E.ONE
    return None, t


def specialize(e: E.Expr, values: dict[str, int], fixed: dict[str, int] | None = None
               ) -> tuple[E.Expr, list[tuple[E.Expr, E.Expr]]]:
    """`e` simplified for the expected strides (`expected_values`), and the equalities
    that make the simplification exact: a complete unravelling
    sum(Digit(b, S, k) * stride_k) with row-major strides becomes `b` (assuming
    0 <= b < prod(S), as for any unravelled index); one whose last digits only are
    row-major gets them as one digit of their merged size (r over N, H, W of NCHW: N's
    stride is the channels', H and W become one digit over H * W); a coefficient
    expected to be 1 goes away; and in the other terms a stride sym of `fixed`
    (`fixed_strides`) becomes its constant."""
    terms = e.terms if isinstance(e, E.Add) else (e,)
    split = [split_term(t, values) for t in terms]
    conds: list[tuple[E.Expr, E.Expr]] = []
    groups: dict[tuple, dict[int, list[int]]] = {}
    for i, (pos, coef) in enumerate(split):
        if isinstance(pos, E.Digit):
            groups.setdefault((pos.base, pos.sizes), {}).setdefault(pos.k, []).append(i)
    collapsed: dict[int, E.Expr] = {}       # first term of a collapsed group -> its base
    done: set[int] = set()
    for (base, sizes), by_k in groups.items():
        needed = [k for k, s in enumerate(sizes) if not (isinstance(s, E.Const) and s.value == 1)]
        if sorted(by_k) != needed or any(len(v) != 1 for v in by_k.values()):
            continue
        # the strides of a row-major unravelling of `base`, scaled by the last digit's
        # stride m (m = 1: base itself; m = a row length: the rows of a [x, r] tensor)
        m = split[by_k[needed[-1]][0]][1]
        mv = lowering_value(m, values)
        if not mv or lowering_value(E.product(sizes[needed[-1] + 1:]), values) != 1:
            continue
        if mv == 1:
            m = E.ONE        # expected contiguous: a run-time check, then unit stride
        elif fixed:
            # a static kernel's row stride as its constant (`x * 4`, not `x * in0_s1`):
            # rows of 4 read as interleaved groups, not gathers (layer norm's var_mean
            # over [16384, 4, 4]: 1.5x Inductor's time). The last digit's pair below
            # (its coefficient, which is m, against this constant) is the run-time check
            m = E.rewrite(m, lambda t: _fixed(t, fixed, []))
        pairs = [(split[by_k[k][0]][1], E.mul(E.product(sizes[k + 1:]), m)) for k in needed]
        # (a constant stride against a size sym would make the dense version size-specific)
        holds = [lowering_value(c, values) == lowering_value(w, values) and
                 (c == w or not isinstance(c, E.Const)) for c, w in pairs]
        if all(holds):
            conds += [(c, w) for c, w in pairs if c != w]
            collapsed[min(v[0] for v in by_k.values())] = base if m == E.ONE else E.mul(base, m)
            done.update(v[0] for v in by_k.values())
            continue
        # else a trailing run of row-major digits (H and W of an NCHW batch-norm statistic
        # over N, H, W, whose N has the stride of the channels) becomes one digit of their
        # merged size, and the digits above it digits of the merged sizes (the same
        # values): a loop over it runs along the whole contiguous stretch
        run = len(needed)
        while run > 0 and holds[run - 1]:
            run -= 1
        if len(needed) - run < 2:
            continue
        k0 = needed[run]
        merged = tuple(sizes[:k0]) + (E.product(sizes[k0:]),)
        conds += [(c, w) for c, w in pairs[run:] if c != w]
        first = by_k[k0][0]
        collapsed[first] = E.mul(E.Digit(base, merged, k0), m)
        done.update(by_k[k][0] for k in needed[run:])
        for k in needed[:run]:
            i = by_k[k][0]
            collapsed[i] = E.mul(E.Digit(base, merged, k), split[i][1])
            done.add(i)
    out: list[E.Expr] = []
    for i, (pos, coef) in enumerate(split):
        if i in collapsed:
            out.append(collapsed[i])
        elif i in done:
            continue
        elif pos is not None and coef != E.ONE and lowering_value(coef, values) == 1:
            conds.append((coef, E.ONE))
            out.append(pos)
        elif fixed:
            out.append(E.rewrite(terms[i], lambda t: _fixed(t, fixed, conds)))
        else:
            out.append(terms[i])
    return E.add(*out), conds


def _fixed(t: E.Expr, fixed: dict[str, int], conds: list) -> E.Expr | None:
    """A stride sym of `fixed` as its constant (the equality recorded in `conds`)."""
    if isinstance(t, E.Sym) and t.name in fixed:
        conds.append((t, E.Const(fixed[t.name])))
        return E.Const(fixed[t.name])
    return None


def digit_sizes(e: E.Expr, var: str = "x") -> list[tuple[E.Expr, ...]]:
    """The sizes of every unravelling of loop variable `var` in `e`."""
    if isinstance(e, E.Digit):
        own = [e.sizes] if e.base == E.Var(var) else []
        return own + digit_sizes(e.base, var) + [s for z in e.sizes
                                                  for s in digit_sizes(z, var)]
    return [s for c in E.children(e) for s in digit_sizes(c, var)]


def split_rows(e: E.Expr, rows: tuple[E.Expr, ...], var: str = "x") -> E.Expr:
    """`e` for var = var_o * rows[-1] + var_i (0 <= var_i < rows[-1]): the digits of
    `var` over `rows` become var_i (the last) and digits of var_o over rows[:-1]."""
    if isinstance(e, E.Digit):
        if e.base == E.Var(var) and e.sizes == rows:
            if e.k == len(rows) - 1:
                return E.Var(var + "i")
            return E.Digit(E.Var(var + "o"), rows[:-1], e.k)
        if e.base == E.Var(var):
            # over rows whose trailing dims are merged (`specialize`: a padded NHWC
            # operand's W and C read as one digit, x % (W * C)): x % (m * rows[-1]) is
            # (xo % m) * rows[-1] + xi, and the digits above it are digits of xo
            for j in range(len(rows) - 1):
                if e.sizes == rows[:j] + (E.product(rows[j:]),):
                    over = rows[:j] + (E.product(rows[j:-1]),)
                    digit = E.Digit(E.Var(var + "o"), over, e.k)
                    if e.k < j:
                        return digit
                    return E.add(E.mul(digit, rows[-1]), E.Var(var + "i"))
        return E.Digit(split_rows(e.base, rows, var),
                       tuple(split_rows(z, rows, var) for z in e.sizes), e.k)
    if isinstance(e, E.Add):
        # a merged digit's split (digit * rows[-1] + xi) joins the sum term by term, so
        # that the row's part of it is hoisted with the others
        terms: list[E.Expr] = []
        for t in e.terms:
            st = split_rows(t, rows, var)
            terms += st.terms if isinstance(st, E.Add) and not isinstance(t, E.Add) else [st]
        return E.Add(tuple(terms))
    if isinstance(e, E.Mul):
        factors = tuple(split_rows(t, rows, var) for t in e.factors)
        for i, (f, t) in enumerate(zip(factors, e.factors)):
            if isinstance(f, E.Add) and isinstance(t, E.Digit):   # (a merged digit's split)
                rest = factors[:i] + factors[i + 1:]
                return E.Add(tuple(E.mul(u, *rest) for u in f.terms))
        return E.Mul(factors)
    if isinstance(e, E.FloorDiv):
        return E.FloorDiv(split_rows(e.a, rows, var), split_rows(e.b, rows, var))
    if isinstance(e, E.Mod):
        return E.Mod(split_rows(e.a, rows, var), split_rows(e.b, rows, var))
    return e


# ---------------------------------------------------------------------------
# merged digits: adjacent dims of an unravelled loop variable that no index tells apart.
# x over [A, B, C] read by every access either through B and C with row-major strides
# (c_B == c_C * C) or through neither (a [A, 1, 1] operand broadcast) is x over
# [A, B * C] for all of them: the flat loop's rows are then B * C long and the broadcast
# operand's offset costs one division per row of B * C, not per row of C (sigmoid of
# x * x[:, :1, :1] over [4096, 64, 16]: rows of 16, 1.3x Inductor's rows of 1024).

Unravelling = tuple  # (base Var, sizes)


def _unit(s: E.Expr) -> bool:
    return isinstance(s, E.Const) and s.value == 1


def _canon(e: E.Expr) -> tuple:
    """A form of a coefficient in which products equal as multisets of factors compare
    equal (ks1 * ks2 and ks2 * ks1)."""
    factors = e.factors if isinstance(e, E.Mul) else (e,)
    const, rest = 1, []
    for f in factors:
        if isinstance(f, E.Const):
            const *= f.value
        else:
            rest.append(repr(f))
    return const, tuple(sorted(rest))


def _var_digit(e: E.Expr) -> bool:
    return isinstance(e, E.Digit) and isinstance(e.base, E.Var) and len(e.sizes) >= 2


def _linear_digit(t: E.Expr) -> tuple[E.Digit, E.Expr] | None:
    """term = Digit(var, S, k) * coefficient, the coefficient free of loop variables,
    index values and digits; None for any other term."""
    factors = t.factors if isinstance(t, E.Mul) else (t,)
    digits = [f for f in factors if _var_digit(f)]
    if len(digits) != 1:
        return None
    rest = [f for f in factors if f is not digits[0]]
    if any(E.free_vars(f) for f in rest):
        return None
    return digits[0], E.mul(*rest)


def _digit_uses(e: E.Expr) -> tuple[dict, set]:
    """The digits of unravelled loop variables in `e`: ({(base, sizes): {k: [coefficient
    of each top-level term Digit_k * c]}}, {(base, sizes, k) read any other way})."""
    linear: dict[Unravelling, dict[int, list[E.Expr]]] = {}
    opaque: set[tuple] = set()

    def walk(x: E.Expr) -> None:
        if _var_digit(x):
            opaque.add((x.base, x.sizes, x.k))
        for c in E.children(x):
            walk(c)
    for t in (e.terms if isinstance(e, E.Add) else (e,)):
        lin = _linear_digit(t)
        if lin is None:
            walk(t)
            continue
        d, coef = lin
        linear.setdefault((d.base, d.sizes), {}).setdefault(d.k, []).append(coef)
        walk(coef)
    return linear, opaque


def _group_holds(uses, u: Unravelling, a: int, b: int) -> bool:
    """Whether digits a..b of unravelling `u` are one digit of their merged size in the
    expression whose `_digit_uses` are `uses`: it reads none of them, or each (but those
    of size 1, always 0) in one term, with row-major coefficients c_j = c_last *
    sizes[j+1] * ... * sizes[last]. (Proven symbolically: no run-time condition.)"""
    linear, opaque = uses
    sizes = u[1]
    if any((u[0], sizes, j) in opaque for j in range(a, b + 1)):
        return False
    by_k = linear.get(u, {})
    wanted = [j for j in range(a, b + 1) if not _unit(sizes[j])]
    present = [j for j in range(a, b + 1) if j in by_k]
    if not present:
        return True
    if any(j not in by_k or len(by_k[j]) != 1 for j in wanted) or not wanted:
        return False
    last = wanted[-1]
    c_last = by_k[last][0]
    return all(_canon(by_k[j][0]) == _canon(E.mul(c_last, *sizes[j + 1:last + 1]))
               for j in wanted)


def merge_plan(exprs) -> dict[Unravelling, tuple[tuple[int, int], ...]]:
    """For each unravelling (base loop variable, sizes) of `exprs` (every index of a
    component, as printed), its dims in groups (first, last) of adjacent dims that
    every expression reading the unravelling reads as one (`_group_holds`): only those
    with a group of two or more dims."""
    uses = [_digit_uses(e) for e in exprs]
    found: list[Unravelling] = []
    for lin, opq in uses:
        for u in list(lin) + [(b, s) for b, s, _ in opq]:
            if u not in found:
                found.append(u)
    plan = {}
    for u in found:
        readers = [x for x in uses if u in x[0] or any((b, s) == u for b, s, _ in x[1])]
        groups, a = [], 0
        for b in range(1, len(u[1])):
            if not all(_group_holds(x, u, a, b) for x in readers):
                groups.append((a, b - 1))
                a = b
        groups.append((a, len(u[1]) - 1))
        if len(groups) < len(u[1]):
            plan[u] = tuple(groups)
    return plan


def merge_digits(e: E.Expr, plan) -> E.Expr:
    """`e` with the digits of each unravelling in `plan` over its merged sizes (the same
    value): a group's terms as one term Digit(base, merged, g) * c_last, a lone dim's
    digit as the merged unravelling's digit. A group that does not hold in `e` (an
    expression `merge_plan` did not see) keeps its digits over the old sizes."""
    if not plan:
        return e
    uses = _digit_uses(e)
    mine = [u for u in plan if u in uses[0] or any((b, s) == u for b, s, _ in uses[1])]
    if not mine:
        return e
    lone: dict[tuple, E.Expr] = {}          # (base, sizes, k) -> its merged digit
    fold: dict[tuple, tuple] = {}           # (base, sizes, k) of a merged group -> group
    for u in mine:
        groups = plan[u]
        merged = tuple(E.product(u[1][a:b + 1]) for a, b in groups)
        for g, (a, b) in enumerate(groups):
            if a == b:
                lone[(u[0], u[1], a)] = E.Digit(u[0], merged, g) if len(merged) > 1 else u[0]
            elif _group_holds(uses, u, a, b):
                for j in range(a, b + 1):
                    fold[(u[0], u[1], j)] = (u, merged, g, b)

    def sub(x: E.Expr) -> E.Expr:
        return E.rewrite(x, lambda d: lone.get((d.base, d.sizes, d.k))
                         if isinstance(d, E.Digit) else None)
    out: list[E.Expr] = []
    done: set[tuple] = set()
    for t in (e.terms if isinstance(e, E.Add) else (e,)):
        lin = _linear_digit(t)
        key = (lin[0].base, lin[0].sizes, lin[0].k) if lin else None
        if key not in fold:
            out.append(sub(t))
            continue
        u, merged, g, b = fold[key]
        if (u, g) in done:
            continue
        done.add((u, g))
        # c_last: the coefficient of the group's last digit of size other than 1
        wanted = [j for j in range(plan[u][g][0], b + 1) if not _unit(u[1][j])]
        c_last = uses[0][u][wanted[-1]][0]
        digit = E.Digit(u[0], merged, g) if len(merged) > 1 else u[0]
        out.append(E.mul(digit, c_last))
    return E.add(*out)
