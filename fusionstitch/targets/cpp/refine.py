"""One unravelling of x for the digits a component reads of it over several (cpu target).

    flatten(e, constants)           a digit of a digit of x as one digit of x
    refine_plan(exprs, constants)   {sizes: (refined sizes, their cuts)} for the
                                    unravellings of x in `exprs` (flattened) that a
                                    finer one unites
    refine_digits(e, plan)          `e` (flattened) with those digits over the refined
                                    sizes

A view after a transposition reads x unravelled twice: [8, 8, 64, 64] permuted to
[8, 64, 8, 64] and viewed as [512, 512] loads at digits of x over (8, 64, 512) and over
(512, 8, 64): a digit of x over (512, 512) split again over (8, 64) is a digit of x over
(512, 8, 64) (`flatten`, where 8 * 64 is 512 statically). The loop in
rows then runs along the second 512 with a division and a modulo per element (attention
heads merged back: 3.3x Inductor's copy). Both are digits of one unravelling over
(8, 64, 8, 64): the sizes whose cut points (the products of the sizes after a digit)
are those of every unravelling of x in the component. Rewritten over it, a digit is
one digit of the refined sizes, or a sum of several times their inner sizes, and the
loops run over the refined dims (rows of 64, contiguous on both sides).

Only unravellings of static sizes (every sym a constant: `constants`) of equal products
whose cut points nest (each divides the one above) are refined: the digits are the same
values exactly.
"""
from __future__ import annotations

import math

from ...codegen import expr as E
from .index import static_value

X = E.Var("x")


def flatten(e: E.Expr, constants: dict[str, int]) -> E.Expr:
    """`e` with each Digit(Digit(x, S, j), T, k) whose sizes T multiply to S[j] (static
    sizes) as Digit(x, S[:j] + T + S[j+1:], j + k): the same value, (x // inner(S, j)
    % S[j]) // inner(T, k) % T[k] being x // (inner(T, k) * inner(S, j)) % T[k]."""
    def rewrite(t: E.Expr) -> E.Expr | None:
        if not isinstance(t, E.Digit):
            return None
        base = E.rewrite(t.base, rewrite)
        if isinstance(base, E.Digit) and base.base == X and len(t.sizes) >= 2:
            outer = static_value(base.sizes[base.k], constants)
            inner = [static_value(z, constants) for z in t.sizes]
            if outer is not None and None not in inner and math.prod(inner) == outer:
                sizes = base.sizes[:base.k] + t.sizes + base.sizes[base.k + 1:]
                return E.Digit(X, sizes, base.k + t.k)
        return E.Digit(base, tuple(E.rewrite(z, rewrite) for z in t.sizes), t.k)
    return E.rewrite(e, rewrite)


def _digits(e: E.Expr, found: set) -> None:
    if isinstance(e, E.Digit) and e.base == X and len(e.sizes) >= 2:
        found.add(e.sizes)
    for c in E.children(e):
        _digits(c, found)


def refine_plan(exprs, constants: dict[str, int]) -> dict:
    """{sizes: (refined sizes as constants, cut points from the total down to 1)} for each
    unravelling of x in `exprs`, when there are two or more and a common refinement
    exists; else {}."""
    found: set = set()
    for e in exprs:
        _digits(flatten(e, constants), found)
    if len(found) < 2:
        return {}
    values = {}
    for sizes in found:
        vals = [static_value(z, constants) for z in sizes]
        if any(v is None or v < 1 for v in vals):
            return {}
        values[sizes] = vals
    totals = {math.prod(v) for v in values.values()}
    if len(totals) != 1:
        return {}
    cuts = {totals.pop()}
    for vals in values.values():
        cuts.update(math.prod(vals[k + 1:]) for k in range(len(vals)))
    cuts = sorted(cuts, reverse=True)
    if any(a % b for a, b in zip(cuts, cuts[1:])):
        return {}
    refined = tuple(E.Const(a // b) for a, b in zip(cuts, cuts[1:]))
    if all(len(v) == len(refined) for v in values.values()):
        return {}
    plan = {sizes: (refined, tuple(cuts), values[sizes]) for sizes in found}
    plan[None] = constants          # for `flatten` in refine_digits
    return plan


def refine_digits(e: E.Expr, plan: dict) -> E.Expr:
    """`e` with every digit of x over a planned unravelling as digits of the refined one:
    digit k of sizes S covers the refined dims between its cut points, lo = S[k+1] * ...
    and hi = S[k] * lo, and is their sum, each times its inner size over lo."""
    if not plan:
        return e
    e = flatten(e, plan[None])

    def parts(t: E.Expr) -> list[E.Expr] | None:
        if not (isinstance(t, E.Digit) and t.base == X and t.sizes in plan):
            return None
        refined, cuts, vals = plan[t.sizes]
        lo = math.prod(vals[t.k + 1:])
        hi = lo * vals[t.k]
        return [E.mul(E.Digit(X, refined, i), E.Const(cuts[i + 1] // lo))
                for i in range(len(refined)) if cuts[i] <= hi and cuts[i + 1] >= lo]

    def rewrite(t: E.Expr) -> E.Expr | None:
        p = parts(t)
        return None if p is None else E.add(*p)
    # a top-level term digit * coefficient becomes one term per refined digit (what
    # merge_plan and specialize read); a digit anywhere else, their sum
    out = []
    for t in e.terms if isinstance(e, E.Add) else (e,):
        factors = t.factors if isinstance(t, E.Mul) else (t,)
        split = [(i, parts(f)) for i, f in enumerate(factors)]
        split = [(i, p) for i, p in split if p is not None]
        if len(split) == 1:
            i, p = split[0]
            rest = [E.rewrite(f, rewrite) for j, f in enumerate(factors) if j != i]
            out += [E.mul(q, *rest) for q in p]
        else:
            out.append(E.rewrite(t, rewrite))
    return E.add(*out)
