"""Consecutive small static kernels of a cpu program launch in one native call
(runtime/wrapper.py's chains, targets/cpp/build.chain): the same results, counters and
errors as launching them one by one; a wrapped `run` is still called; big kernels and
ops that read data end a chain."""
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse
from fusionstitch.runtime import wrapper
from fusionstitch.runtime.program import Program

# the guard of a chain's launch in the generated code (one per chain)
CHAIN = "if tuple(map("

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="needs a C++ compiler")

# three kernels (a reduction between elementwise ops keeps them apart), views between
# them (a permute, an alias run through torch), a library call (cumsum) that ends the
# chain, and a last kernel after it
_GRAPH = """graph g(%a: f32[4,8], %b: f32[8], %i: i64[4,1]) {
  %e: f32[4,8] = exp.default(%a)
  %m: f32[4,1] = amax.default(%e, [1], True)
  %t: f32[1,4] = permute.default(%m, [1, 0])
  %n: f32[1,4] = sum.dim_IntList(%t, [0], True)
  %x: f32[4,8] = sub.Tensor(%e, %m)
  %y: f32[8] = sum.dim_IntList(%x, [0])
  %al: f32[4,8] = alias.default(%x)
  %g: f32[4,1] = gather.default(%x, 1, %i)
  %c: f32[8] = cumsum.default(%y, 0)
  %r: f32[8] = mul.Tensor(%c, %b)
  return (%r, %n, %g, %al)
}"""


def _program(monkeypatch, chain: bool):
    monkeypatch.setenv("FUSIONSTITCH_CHAIN", "1" if chain else "0")
    return Program(make_plan(parse(_GRAPH), "stitch", "cpu"), torch.device("cpu"), "cpu",
                   static=True)


def _inputs(index=(0, 7, 3, 1)):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 8, generator=g), torch.randn(8, generator=g),
            torch.tensor(index).reshape(4, 1)]


def _run(prog, args):
    fusionstitch.reset_stats()
    out = prog(list(args))
    s = fusionstitch.stats()
    return out, (s["kernels_launched"], s["library_calls"])


def test_a_chain_gives_what_single_launches_give(monkeypatch):
    args = _inputs()
    plain = _program(monkeypatch, False)
    want = [_run(plain, args) for _ in range(3)]
    chained = _program(monkeypatch, True)
    got = [_run(chained, args) for _ in range(3)]
    assert CHAIN not in plain.generated_source
    assert chained.generated_source.count(CHAIN) == 1, chained.generated_source
    for (o1, c1), (o2, c2) in zip(want, got):
        assert c1 == c2
        for x, y in zip(o1, o2):
            torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_an_index_error_inside_a_chain_raises_after_it(monkeypatch):
    prog = _program(monkeypatch, True)
    prog(_inputs())
    prog(_inputs())
    assert CHAIN in prog.generated_source
    with pytest.raises(IndexError, match=r"gather\.default: an index along dim 1"):
        prog(_inputs((0, 8, 3, 1)))
    out = prog(_inputs())       # and the program goes on as before
    torch.testing.assert_close(out[2], torch.gather(_inputs()[0].exp() -
                                                    _inputs()[0].exp().amax(1, True), 1,
                                                    _inputs()[2]))


def test_a_wrapped_run_inside_a_chain_is_called(monkeypatch):
    prog = _program(monkeypatch, True)
    args = _inputs()
    want = prog(list(args))
    prog(list(args))
    seen = []
    for step in prog.kernel_steps.values():
        run = step.run
        step.run = (lambda r: lambda b, y: (seen.append(len(b)), r(b, y)))(run)
    got = prog(list(args))
    assert len(seen) == len(prog.kernel_steps)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_big_kernels_launch_alone(monkeypatch):
    monkeypatch.setattr(wrapper, "CHAIN_KERNEL_BYTES", 16)
    prog = _program(monkeypatch, True)
    prog(_inputs())
    prog(_inputs())
    assert CHAIN not in prog.generated_source


def test_a_view_run_through_torch_stays_inside_a_chain(monkeypatch):
    """`alias` (returned by the graph, so run through torch) is a view: it may be made
    before the chain's kernels run, and does not end the chain (an op reading data would)."""
    prog = _program(monkeypatch, True)
    prog(_inputs())
    out = prog(_inputs())
    src = prog.generated_source
    alias = next(line for line in src.splitlines() if "values[9] = F" in line)
    assert src.index(alias) < src.index(CHAIN), src
    torch.testing.assert_close(out[3], _inputs()[0].exp() - _inputs()[0].exp().amax(1, True))
