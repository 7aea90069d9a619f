"""Scatter kernels (codegen/scatter.py): index_put, index_add, scatter_add and scatter run as
generated kernels of their own on the cpu target: a parallel copy, then the stores at
data-dependent positions in order on one thread. They give eager's numbers for repeated
and negative indices, every dtype the kernels have, broadcast values and index tensors
at any dims; an index out of range raises IndexError naming the op; a target without
such stores (Triton) leaves the op to torch, counted with that reason."""
import pytest
import torch
import torch.nn.functional as F

import fusionstitch
from fusionstitch.codegen.kernel import kernel_text
from fusionstitch.codegen.scatter import lower_scatter
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.targets import resolve


pytestmark = pytest.mark.usefixtures("strict_fresh")


def _compiled(fn, target="cpu"):
    return torch.compile(fn, backend=fusionstitch.backend(target=target))


def _check(fn, *args, kernels=None):
    """Compiled against eager: floats whose sums are exact in any order (small integers)
    bitwise, so that the check holds whatever order eager's kernel adds in."""
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    got = _compiled(fn)(*args)
    want = fn(*args)
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b), (a, b)
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0 and s["library_calls"] == 0, s
    if kernels is not None:
        assert s["kernels_launched"] == kernels, s


def _ints_as(dtype, shape, g, lo=-8, hi=8):
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("accumulate", [True, False])
def test_index_put_one_index_tensor(dtype, accumulate):
    g = torch.Generator().manual_seed(0)
    x = _ints_as(dtype, (10, 4), g)
    if accumulate:   # repeated and negative positions
        ids = torch.tensor([1, 3, 1, -1, 9, 3, 0, 1])
    else:            # distinct positions: eager's result is defined
        ids = torch.tensor([1, 3, -2, 0, 9])
    v = _ints_as(dtype, (len(ids), 4), g)
    _check(lambda x, i, v: torch.index_put(x, [i], v, accumulate), x, ids, v, kernels=1)


@pytest.mark.parametrize("case", ["2d-index", "broadcast-values", "two-indices",
                                  "trailing-dims", "middle-dim", "apart"])
def test_index_put_index_layouts(case):
    g = torch.Generator().manual_seed(1)
    x = _ints_as(torch.float32, (5, 6, 3), g)
    if case == "2d-index":          # x[ids] with ids (2, 4): values (2, 4, 6, 3)
        ix, v = [torch.randint(-5, 5, (2, 4), generator=g)], (2, 4, 6, 3)
    elif case == "broadcast-values":
        ix, v = [torch.tensor([0, 4, 0, -5])], (3,)
    elif case == "two-indices":     # x[i, j]: (4, 3)
        ix, v = [torch.tensor([0, 4, 0, 2]), torch.tensor([5, 0, 5, -1])], (4, 3)
    elif case == "trailing-dims":   # x[i, j, k]: one element each
        ix = [torch.tensor([0, 4, 0]), torch.tensor([1, 1, 1]), torch.tensor([2, 0, 2])]
        v = (3,)
    elif case == "middle-dim":      # x[:, j]: (5, 4, 3)
        ix, v = [None, torch.tensor([1, 5, 1, 0])], (5, 4, 3)
    else:                           # x[i, :, k] (dims apart): the index dims go first
        ix, v = [torch.tensor([[0], [3]]), None, torch.tensor([0, 2, 2])], (2, 3, 6)
    vals = _ints_as(torch.float32, v, g)
    refs = [i for i in ix if i is not None]

    def fn(x, vals, *refs):
        it = iter(refs)
        return torch.ops.aten.index_put(x, [None if i is None else next(it) for i in ix],
                                        vals, True)
    _check(fn, x, vals, *refs, kernels=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add_and_scatter_add(dtype, dim):
    g = torch.Generator().manual_seed(2)
    x = _ints_as(dtype, (4, 5, 3), g)
    n = x.shape[dim]
    ids = torch.randint(0, n, (7,), generator=g)
    shape = list(x.shape)
    shape[dim] = 7
    src = _ints_as(dtype, shape, g)
    _check(lambda x, i, s: torch.index_add(x, dim, i, s), x, ids, src, kernels=1)
    small = [2, 3, 2]
    small[dim] = 6
    index = torch.randint(0, n, small, generator=g)
    _check(lambda x, i, s: torch.scatter_add(x, dim, i, s), x, index, src, kernels=1)


def _distinct_positions(shape, n, dim, g):
    """An index of `shape` whose entries along `dim` are distinct and below n in every
    line: each position is written once (eager leaves repeated writes unspecified)."""
    lines = torch.stack([torch.randperm(n, generator=g)[:shape[dim]]
                         for _ in range(max(1, torch.Size(shape).numel() // shape[dim]))])
    rest = [s for k, s in enumerate(shape) if k != dim % len(shape)]
    return lines.reshape(*rest, shape[dim]).movedim(-1, dim).contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_src_and_value_write_several_per_line(dtype, dim):
    """scatter(x, dim, index, src | value) writing several elements of a line (an MoE
    router's backward): a kernel of its own (it ran through torch); the one-write form
    stays elementwise (test_one_write_scatter.py)."""
    g = torch.Generator().manual_seed(3)
    x = _ints_as(dtype, (5, 6, 4), g)
    small = [3, 4, 3]
    small[dim] = 3
    index = _distinct_positions(small, x.shape[dim], dim, g)
    src = _ints_as(dtype, (4, 5, 4), g)
    _check(lambda x, i, s: torch.scatter(x, dim, i, s), x, index, src, kernels=1)
    _check(lambda x, i: torch.scatter(x, dim, i, 7), x, index, kernels=1)
    # an index out of range raises, naming the op
    bad = index.clone()
    bad.view(-1)[1] = x.shape[dim]
    with pytest.raises(IndexError, match=r"scatter\.src: an index along dim"):
        _compiled(lambda x, i, s: torch.scatter(x, dim, i, s))(x, bad, src)


def test_an_embedding_training_step_runs_no_library_call():
    # the embedding's backward is index_put(zeros, [ids], grad, accumulate=True)
    emb = torch.nn.Embedding(20, 8)
    ids = torch.tensor([[1, 5, 1, 19], [0, 5, 5, 2]])

    def step(ids):
        return (emb(ids).sum(1) ** 2).mean()
    loss = _compiled(step)(ids)
    loss.backward()
    got = emb.weight.grad.clone()
    emb.weight.grad = None
    step(ids).backward()
    torch.testing.assert_close(got, emb.weight.grad, rtol=1e-6, atol=1e-6)
    assert fusionstitch.stats()["fallbacks"] == 0


def test_an_index_out_of_range_raises_naming_the_op():
    x, v = torch.zeros(6, 2), torch.ones(3, 2)
    fn = lambda x, i, v: torch.index_put(x, [i], v, True) * 2     # noqa: E731
    c = _compiled(fn)
    c(x, torch.tensor([0, 5, -6]), v)
    for bad in (torch.tensor([0, 6, 1]), torch.tensor([0, -7, 1])):
        with pytest.raises(IndexError, match=r"index_put\.default: an index of dim 0"):
            c(x, bad, v)
    fn2 = lambda x, i, s: torch.scatter_add(x, 0, i, s)    # noqa: E731
    with pytest.raises(IndexError, match=r"scatter_add\.default: an index along dim 0"):
        _compiled(fn2)(x, torch.tensor([[0, 6]]), v)


def test_a_scatter_is_a_kernel_of_its_own_and_leaves_inputs_alone():
    # its value's producer and its consumer are kernels apart; x is copied, not written
    def fn(x, i, v):
        return torch.index_put(x, [i], v * 3, True).neg() + 1
    x, i, v = torch.zeros(8, 3), torch.tensor([1, 1, 7]), torch.ones(3, 3)
    before = x.clone()
    _check(fn, x, i, v, kernels=3)
    assert torch.equal(x, before)


def _graph():
    b = GraphBuilder()
    x, i, v = b.param((10, 4), "f32"), b.param((6,), "i64"), b.param((6, 4), "f32")
    out = b.op("index_put.default", x, [i], v, True)
    return b.build(out), out.name


def test_the_kernel_is_a_copy_then_ordered_accumulating_stores():
    g, name = _graph()
    k = lower_scatter(g, name, "k")
    assert [c.kind for c in k.components] == ["flat", "scatter"]
    text = kernel_text(k)
    assert "+=" in text and "check_index" in text
    src = resolve("cpu").render(k)
    scatter = src[src.index("scatter, x <"):]
    assert "omp" not in scatter          # one thread, in order


def test_a_target_without_scatter_stores_refuses_it_with_the_reason():
    g, name = _graph()
    assert resolve("cpu").can_lower(g, [name]) == ""
    why = resolve("interpret").can_lower(g, [name])
    assert "data-dependent positions" in why


def test_the_triton_side_runs_it_through_torch_counted():
    pytest.importorskip("triton")
    x, i, v = torch.zeros(6, 2), torch.tensor([0, 5, 0]), torch.ones(3, 2)
    fn = lambda x, i, v: torch.index_put(x, [i], v, True) * 2     # noqa: E731
    torch.testing.assert_close(_compiled(fn, "interpret")(x, i, v), fn(x, i, v))
    assert fusionstitch.stats()["fallbacks"] == 1


def test_cross_entropy_with_embedding_matches_eager_gradients():
    torch.manual_seed(0)
    emb, lin = torch.nn.Embedding(30, 6), torch.nn.Linear(6, 5)
    ids, t = torch.tensor([3, 3, 29, 0, 7, 3]), torch.tensor([0, 4, 1, 1, 2, 3])

    def step(ids, t):
        return F.cross_entropy(lin(emb(ids)), t)
    _compiled(step)(ids, t).backward()
    got = emb.weight.grad.clone()
    emb.weight.grad = None
    lin.zero_grad()
    step(ids, t).backward()
    torch.testing.assert_close(got, emb.weight.grad, rtol=1e-6, atol=1e-7)


def test_symbolic_sizes_compile_once_and_match_eager():
    fn = lambda x, i, v: torch.index_put(x, [i], v, True) + 1     # noqa: E731
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    g = torch.Generator().manual_seed(3)
    for n in (5, 9, 13):
        x, v = _ints_as(torch.float32, (n, 3), g), _ints_as(torch.float32, (2 * n, 3), g)
        i = torch.randint(-n, n, (2 * n,), generator=g)
        assert torch.equal(c(x, i, v), fn(x, i, v))
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0 and s["symbolic_programs"] >= 1, s
