"""The cpu target's CPython entry points (targets/cpp/pyentry.py) and the launches that
use them: the same numbers as the ctypes path, errors raised (never a crash) for
arguments that are not tensors or ints, the error cell's codes raised as before, and
kernels statically too small for threads printed without any OpenMP region."""
import shutil

import pytest
import torch

from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse
from fusionstitch.runtime.program import Program
from fusionstitch.targets.cpp import build, pyentry
from fusionstitch.targets.cpp.printer import cpp_source, serial_pragma

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="needs a C++ compiler")

_GRAPH = """graph g(%a: f32[4,8], %b: f32[8], %i: i64[4,1]) {
  %e: f32[4,8] = exp.default(%a)
  %m: f32[4,8] = mul.Tensor(%e, %b)
  %s: f32[4] = sum.dim_IntList(%m, [1])
  %g: f32[4,1] = gather.default(%m, 1, %i)
  return (%s, %g)
}"""


def _program(text: str) -> Program:
    """A static cpu program of the graph `text` (stitch plan)."""
    return Program(make_plan(parse(text), "stitch", "cpu"), torch.device("cpu"), "cpu",
                   static=True)


def _negation(shape: str) -> Program:
    return _program(f"""graph g(%a: f32[{shape}]) {{
  %e: f32[{shape}] = neg.default(%a)
  return (%e)
}}""")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    pyentry.reset()
    yield monkeypatch
    pyentry.reset()


def _run(setting: str, monkeypatch, args):
    monkeypatch.setenv("FUSIONSTITCH_PYENTRY", setting)
    pyentry.reset()
    prog = _program(_GRAPH)
    out = [prog(list(args)) for _ in range(3)]      # the interpreter, then generated code
    return prog, out


def test_entry_points_build_and_give_what_ctypes_gives(fresh):
    assert pyentry.entries() is not None, "Python.h and g++ are here: the entries build"
    args = (torch.randn(4, 8), torch.randn(8), torch.tensor([[0], [7], [3], [5]]))
    prog, direct = _run("1", fresh, args)
    assert "LE" in prog.generated_source or "CE" in prog.generated_source
    plain_prog, plain = _run("0", fresh, args)
    assert "LE" not in plain_prog.generated_source and "CE" not in plain_prog.generated_source
    for a, b in zip(direct, plain):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


@pytest.mark.parametrize("setting", ["1", "0"])
def test_an_index_out_of_range_raises_on_both_paths(fresh, setting):
    args = (torch.randn(4, 8), torch.randn(8), torch.tensor([[0], [8], [3], [5]]))
    with pytest.raises(IndexError, match="gather.default"):
        _run(setting, fresh, args)


def test_launch_refuses_what_is_not_a_tensor_or_an_int(fresh):
    launch, chain = pyentry.entries()
    with pytest.raises(TypeError, match="float"):
        launch(0, 0, torch.zeros(2), 1.5)
    with pytest.raises(TypeError, match="list"):
        launch(0, 0, [torch.zeros(2)])
    with pytest.raises(TypeError):
        launch(0)
    with pytest.raises(TypeError, match="int"):
        chain("x", 0, torch.zeros(2))


def test_launch_writes_through_a_kernel_of_a_library(fresh):
    """A kernel called through `launch` directly (what generated code does)."""
    prog = _negation("3,5")
    a = torch.randn(3, 5)
    [out] = prog([a])
    [step] = prog.kernel_steps.values()
    entry, head, error = step.run.direct
    mine = torch.empty(3, 5)
    assert entry(*head, a, mine, *step.fixed_syms()) == 0 and error is None
    assert torch.equal(mine, -a) and torch.equal(out, -a)


def _kernel_source(shape: str) -> str:
    prog = _program(f"""graph g(%a: f32[{shape}]) {{
  %e: f32[{shape}] = exp.default(%a)
  %s: f32[{shape.split(',')[0]}] = sum.dim_IntList(%e, [1])
  return (%e, %s)
}}""")
    return "\n".join(cpp_source(s.kernel) for s in prog.kernel_steps.values())


def test_statically_small_components_start_no_thread_team():
    """A region whose `if` is false still costs 0.3 us to enter: sizes known to be below
    the grain print none; large ones keep theirs."""
    small = _kernel_source("4,8")
    assert "omp parallel" not in small and "omp for" not in small, small
    large = _kernel_source("512,1024")
    assert "#pragma omp parallel" in large


def test_serial_pragma_keeps_simd_and_reductions_only():
    assert serial_pragma("#pragma omp parallel for simd reduction(+:a) reduction(max:b) "
                         "schedule(static) if(parallel: rnumel >= 32768)") == \
        "#pragma omp simd reduction(+:a) reduction(max:b)"
    assert serial_pragma("#pragma omp parallel for schedule(static) if(parallel: x)") is None
    assert serial_pragma("#pragma omp parallel if(parallel: x)") is None
    assert serial_pragma("#pragma omp for schedule(static)") is None


def test_a_library_loads_once_per_loader(fresh):
    src = 'extern "C" int fs_probe(void) { return 7; }\n'
    import ctypes
    a = build.load_library(0, src)
    b = build.load_library(0, src)
    c = build.load_library(0, src, loader=ctypes.PyDLL)
    assert a is b and c is not a and c.fs_probe() == 7


def test_without_torchs_data_pointer_function_the_method_serves(fresh):
    """A torch without `_torchinductor_pyobject_tensor_data_ptr`: the entries call each
    tensor's data_ptr() (slower, the same numbers); a view's pointer is its own."""
    fresh.setattr(pyentry, "_torch_data_ptr", lambda: None)
    pyentry.reset()
    launch, _ = pyentry.entries()
    prog = _negation("3,5")
    base = torch.randn(4, 5)
    a = base[1:]                    # a view at an offset: its pointer is past the base's
    for _ in range(3):
        [out] = prog([a])
        assert torch.equal(out, -a)
    [step] = prog.kernel_steps.values()
    assert step.run.direct[0] is launch


def test_a_large_kernel_releases_the_gil_and_computes_the_same(fresh):
    """Kernels of 32768 elements or more release the GIL while they run (as ctypes did)."""
    prog = _negation("256,256")
    a = torch.randn(256, 256)
    for _ in range(3):
        [out] = prog([a])
        assert torch.equal(out, -a)
    [step] = prog.kernel_steps.values()
    assert step.run.direct[1][1] & pyentry.FLAG_RELEASE


def test_warm_builds_the_entries_in_a_thread(fresh):
    """`warm()` starts the first build beside the kernels' compile; `entries()` then
    waits for it and returns the same pair."""
    pyentry.warm()
    got = pyentry.entries()
    assert got is not None and pyentry.entries() is got
    pyentry.warm()                  # built: nothing more to do
    fresh.setenv("FUSIONSTITCH_PYENTRY", "0")
    pyentry.reset()
    pyentry.warm()
    assert pyentry.entries() is None
