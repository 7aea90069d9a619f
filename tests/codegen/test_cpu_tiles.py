"""Flat loops that read (or write) across their rows run in tiles (targets/cpp/flat.py
`tiled`), and a kernel input that is a view of a graph input expects the view's
strides (codegen/view_strides.py), so that its dense version is the one that runs."""
import pytest
import torch

import fusionstitch
from fusionstitch.codegen.lower import lower_group
from fusionstitch.codegen.view_strides import expected_strides
from fusionstitch.fusion.plan import KERNEL
from fusionstitch.targets.cpp import flat
from fusionstitch.targets.cpp.index import expected_values
from fusionstitch.targets.cpp import printer as cpu


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Each test taking it runs with torch (and its kernels) on 1 and on 2 threads."""
    old = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(old)


def kernels(fn, *args):
    with torch.no_grad():
        rep = fusionstitch.explain(fn, *args, target="cpu")
    return [(g.plan.graph, lower_group(g.plan.graph, grp.nodes, "k"))
            for g in rep.graphs for grp in g.plan.groups if grp.kind == KERNEL]


def dense(src: str) -> str:
    return src[src.index("// dense"):].split("} else {")[0]


w = torch.randn(96)
CASES = {
    # NCHW read into NHWC rows (a channels-last convolution's input copy): rows of C
    "nchw_to_nhwc": (lambda x: (x.permute(0, 2, 3, 1) * 2).contiguous(), (2, 96, 9, 20)),
    # an NHWC tensor read as NCHW with a per-channel scale and a residual (batch norm,
    # residual add and relu after a channels-last convolution): rows of H * W
    "nhwc_to_nchw": (lambda y, r: torch.relu(y.permute(0, 3, 1, 2) * w.view(-1, 1, 1) + r),
                     (2, 9, 20, 96), (2, 96, 9, 20)),
    # a matrix's transpose, scaled
    "transpose": (lambda a: (a.t() * 3 + 1).contiguous(), (200, 130)),
}


def sample(shapes):
    return [torch.randn(*s) for s in shapes]


@pytest.mark.parametrize("case", sorted(CASES))
def test_reads_across_rows_run_in_tiles(case):
    fn, *shapes = CASES[case]
    args = sample(shapes)
    found = kernels(fn, *args)
    srcs = [cpu.cpp_source(k) for _, k in found]
    assert any(f"in tiles of {flat.TILE_ROWS} x {flat.TILE_COLS}" in dense(s)
               for s in srcs if "// dense" in s), srcs
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    with torch.no_grad():
        torch.testing.assert_close(c(*args), fn(*args), rtol=0, atol=0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_tiles_give_eager_numbers_at_other_sizes_and_strides(case):
    """Partial tiles at both ends of a row and of the rows (sizes prime to the tile's),
    one row, empty tensors, inputs of other strides (the general version): every element
    exactly eager's (the ops are exact or one rounding each, in eager's order)."""
    fn, *shapes = CASES[case]
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"), dynamic=True)
    variants = [shapes,
                [tuple(d + 3 if d > 1 else d for d in s) for s in shapes],
                [tuple(max(d - 5, 1) for d in s) for s in shapes],
                [tuple(1 if i == 0 else d for i, d in enumerate(s)) for s in shapes]]
    if case == "nhwc_to_nchw":
        variants = [v for v in variants if v[0][3] == 96]   # w has 96 channels
    with torch.no_grad():
        for v in variants:
            args = sample(v)
            torch.testing.assert_close(c(*args), fn(*args), rtol=0, atol=0)
        # strided inputs: every other element of a wider tensor, a transposed copy
        args = [torch.randn(*s[:-1], 2 * s[-1])[..., ::2] for s in shapes]
        torch.testing.assert_close(c(*args), fn(*args), rtol=0, atol=0)
        args = [torch.randn(*reversed(s)).permute(*reversed(range(len(s)))) for s in shapes]
        torch.testing.assert_close(c(*args), fn(*args), rtol=0, atol=0)


def test_rows_shorter_than_a_tile_keep_the_row_loop():
    fn = lambda x: (x.permute(0, 2, 1) * 2).contiguous()   # noqa: E731
    srcs = [cpu.cpp_source(k) for _, k in kernels(fn, torch.randn(4, 8, 300))]
    assert not any("in tiles of" in s for s in srcs), srcs


def test_a_view_of_a_graph_input_expects_the_views_strides():
    y = torch.randn(2, 9, 20, 96)
    found = kernels(CASES["nhwc_to_nchw"][0], y, torch.randn(2, 96, 9, 20))
    (graph, k), = found
    views = [b for b in k.inputs if b.expected is not None]
    assert [b.expected for b in views] == [y.permute(0, 3, 1, 2).stride()], k.inputs
    assert expected_strides(graph, views[0].value) == (17280, 1, 1920, 96)
    # the dense version is printed for (and tests) the permuted strides, not row-major
    want = dict(zip(range(4), y.permute(0, 3, 1, 2).stride()))
    got = {how[2]: expected_values(k)[name] for name, how in k.bindings
           if how[0] == "stride" and how[1] == views[0].name}
    assert got == {d: s for d, s in want.items() if d in got} and len(got) == 4, got


def test_a_row_major_or_symbolic_view_expects_nothing():
    def f(x):
        return x.view(-1) * 2, x.unsqueeze(0) + 1
    for graph, k in kernels(f, torch.randn(6, 5)):
        assert all(b.expected is None for b in k.inputs)


def residual_cl(a, b):
    """Two NHWC images summed as NCHW (a residual add of channels-last values)."""
    return (a.permute(0, 3, 1, 2) + 0.5 * b.permute(0, 3, 1, 2)).contiguous()


@pytest.mark.parametrize("case", ["nhwc_to_nchw", "residual_cl"])
def test_transposed_operands_are_staged_through_register_transposes(case):
    # a tile's NHWC operand read along W at a stride of C was one gather per element
    # (2.5-3.5x Inductor's tiled transpositions); whole tiles now read it in 8 x 8 blocks
    if case == "residual_cl":
        fn, shapes = residual_cl, [(2, 9, 20, 32), (2, 9, 20, 32)]
    else:
        fn, *shapes = CASES[case]
    srcs = [cpu.cpp_source(k) for _, k in kernels(fn, *sample(shapes))]
    assert any("fs::tr8x8" in dense(s) for s in srcs if "// dense" in s), srcs


def test_staged_tiles_give_eager_numbers(threads):
    """Channels that are and are not a multiple of the tile's rows, rows shorter and
    longer than a tile and not a multiple of it, one image and three, and operands of
    other strides: every element exactly eager's."""
    for n, h, w, ch in [(2, 9, 20, 32), (1, 8, 8, 16), (3, 7, 9, 48), (2, 16, 20, 40),
                        (1, 4, 70, 64)]:
        torch._dynamo.reset()
        c = torch.compile(residual_cl, backend=fusionstitch.backend(target="cpu"))
        a, b = torch.randn(n, h, w, ch), torch.randn(n, h, w, ch)
        with torch.no_grad():
            torch.testing.assert_close(c(a, b), residual_cl(a, b), rtol=0, atol=0)
            a2 = torch.randn(n, h, w, 2 * ch)[..., ::2]
            torch.testing.assert_close(c(a2, b), residual_cl(a2, b), rtol=0, atol=0)


def test_a_leading_dim_brought_last_runs_in_tiles_along_its_digit():
    # [32, 32, 16, 16] -> dims (3, 1, 2, 0): the contiguous dim 3 of the input is xo's
    # leading digit; row by row each element was a new cache line (4x Inductor)
    fn = lambda x: (x.permute(3, 1, 2, 0) * 2 + 1).contiguous()   # noqa: E731
    srcs = [cpu.cpp_source(k) for _, k in kernels(fn, torch.randn(32, 32, 16, 16))]
    d = [dense(s) for s in srcs if "// dense" in s]
    assert any("along xo's digit 0" in s and "fs::tr8x8" in s for s in d), srcs


def test_tiles_along_a_digit_give_eager_numbers(threads):
    """Random permutations of tensors whose dims are and are not multiples of 8 (tiles
    whole and partial, digits of 8 to 40 values), rows of 8 to 70, strided inputs:
    every element exactly eager's."""
    import random
    rng = random.Random(7)
    for shape in [(24, 8, 4, 16), (16, 5, 3, 40), (9, 12, 7, 33), (3, 16, 2, 2, 8, 12),
                  (40, 6, 70), (8, 8, 8, 8)]:
        order = list(range(len(shape)))
        while order == sorted(order):
            rng.shuffle(order)
        fn = lambda x, o=tuple(order): (x.permute(*o) * 2 + 1).contiguous()  # noqa: E731
        torch._dynamo.reset()
        c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
        x = torch.randn(*shape)
        with torch.no_grad():
            torch.testing.assert_close(c(x), fn(x), rtol=0, atol=0)
            x2 = torch.randn(*shape[:-1], 2 * shape[-1])[..., ::2]
            torch.testing.assert_close(c(x2), fn(x2), rtol=0, atol=0)
        # the first and last dims swapped: tiles along xo's first digit, rows a
        # digit's stride apart
        swap = (len(shape) - 1, *range(1, len(shape) - 1), 0)
        fn = lambda x, o=swap: (x.permute(*o) * 2 + 1).contiguous()  # noqa: E731
        torch._dynamo.reset()
        c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
        with torch.no_grad():
            torch.testing.assert_close(c(x), fn(x), rtol=0, atol=0)


def test_empty_permutations_run():
    # a zero-size dim: no tile and no division by a zero size
    fn = lambda x: (x.permute(3, 1, 2, 0) * 2 + 1).contiguous()   # noqa: E731
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    for shape in [(32, 0, 16, 16), (0, 32, 16, 16)]:
        torch._dynamo.reset()
        x = torch.randn(*shape)
        assert c(x).shape == fn(x).shape


def two_orders(x, w, b):
    """An activation and its NHWC copy (the input of a channels-last convolution as
    conv_layout spells it): one kernel, two outputs in two orders."""
    y = torch.relu(x * w + b)
    return y, y.permute(0, 2, 3, 1).contiguous()


def test_transposed_stores_are_staged_through_register_transposes():
    # the NHWC copy's store, at a stride of C along the row: one scattered store per
    # element (2.2x Inductor's time); whole tiles now write it in 8 x 8 blocks
    args = (torch.randn(2, 32, 9, 20), torch.randn(32, 1, 1), torch.randn(32, 1, 1))
    srcs = [cpu.cpp_source(k) for _, k in kernels(two_orders, *args)]
    assert any("fs::tr8x8(st_" in dense(s) for s in srcs if "// dense" in s), srcs


def test_staged_stores_give_eager_numbers(threads):
    """Channels that are and are not a multiple of the tile's rows, partial tiles, one
    image and three, a strided input: both outputs exactly eager's."""
    for n, ch, h, w in [(2, 32, 9, 20), (1, 16, 8, 8), (3, 48, 7, 9), (2, 40, 16, 20),
                        (1, 64, 4, 70)]:
        torch._dynamo.reset()
        c = torch.compile(two_orders, backend=fusionstitch.backend(target="cpu"))
        wb = (torch.randn(ch, 1, 1), torch.randn(ch, 1, 1))
        for x in (torch.randn(n, ch, h, w), torch.randn(n, ch, h, 2 * w)[..., ::2]):
            with torch.no_grad():
                for got, want in zip(c(x, *wb), two_orders(x, *wb)):
                    torch.testing.assert_close(got, want, rtol=0, atol=0)
