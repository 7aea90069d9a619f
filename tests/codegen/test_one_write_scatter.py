"""A scatter that writes one element per line along its dim (the one-hot of a loss's
backward) is elementwise and fused (ir/ops.py's `one_write_scatter`); other scatters
are scatter kernels of their own (codegen/scatter.py). Both give eager's numbers, for every dim, rank and dtype."""
import itertools

import pytest
import torch
import torch.nn.functional as F

import fusionstitch


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    fusionstitch.reset_stats()


def _compiled(fn, target="cpu"):
    return torch.compile(fn, backend=fusionstitch.backend(target=target))


def _one_per_line(shape, dim, g):
    ishape = list(shape)
    ishape[dim] = 1
    return torch.randint(0, shape[dim], ishape, generator=g)


SHAPES = [(7,), (4, 5), (3, 1, 6), (2, 3, 4, 5)]


@pytest.mark.parametrize("form", ["value", "src", "zeros"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16])
def test_one_write_scatters_are_fused_and_exact(form, dtype):
    g = torch.Generator().manual_seed(0)
    for shape in SHAPES:
        for dim in itertools.chain(range(len(shape)), [-1]):
            x = (torch.randn(shape, generator=g) * 10).to(dtype)
            i = _one_per_line(shape, dim % len(shape), g)
            src = (torch.randn([s + 1 for s in shape], generator=g) * 10).to(dtype)

            def fn(x, i, src):
                if form == "value":
                    return torch.scatter(x, dim, i, 3) * 2
                if form == "src":
                    return torch.scatter(x, dim, i, src).abs()
                return torch.zeros_like(x).scatter(dim, i, -1) * x

            torch._dynamo.reset()
            fusionstitch.reset_stats()
            got = _compiled(fn)(x, i, src)
            torch.testing.assert_close(got, fn(x, i, src), rtol=0, atol=0)
            assert fusionstitch.stats()["fallbacks"] == 0, (shape, dim)
            assert fusionstitch.stats()["kernels_launched"] == 1, (shape, dim)


def test_other_scatters_are_scatter_kernels_of_their_own():
    """(codegen/scatter.py; they ran through torch before)"""
    x = torch.randn(4, 5)
    two = torch.tensor([[0, 1], [4, 4], [1, 3], [2, 0]])      # two writes a line
    short = torch.tensor([[0], [4], [1]])                     # not every line
    for i in (two, short):
        torch._dynamo.reset()
        fusionstitch.reset_stats()
        fn = lambda x, i: torch.scatter(x * 2, 1, i, 7.0) + 1   # noqa: E731
        torch.testing.assert_close(_compiled(fn)(x, i), fn(x, i))
        s = fusionstitch.stats()
        assert s["fallbacks"] == 0 and s["kernels_launched"] == 3, s


def test_an_index_out_of_range_raises_naming_scatter():
    fn = lambda x, i: torch.scatter(x, 1, i, 1.0) * 2     # noqa: E731
    x = torch.randn(4, 5)
    with pytest.raises(RuntimeError):
        fn(x, torch.tensor([[0], [5], [1], [2]]))
    with pytest.raises(IndexError, match=r"scatter\.value: an index along dim 1 must be in "):
        _compiled(fn)(x, torch.tensor([[0], [5], [1], [2]]))


def test_a_cross_entropy_training_step_has_no_fallback():
    w = torch.randn(5, 3, requires_grad=True)

    def step(x, t):
        return F.cross_entropy(x @ w, t, ignore_index=1)

    x, t = torch.randn(6, 5), torch.tensor([0, 2, 1, 2, 0, 1])
    loss = _compiled(step)(x, t)
    loss.backward()
    got = w.grad.clone()
    w.grad = None
    step(x, t).backward()
    torch.testing.assert_close(got, w.grad)
    assert fusionstitch.stats()["fallbacks"] == 0


def test_the_triton_side_computes_it_too():
    pytest.importorskip("triton")
    x, i = torch.randn(4, 5), torch.tensor([[0], [4], [1], [2]])
    fn = lambda x, i: torch.zeros_like(x).scatter(1, i, -1.0) * x    # noqa: E731
    torch.testing.assert_close(_compiled(fn, "interpret")(x, i), fn(x, i))
    assert fusionstitch.stats()["fallbacks"] == 0
