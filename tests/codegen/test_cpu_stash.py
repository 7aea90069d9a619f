"""Row buffers of the cpu target's column order kept in an output (targets/cpp/columns.py:
ColumnOrder.output_stash): when a block's row buffers do not fit COLUMN_ROWBUF_BYTES, a
value that costs an exp to compute again is stored where a later loop stores the output
at the same (x, r), read back there, and overwritten. The kernel text with and without
it, and the kernels against eager."""
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.targets.cpp import columns as cpu_columns

from test_cpu_orders import kernel_sources

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# rows long enough that a block's buffer of 64 columns exceeds COLUMN_ROWBUF_BYTES
ROWS = cpu_columns.COLUMN_ROWBUF_BYTES // (64 * 4) * 2


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()


def dense_sources(fn, *args) -> list[str]:
    """The dense version of each kernel's C++ (test_cpu_orders.kernel_sources)."""
    return [src[src.index("// dense"):].split("} else {")[0]
            for src in kernel_sources(fn, *args)[1]]


def amax_d0(x, w):
    y = torch.exp(-x * x) * w
    r = y.amax(0, keepdim=True)
    return (y - r) * 2.0, r


def test_a_column_amax_keeps_its_exp_in_the_output():
    (src,) = dense_sources(amax_d0, torch.randn(ROWS, 2, 8), torch.randn(8))
    assert "columns:" in src and "__builtin_malloc" not in src, src
    loop0, loop1 = src.split("// loop 1 over r")
    # loop 0 computes the exp once and stores it where loop 1 stores the output
    assert loop0.count("fs::exp_f32(") == 1 and "fs::exp_f32(" not in loop1, src
    stash = [line.split(" = ")[0].strip() for line in loop0.splitlines() if "out0[" in line]
    assert len(stash) == 1 and f"= {stash[0]};" in loop1 and f"if (v" in loop1, src


def test_no_stash_below_the_limit_nor_for_cheap_values_nor_into_another_dtype():
    # rows that fit: a row buffer per thread
    (src,) = dense_sources(amax_d0, torch.randn(64, 2, 8), torch.randn(8))
    assert "__builtin_malloc" in src and "fs::exp_f32(" in src
    # cheap to compute again (no exp): computed again
    (src,) = dense_sources(lambda x, w: (x * w + 1.0) - (x * w + 1.0).amax(0, keepdim=True),
                           torch.randn(ROWS, 2, 8), torch.randn(8))
    assert "__builtin_malloc" not in src and src.split("// loop 1 over r")[0].count("out0[") == 0
    # a bf16 output cannot hold the float exp exactly: the exp is computed again

    def to_bf16(x, w):
        d, r = amax_d0(x, w)
        return d.to(torch.bfloat16), r
    (src,) = dense_sources(to_bf16, torch.randn(ROWS, 2, 8), torch.randn(8))
    loop0, loop1 = src.split("// loop 1 over r")
    assert "out0[" not in loop0 and "fs::exp_f32(" in loop1, src


def var_d0(x, w):
    y = torch.exp(-x * x) * w
    v = y.var(0, keepdim=True)
    return (y - v) * 2.0, v


def softmax_d0(x, w):
    return torch.softmax(x * w, 0)


def bounds(fn, x, w, n: int, eps: float):
    """Bounds on the distance of each output to its float64 value: exp within 4 ulp
    (libmvec, the preamble's exp_f32), a rounding per op, a sum of n terms within n
    ulps of the sum of their magnitudes (the variance: of its squared deviations and
    the error of the mean they subtract, doubled)."""
    y = (torch.exp(-x * x) * w).abs()
    if fn is amax_d0:
        r = y.amax(0, keepdim=True)
        return [32 * eps * (y + r), 16 * eps * r]
    if fn is var_d0:
        m = y.mean(0, keepdim=True)
        v = 4 * (n + 16) * eps * ((y + m) ** 2).sum(0, keepdim=True) / (n - 1)
        return [2 * (16 * eps * y + v) + 4 * eps * (y + v), v]
    e = torch.softmax(x * w, 0)
    return [2 * (n + 32) * eps * e]


@pytest.mark.parametrize("fn", [amax_d0, var_d0, softmax_d0], ids=["amax", "var", "softmax"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stashed_kernels_match_eager(fn, dtype):
    """Over rows long enough to stash (amax: read back once; var: in two later loops;
    softmax: the exp of the second loop in the third), in blocks of whole and partial
    columns, against float64 within the bounds above."""
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"), dynamic=False)
    g = torch.Generator().manual_seed(0)
    for shape in ((ROWS, 2, 8), (ROWS + 3, 5, 20)):
        x = torch.randn(*shape, generator=g, dtype=dtype)
        w = torch.randn(shape[-1], generator=g, dtype=dtype)
        got, want = c(x, w), fn(x.double(), w.double())
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        eps = 2.0 ** -24 if dtype == torch.float32 else 2.0 ** -53
        for a, b, bound in zip(got, want, bounds(fn, x.double(), w.double(), shape[0], eps)):
            assert a.dtype == dtype and ((a.double() - b).abs() <= bound).all(), \
                (fn.__name__, shape, (a.double() - b).abs().max())
