"""A chain's temporaries live in the calling thread's scratch (runtime/wrapper.py
`_temporaries`, targets/cpp/build.chain, PREAMBLE's `fs_chain`): a value one kernel of
a chain writes and later ones read, dead when the chain returns, is never allocated as a
tensor. The same bits as with tensors (FUSIONSTITCH_CHAIN_SCRATCH=0) and as the
interpreter; a wrapped `run` gets tensors; a value a view reads stays a tensor; threads
calling one program at once (the GIL released by ctypes' path) do not share scratch."""
import shutil
import threading

import pytest
import torch

from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse
from fusionstitch.runtime.program import Program
from fusionstitch.targets.cpp import build, pyentry

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="needs a C++ compiler")

CHAIN = "if tuple(map("

# two kernels chained (a row reduction, then a column one over its result: %x is read
# by the second kernel only), a view of %e run through torch (%e stays a tensor), and
# a last kernel after a library call
_GRAPH = """graph g(%a: f32[R,C], %b: f32[C], %i: i64[R,1]) {
  %e: f32[R,C] = exp.default(%a)
  %m: f32[R,1] = amax.default(%e, [1], True)
  %t: f32[1,R] = permute.default(%m, [1, 0])
  %n: f32[1,R] = sum.dim_IntList(%t, [0], True)
  %x: f32[R,C] = sub.Tensor(%e, %m)
  %y: f32[C] = sum.dim_IntList(%x, [0])
  %al: f32[R,C] = alias.default(%e)
  %g: f32[R,1] = gather.default(%x, 1, %i)
  %c: f32[C] = cumsum.default(%y, 0)
  %r: f32[C] = mul.Tensor(%c, %b)
  return (%r, %n, %g, %al)
}"""
SMALL, BIG = (4, 8), (96, 160)     # BIG: 60 KiB a value, a chain of ~100 us


def _program(monkeypatch, scratch: bool = True, pyentry_on: bool = True, shape=SMALL):
    monkeypatch.setenv("FUSIONSTITCH_CHAIN_SCRATCH", "1" if scratch else "0")
    monkeypatch.setenv("FUSIONSTITCH_PYENTRY", "1" if pyentry_on else "0")
    text = _GRAPH.replace("R", str(shape[0])).replace("C", str(shape[1]))
    prog = Program(make_plan(parse(text), "stitch", "cpu"), torch.device("cpu"), "cpu",
                   static=True)
    prog(_inputs(0, shape))
    prog(_inputs(0, shape))     # the per-call code is written after the first call
    return prog


def _inputs(seed=0, shape=SMALL):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g), torch.randn(shape[1], generator=g),
            torch.randint(0, shape[1], (shape[0], 1), generator=g)]


def _direct_branch(source: str) -> str:
    """The lines of the generated code outside the chain's one-by-one branch."""
    lines, out, skipping = source.splitlines(), [], False
    for line in lines:
        if line == "    else:":
            skipping = True
            continue
        if skipping and line.startswith("        "):
            continue
        skipping = False
        out.append(line)
    return "\n".join(out)


def _same(a, b):
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_temporaries_are_not_allocated_and_give_the_same_bits(monkeypatch):
    with_scratch, without = _program(monkeypatch), _program(monkeypatch, scratch=False)
    src, plain = with_scratch.generated_source, without.generated_source
    assert CHAIN in src and CHAIN in plain
    allocations = _direct_branch(src).count("= ES"), _direct_branch(plain).count("= ES")
    assert allocations[0] < allocations[1], src
    interpreted = _program(monkeypatch)
    interpreted.use_generated(False)
    for seed in range(5):
        args = _inputs(seed)
        _same(with_scratch(list(args)), without(list(args)))
        _same(with_scratch(list(args)), interpreted(list(args)))


def test_a_value_a_view_reads_stays_a_tensor(monkeypatch):
    """%e is read by `alias` (a view run through torch, returned): it is allocated in
    the chain's direct branch, whatever it feeds inside the chain."""
    prog = _program(monkeypatch)
    alias = next(line for line in prog.generated_source.splitlines() if "= F" in line
                 and "alias" not in line and "values[" in line)
    read = alias.split("(", 1)[1].split(")")[0]          # values[<slot of %e>]
    direct = _direct_branch(prog.generated_source)
    assert f"= {read} = ES" in direct, prog.generated_source
    out = prog(_inputs())
    torch.testing.assert_close(out[3], _inputs()[0].exp())


def test_a_wrapped_run_gets_tensors(monkeypatch):
    prog = _program(monkeypatch)
    want = prog(_inputs())
    seen = []
    for step in prog.kernel_steps.values():
        step.run = (lambda r: lambda b, y: (seen.append(
            all(isinstance(t, torch.Tensor) for t in b)), r(b, y))[1])(step.run)
    _same(prog(_inputs()), want)
    assert seen and all(seen)


@pytest.mark.parametrize("pyentry_on", [True, False], ids=["pyentry", "ctypes"])
def test_threads_running_one_program_do_not_share_scratch(monkeypatch, pyentry_on):
    """Through ctypes a chain runs with the GIL released: two threads' chains overlap.
    Each thread's scratch is its own, so every result is its inputs' own."""
    if pyentry_on and pyentry.entries() is None:
        pytest.skip("no CPython entry points here")
    prog = _program(monkeypatch, pyentry_on=pyentry_on, shape=BIG)
    assert CHAIN in prog.generated_source
    reference = _program(monkeypatch, scratch=False, shape=BIG)
    inputs = {s: _inputs(s, BIG) for s in range(8)}
    wants = {s: reference(list(inputs[s])) for s in range(8)}
    errors = []

    def work(k):
        try:
            for n in range(60):
                s = (k + n) % 8
                _same(prog(list(inputs[s])), wants[s])
        except Exception as e:   # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_the_table_places_buffers_in_scratch(monkeypatch):
    """build.chain: each scratch buffer's users get one offset, a multiple of 64; a
    chain asking for more than CHAIN_SCRATCH is refused."""
    offsets, total = build.scratch_layout([4, 64, 65, 0])
    assert offsets == [0, 64, 128, 256] and total == 320
    monkeypatch.setattr(build, "CHAIN_SCRATCH", 100)
    prog = _program(monkeypatch)
    assert _direct_branch(prog.generated_source).count("= ES") == \
        _direct_branch(_program(monkeypatch, scratch=False).generated_source).count("= ES")
