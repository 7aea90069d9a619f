"""Components split along x at a concatenation's boundaries (codegen/pieces.py): a column
sum over a cat along the columns (GPT-2's QKV bias gradient), rows of a cat along the
rows, elementwise ops over a cat of outer pieces. Each piece is a component of its own
whose loads are unmasked by the cat and whose index reads x without the piece's offset;
results are eager's (the cat exactly, the sums within test_reduction_numerics' bound)."""
import re

import pytest
import torch

import fusionstitch
from fusionstitch.codegen import expr as E
from fusionstitch.codegen import pieces
from fusionstitch.codegen.kernel import Load, Store, bodies
from fusionstitch.codegen.lower import lower_group
from fusionstitch.fusion.plan import KERNEL
from fusionstitch.targets.cpp import printer as cpu
from tests.codegen.test_reduction_numerics import assert_near_float64


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()


def kernels(fn, *args):
    with torch.no_grad():
        rep = fusionstitch.explain(fn, *args, target="cpu")
    return [lower_group(g.plan.graph, grp.nodes, "k") for g in rep.graphs
            for grp in g.plan.groups if grp.kind == KERNEL]


def qkv_grad(dq, dk, dv):
    """[B, H, T, D] per-head gradients -> [B*T, 3*H*D] and its column sum (the bias's)."""
    b, h, t, d = dq.shape
    parts = [p.permute(0, 2, 1, 3).reshape(b, t, h * d) for p in (dq, dk, dv)]
    cat = torch.cat(parts, 2).view(b * t, 3 * h * d)
    return cat, cat.sum(0, keepdim=True)


def cat_columns(a, b, c):
    cat = torch.cat([a, b, c], -1)
    return cat * 2, (cat * 2).sum(0)


def cat_rows(a, b):
    return torch.cat([a, b * 3], 0).sum(-1)


def cat_outer(a, b):
    return torch.exp(torch.cat([a, b], 0)) + 1


def _check(fn, args, target="cpu"):
    with torch.no_grad():
        eager = fn(*args)
        got = torch.compile(fn, backend=fusionstitch.backend(target=target))(*args)
        ref = fn(*(a.double() for a in args))
        scale = fn(*(a.double().abs() for a in args))
    eager = eager if isinstance(eager, tuple) else (eager,)
    got = got if isinstance(got, tuple) else (got,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    scale = scale if isinstance(scale, tuple) else (scale,)
    assert_near_float64(got, eager, ref, fn.__name__, scale)
    return got, eager


def _divides_a_shifted_x(e) -> bool:
    """Whether `e` divides (or takes a digit of) x plus an offset: a piece's offset left
    inside the index arithmetic, a division per element that a dense index does not do."""
    if isinstance(e, (E.FloorDiv, E.Mod, E.Digit)):
        a = e.base if isinstance(e, E.Digit) else e.a
        if isinstance(a, E.Add) and E.Var("x") in a.terms:
            return True
    return any(_divides_a_shifted_x(t) for t in E.children(e))


def _loads_read_unshifted_x(k) -> None:
    for c in k.components:
        for body in bodies(c):
            for s in body:
                if isinstance(s, (Load, Store)):
                    assert not _divides_a_shifted_x(s.index), E.to_source(s.index)


# -- structure --------------------------------------------------------------------
def test_column_sum_over_a_cat_is_one_dense_component_per_piece():
    args = [torch.randn(2, 4, 16, 32) for _ in range(3)]
    (k,) = kernels(qkv_grad, *args)
    assert len(k.components) == 3
    for c in k.components:
        loads = {s.buffer for lp in c.loops for s in lp.body if isinstance(s, Load)}
        assert len(loads) == 1, loads         # its own piece only, no other piece's loads
    _loads_read_unshifted_x(k)
    src = cpu.cpp_source(k)
    assert src.count("columns:") == 3
    # no per-element offset of a piece inside a division: x's digits are dense again
    assert not re.search(r"\(x \+ \(-\d+\)\) [/%]", src), src


def test_rows_of_a_cat_along_rows_split_by_rows():
    (k,) = kernels(cat_rows, torch.randn(40, 50), torch.randn(24, 50))
    assert [c.xnumel.value for c in k.components] == [40, 24]
    _loads_read_unshifted_x(k)


def test_elementwise_over_a_cat_of_outer_pieces_splits():
    (k,) = kernels(cat_outer, torch.randn(32, 5), torch.randn(20, 5))
    assert [c.kind for c in k.components] == ["flat", "flat"]
    assert [c.xnumel.value for c in k.components] == [160, 100]
    _loads_read_unshifted_x(k)


def test_a_cat_of_3d_pieces_along_dim_0_reads_each_piece_densely():
    # x // (64 * 128) of the second piece is its own x's plus 4 (the pieces before it):
    # no (x + 32768) // 8192 per element
    (k,) = kernels(lambda a, b, c: torch.cat([a, b, c], 0) * 2,
                   *(torch.randn(4, 8, 16) for _ in range(3)))
    assert len(k.components) == 3
    _loads_read_unshifted_x(k)


def test_narrow_pieces_stay_one_component():
    # a piece narrower than MIN_PIECE: a component of its own would be a pass over every
    # row for a few columns
    (k,) = kernels(cat_columns, torch.randn(8, 40), torch.randn(8, pieces.MIN_PIECE - 1),
                   torch.randn(8, 40))
    assert len(k.components) == 1


def test_a_stack_of_many_steps_splits_into_a_component_per_step():
    # an RNN's 50 outputs stacked (lstm at full size): more than MAX_PIECES intervals, but
    # each piece keeps its one load, so the pieces' code stays within twice the one
    # component's that evaluated all 50 masked loads per element (18x Inductor's time)
    steps = [torch.randn(4, 32) for _ in range(50)]
    assert len(steps) > pieces.MAX_PIECES
    k = max(kernels(lambda *xs: torch.stack(xs, 0) * 2, *steps),
            key=lambda k: len(k.components))
    assert len(k.components) == 50
    for c in k.components:
        assert sum(isinstance(s, Load) for body in bodies(c) for s in body) == 1
    _loads_read_unshifted_x(k)
    got, eager = _check(lambda *xs: torch.cat(xs, 0) + 1, steps)
    assert torch.equal(got[0], eager[0])


def test_many_pieces_with_shared_work_match_eager():
    # a cat of 20 pieces times a long chain of a row vector that every piece reads
    steps = [torch.randn(4, 32) for _ in range(20)]

    def fn(w, *xs):
        v = w
        for _ in range(30):
            v = torch.sin(v) * 1.5 + 0.25
        return torch.cat(xs, 0) * v
    _check(fn, [torch.randn(32)] + steps)


# -- numerics ---------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 4, 16, 32), (3, 2, 7, 17), (1, 3, 1, 24)])
def test_qkv_bias_gradient_matches_eager(shape):
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(shape, generator=g) for _ in range(3)]
    got, eager = _check(qkv_grad, args)
    assert torch.equal(got[0], eager[0])


@pytest.mark.parametrize("widths,rows", [((17, 40, 23), 33), ((16, 16, 16), 1),
                                         ((3, 40, 40), 9), ((64, 1, 64), 130)])
def test_column_sums_over_cats_match_eager(widths, rows):
    g = torch.Generator().manual_seed(1)
    args = [torch.randn(rows, w, generator=g) for w in widths]
    got, eager = _check(cat_columns, args)
    assert torch.equal(got[0], eager[0])


@pytest.mark.parametrize("target", ["cpu", "interpret"])
def test_cats_along_rows_and_outer_dims_match_eager(target):
    g = torch.Generator().manual_seed(2)
    _check(cat_rows, [torch.randn(40, 50, generator=g), torch.randn(17, 50, generator=g)],
           target)
    torch._dynamo.reset()
    got, eager = _check(cat_outer, [torch.randn(32, 5, generator=g),
                                    torch.randn(21, 5, generator=g)], target)
    torch.testing.assert_close(got[0], eager[0])


def test_interpret_target_runs_the_pieces_of_a_column_sum():
    g = torch.Generator().manual_seed(3)
    args = [torch.randn(1, 2, 5, 16, generator=g) for _ in range(3)]
    got, eager = _check(qkv_grad, args, "interpret")
    assert torch.equal(got[0], eager[0])


# -- pieces along the last dim of rows (codegen/pieces.py `_split_columns`) ----------
def cat_last(*xs):
    return torch.cat(xs, -1) * 2


def test_a_cat_along_the_last_dim_splits_into_dense_row_blocks():
    # an RNN's 28 steps stacked on dim 1 of [B, T, H] (birnn at full size): one loop
    # evaluated all 28 masked loads per element, 12x Inductor's copy
    steps = [torch.randn(8, 32) for _ in range(28)]
    k = max(kernels(lambda *xs: torch.stack(xs, 1) * 2, *steps),
            key=lambda k: len(k.components))
    assert len(k.components) == 28
    for c in k.components:
        assert c.xnumel.value == 8 * 32
        assert sum(isinstance(s, Load) for body in bodies(c) for s in body) == 1
        # no load under the cat's masks: each piece reads its own input unmasked
        assert all(s.mask in (None, "xmask") for body in bodies(c) for s in body
                   if isinstance(s, Load))
    _loads_read_unshifted_x(k)


def test_a_column_split_needs_every_use_of_x_as_a_digit_of_one_shape():
    # the cat's rows broadcast against a [B, 1] column: still digits of one shape
    (k,) = kernels(lambda a, b, s: torch.cat([a, b], -1) * s,
                   torch.randn(6, 40), torch.randn(6, 24), torch.randn(6, 1))
    assert len(k.components) == 2


@pytest.mark.parametrize("target", ["cpu", "interpret"])
@pytest.mark.parametrize("widths,rows", [((16, 16), 3), ((17, 40, 23), 5), ((32,) * 20, 4)])
def test_cats_along_the_last_dim_match_eager(widths, rows, target):
    g = torch.Generator().manual_seed(4)
    args = [torch.randn(rows, w, generator=g) for w in widths]
    got, eager = _check(cat_last, args, target)
    assert torch.equal(got[0], eager[0])
    torch._dynamo.reset()
    got, eager = _check(cat_columns, args[:3] if len(args) >= 3 else args + [args[0]], target)
    assert torch.equal(got[0], eager[0])


def test_a_cat_along_the_middle_dim_of_3d_rows_matches_eager():
    g = torch.Generator().manual_seed(5)
    args = [torch.randn(3, w, 16, generator=g) for w in (2, 5, 1)]
    got, eager = _check(lambda *xs: torch.tanh(torch.cat(xs, 1)), args)
    torch.testing.assert_close(got[0], eager[0])
