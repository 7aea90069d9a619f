"""An index read from a tensor (gather, embedding, index_select, x[idx], a loss's target)
that is out of range raises an error naming the op, as eager does, instead of reading
memory outside the tensor (kernel.py's `check_index`); in range, the results are
eager's, for every sign and size the op accepts."""
import pytest
import torch
import torch.nn.functional as F

import fusionstitch


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    fusionstitch.reset_stats()


def _compiled(fn, target="cpu", dynamic=False):
    return torch.compile(fn, backend=fusionstitch.backend(target=target), dynamic=dynamic)


X = torch.randn(4, 5)

# (name, fn, a good index, a bad index, the op the error names)
CASES = [
    ("gather", lambda x, i: torch.gather(x, 1, i) * 2,
     torch.tensor([[0], [4], [1], [2]]), torch.tensor([[0], [9], [1], [2]]), "gather"),
    ("gather_negative", lambda x, i: torch.gather(x, 1, i) * 2,
     torch.tensor([[0], [4], [1], [2]]), torch.tensor([[0], [-1], [1], [2]]), "gather"),
    ("gather_dim0", lambda x, i: torch.gather(x, 0, i) + 1,
     torch.tensor([[3, 0, 1, 2, 3]]), torch.tensor([[3, 0, 4, 2, 3]]), "gather"),
    ("index_select", lambda x, i: x.index_select(0, i).exp(),
     torch.tensor([3, 0, 3]), torch.tensor([3, 7, 0]), "index_select"),
    ("embedding", lambda x, i: F.embedding(i, x) * 3,
     torch.tensor([[1, 3], [0, 2]]), torch.tensor([[1, 3], [100000, 2]]), "embedding"),
    ("advanced_index", lambda x, i: x[i] + 1,
     torch.tensor([0, -4, 3]), torch.tensor([0, 4, 3]), "index"),
    ("advanced_index_negative", lambda x, i: x[:, i].sin(),
     torch.tensor([-5, -1, 4]), torch.tensor([-6, -1, 4]), "index"),
    ("cross_entropy", lambda x, t: F.cross_entropy(x, t),
     torch.tensor([0, 4, 2, 1]), torch.tensor([0, 1, 7, 2]), "gather"),
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name,fn,good,bad,op", CASES, ids=[c[0] for c in CASES])
def test_an_index_out_of_range_raises_naming_the_op(name, fn, good, bad, op, dynamic):
    with pytest.raises(Exception):      # eager refuses it too
        fn(X, bad)
    f = _compiled(fn, dynamic=dynamic)
    with pytest.raises(IndexError, match=rf"index out of range: {op}\S*: .* must be in \[0, "):
        f(X, bad)
    # the same compiled function, called with good indices: eager's numbers
    torch.testing.assert_close(f(X, good), fn(X, good))
    assert fusionstitch.stats()["fallbacks"] == 0


def test_a_training_step_with_a_bad_target_raises_and_the_next_one_is_right():
    w = torch.randn(5, 3, requires_grad=True)

    def step(x, t):
        return F.cross_entropy(x @ w, t)

    f = _compiled(step)
    x = torch.randn(4, 5)
    with pytest.raises(IndexError, match="gather"):
        f(x, torch.tensor([0, 3, 1, 2]))
    t = torch.tensor([0, 2, 1, 2])
    loss = f(x, t)
    loss.backward()
    got = w.grad.clone()
    w.grad = None
    step(x, t).backward()
    torch.testing.assert_close(loss, step(x, t))
    torch.testing.assert_close(got, w.grad)


def test_the_check_is_in_the_kernel_and_names_what_it_checks():
    from fusionstitch.targets.cpp.printer import cpp_source
    sink = []
    fn = torch.compile(lambda x, i: torch.gather(x, 1, i) * 2,
                       backend=fusionstitch.backend(target="cpu", _sink=sink))
    fn(X, torch.tensor([[0], [4], [1], [2]]))
    kernels = [k for g in sink for s in g.specialisations.values()
               for k in s.lowered.kernels.values()]
    assert any("gather" in c for k in kernels for c in k.checks)
    assert any("fs::check_index(" in cpp_source(k, "k") for k in kernels)


def test_the_triton_side_reads_element_zero_instead_of_outside_the_tensor():
    pytest.importorskip("triton")
    fn = lambda x, i: torch.gather(x, 1, i) * 2      # noqa: E731
    bad = torch.tensor([[0], [9], [1], [-3]])
    got = _compiled(fn, target="interpret")(X, bad)
    torch.testing.assert_close(got, fn(X, torch.where((bad >= 0) & (bad < 5), bad, 0)))


@pytest.mark.parametrize("where", [0, 777, -1], ids=["first", "middle", "last"])
@pytest.mark.parametrize("name", ["embedding", "gather", "cross_entropy"])
def test_an_index_out_of_range_in_a_vectorised_parallel_loop(name, where):
    """Large enough for the kernel's parallel loops (every thread's copy of the kernel's
    `fs_bad`, reduced by each SIMD loop and parallel region), a bad index in the first,
    a middle or the last position still raises; good indices give eager's numbers."""
    rows, width = 70_000, 8
    g = torch.Generator().manual_seed(5)
    if name == "embedding":
        table = torch.randn(1000, width, generator=g)
        fn = lambda t, i: F.embedding(i, t) * 3          # noqa: E731
        good = torch.randint(0, 1000, (rows,), generator=g)
        bad_value = 1000
    elif name == "gather":
        table = torch.randn(rows, width, generator=g)
        fn = lambda t, i: torch.gather(t, 1, i) * 2      # noqa: E731
        good = torch.randint(0, width, (rows, 1), generator=g)
        bad_value = -width - 1
    else:
        table = torch.randn(rows, width, generator=g)
        fn = F.cross_entropy
        good = torch.randint(0, width, (rows,), generator=g)
        bad_value = width
    bad = good.clone()
    bad.view(-1)[where] = bad_value
    f = _compiled(fn)
    torch.testing.assert_close(f(table, good), fn(table, good))
    with pytest.raises(IndexError, match="index out of range"):
        f(table, bad)
    torch.testing.assert_close(f(table, good), fn(table, good))


# An index along a dim of size 1 adds nothing to the address it reads (its term is 0), so
# no statement reads the checked index: the check must stay anyway. The printer's
# per-loop liveness (targets/cpp/rowbuf.py) dropped it, and with it the kernel's error
# cell, which the kernel's last line still named: a compile error, and every group of the
# graph ran through torch (a MobileViT's bilinear upsampling of a 1x1 map, 103 groups).
# Flat loops, rows with several loops (row buffers), one row, and the column order.
_Y = torch.randn(3, 64, generator=torch.Generator().manual_seed(2))
SIZE_ONE = [
    ("flat", lambda x, i: x[i] * 2, (1, 8)),
    ("softmax_rows", lambda x, i: (x[i] * 2).softmax(-1), (1, 8)),
    ("layer_norm_rows", lambda x, i: F.layer_norm(x[i].exp(), (8,)), (1, 8)),
    ("one_row", lambda x, i: (x[i] * 2).sum(), (1, 8)),
    ("columns", lambda x, i: x[:, i].exp().sum(0), (64, 1)),
    # concatenations split into pieces (codegen/pieces.py, whose dead code went too)
    ("cat_flat", lambda x, i: torch.cat([x[i].flatten() * 2, _Y.flatten()]).exp(), (1, 64)),
    ("cat_rows_sum", lambda x, i: torch.cat([x[i] * 2, _Y], 0).sum(0), (1, 64)),
    ("cat_cols_sum", lambda x, i: torch.cat([x[i] * 2, _Y], 1).exp().sum(0), (1, 64)),
]


@pytest.mark.parametrize("name,fn,shape", SIZE_ONE, ids=[c[0] for c in SIZE_ONE])
def test_an_index_into_a_dim_of_size_one_is_checked(name, fn, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    good, bad = torch.tensor([0, -1, 0]), torch.tensor([0, 1, 0])
    with pytest.raises(IndexError):      # eager refuses it
        fn(x, bad)
    f = _compiled(fn)     # (FUSIONSTITCH_STRICT=1: a kernel that does not compile raises)
    torch.testing.assert_close(f(x, good), fn(x, good))
    with pytest.raises(IndexError, match="index out of range: index"):
        f(x, bad)
    torch.testing.assert_close(f(x, good), fn(x, good))
    stats = fusionstitch.stats()
    assert stats["fallbacks"] == 0 and stats["kernels_launched"] > 0, stats


def test_an_upsampling_of_a_one_by_one_map_compiles():
    """The case found: bilinear interpolation of a 1x1 map, then a normalisation over
    its channels (the lowering's computed indices are checked, along dims of size 1)."""
    def fn(x, w, b):
        up = F.interpolate(x, size=(4, 4), mode="bilinear", align_corners=False)
        return F.layer_norm(up.permute(0, 2, 3, 1), (32,), w, b).sum(-1)
    g = torch.Generator().manual_seed(4)
    args = (torch.randn(2, 32, 1, 1, generator=g), torch.randn(32, generator=g),
            torch.randn(32, generator=g))
    torch.testing.assert_close(_compiled(fn)(*args), fn(*args))
    assert fusionstitch.stats()["fallbacks"] == 0
