"""A kernel output stored into the memory of an input of another shape of its size (a
GEMM's [512, 2048] result read as [8, 64, 2048] by the activation after it:
runtime/inplace.py's `kernel_hazard(reshaped=True)`): the reads compared as row-major
offsets, the output a view of the input's memory of its own shape. Compared against
eager and against FUSIONSTITCH_INPLACE=0 (the same kernels: the same bits)."""
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.codegen import expr as E
from fusionstitch.runtime.inplace import INPLACE_MIN_BYTES, _linear

pytestmark = [pytest.mark.skipif(not shutil.which("g++"), reason="needs a C++ compiler"),
              pytest.mark.usefixtures("strict_fresh")]


def _run(fn, args, monkeypatch, inplace=True):
    monkeypatch.setenv("FUSIONSTITCH_INPLACE", "1" if inplace else "0")
    torch._dynamo.reset()
    comp = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    outs = []
    for _ in range(3):           # the first call decides; later ones run the generated code
        fusionstitch.reset_stats()
        with torch.no_grad():
            outs.append(comp(*args))
    return outs[-1], fusionstitch.stats()["inplace_writes"], outs


def _args():
    torch.manual_seed(0)
    return torch.randn(8, 64, 96), torch.randn(96, 256), torch.randn(256)


def ffn(x, w, b):
    h = (x.reshape(-1, 96) @ w + b).view(8, 64, 256)
    return torch.relu(h).view(512, 256) * 2


def transposed(x, w, b):
    h = (x.reshape(-1, 96) @ w + b).view(8, 64, 256)
    return (torch.relu(h).transpose(0, 1) * 2).contiguous()


@pytest.mark.parametrize("fn,writes", [(ffn, 1), (transposed, 0)], ids=["ffn", "transposed"])
def test_an_activation_writes_into_its_gemms_result_read_as_another_shape(fn, writes,
                                                                          monkeypatch):
    args = _args()
    assert 512 * 256 * 4 >= INPLACE_MIN_BYTES
    before = [a.clone() for a in args]
    got, n, outs = _run(fn, args, monkeypatch)
    off, none, _ = _run(fn, args, monkeypatch, inplace=False)
    want = fn(*args)
    assert n == writes and none == 0
    assert got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(got, off)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(args, before))
    torch.testing.assert_close(outs[0], want, rtol=1e-5, atol=1e-5)   # not overwritten


def test_linear_offsets_of_two_shapes_of_one_size():
    x = E.Var("x")
    a, b, c = E.Sym("a", 8), E.Sym("b", 64), E.Sym("c", 256)
    vals = {"a": 8, "b": 64, "c": 256}
    rows = E.Digit(x, (E.Const(512), c), 0)
    # [512, 256] read as [8, 64, 256]: a digit of a digit, row-major
    read = E.add(E.mul(E.Digit(rows, (a, b), 0), E.mul(b, c)),
                 E.mul(E.Digit(rows, (a, b), 1), c), E.Digit(x, (E.Const(512), c), 1))
    write = E.add(E.mul(rows, c), E.Digit(x, (E.Const(512), c), 1))
    assert _linear(read, vals) == _linear(write, vals) == x
    # transposed: 8 and 64 swapped strides, not the element written
    swapped = E.add(E.mul(E.Digit(rows, (a, b), 0), c), E.mul(E.Digit(rows, (a, b), 1),
                                                             E.mul(a, c)),
                    E.Digit(x, (E.Const(512), c), 1))
    assert _linear(swapped, vals) != _linear(write, vals)
    # a size not known: left as it is
    assert _linear(read, {}) == read
