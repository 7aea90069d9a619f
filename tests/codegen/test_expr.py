"""Index expressions: folding, unravel/ravel round trips, printing."""
from fusionstitch.codegen import expr as E


def test_folding():
    x = E.Var("x")
    assert E.mul(x, E.ONE) == x
    assert E.add(x, E.ZERO) == x
    assert E.mul(x, E.ZERO) == E.ZERO
    assert E.floordiv(x, E.ONE) == x
    assert E.mod(x, E.ONE) == E.ZERO
    assert E.add(E.Const(2), E.Const(3)) == E.Const(5)


def test_ravel_of_unravel_gives_the_base_back():
    x = E.Var("x")
    sizes = (E.Sym("ks0", 4), E.Sym("ks1", 6))
    assert E.ravel(E.unravel(x, sizes), sizes) == x
    # a different size tuple is not recognised: the general formula is used
    other = (E.Sym("ks1", 6), E.Sym("ks0", 4))
    assert E.ravel(E.unravel(x, sizes), other) != x


def test_unravel_matches_python_arithmetic():
    sizes = (E.Sym("a", 3), E.Sym("b", 4), E.Sym("c", 5))
    env = {"a": 3, "b": 4, "c": 5}
    for v in range(60):
        digits = [eval(E.to_source(d), {}, dict(env, x=v)) for d in E.unravel(E.Var("x"), sizes)]
        assert digits == [v // 20, (v // 5) % 4, v % 5]


def test_c_and_python_printing():
    e = E.floordiv(E.add(E.Var("x"), E.Sym("ks0", 3)), E.Sym("ks1", 2))
    assert E.to_source(e) == "(x + ks0) // ks1"
    assert E.to_source(e, "/") == "(x + ks0) / ks1"
    assert E.free_vars(e) == {"x"}
    assert {s.name for s in E.syms(e)} == {"ks0", "ks1"}


def test_rewrite_replaces_outermost_first_and_simplifies_around():
    x, s = E.Var("x"), E.Sym("s", 3)
    e = E.add(E.mul(x, s), E.floordiv(x, s), E.Digit(x, (s, E.Const(4)), 1))
    got = E.rewrite(e, lambda t: E.Const(1) if t == s else None)
    assert got == E.add(x, x, E.Digit(x, (E.Const(1), E.Const(4)), 1))   # x*1, x//1 fold
    # a replacement is not rewritten again; nothing matched: the same value
    assert E.rewrite(s, lambda t: E.mul(s, s) if t == s else None) == E.mul(s, s)
    assert E.rewrite(e, lambda t: None) == e
