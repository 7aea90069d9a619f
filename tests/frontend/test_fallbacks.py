"""Every way a graph, or part of one, ends up running through torch is counted in
`stats()["fallbacks"]` (once per group per call), logged per graph with its true cause,
and raised under FUSIONSTITCH_STRICT: =1 for errors (an internal error, kernels that
cannot be built), =all for every fallback (also an op outside the IR or without a kernel
lowering, an input the IR cannot express). `kernels_launched` counts only kernels that
ran. One test per path."""
import logging
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.targets.cpp import build as cpu_build
from fusionstitch.frontend.torch import FallbackRefused

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "0")
    # a fresh cache: a library built before would hide a broken compiler
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FUSIONSTITCH_CXX", raising=False)
    torch._dynamo.reset()
    cpu_build.clear_memory_cache()
    fusionstitch.reset_stats()
    yield
    torch._dynamo.reset()
    cpu_build.clear_memory_cache()


def _run(fn, *args, calls=2, target="cpu"):
    f = torch.compile(fn, backend=fusionstitch.backend(target=target), dynamic=False)
    for _ in range(calls):
        got = f(*args)
    want = fn(*args)
    for g, r in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, r)
    return fusionstitch.stats()


def _warnings(caplog, text):
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and text in r.getMessage()]


def _two_kernel_graph(x):
    return torch.softmax(x * 2, -1), (x.exp() + 1).sum(0)


# -- designed fallbacks: counted and logged; raised only under STRICT=all -----------------
def test_op_outside_the_ir(caplog):
    def fn(x):
        return torch.fft.rfft(x * 2).abs() + 1

    x = torch.randn(4, 16)
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        s = _run(fn, x, target="interpret")
    # two groups (the fft, and abs of its complex result), two calls
    assert s["fallbacks"] == 4
    [msg] = _warnings(caplog, "run through torch")
    assert "fft" in msg and "not an op of fusionstitch's IR" in msg
    assert "abs.default" in msg and "c64" in msg


def test_op_without_a_kernel_lowering(caplog):
    def fn(a, b):
        return torch.div(a * 2, b, rounding_mode="trunc") + 1

    a, b = torch.randint(-50, 50, (32,)), torch.randint(1, 9, (32,))
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        s = _run(fn, a, b, target="interpret")
    assert s["fallbacks"] == 2
    [msg] = _warnings(caplog, "run through torch")
    assert "div.Tensor_mode" in msg and "rounding_mode='trunc'" in msg


def test_complex_values_are_left_to_torch_with_their_reason(caplog):
    def fn(x):
        return x * 2 + 1

    x = torch.randn(8, dtype=torch.complex64)
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        s = _run(fn, x, target="interpret")
    assert s["fallbacks"] >= 2 and s["kernels_launched"] == 0
    assert any("c64" in m for m in _warnings(caplog, "run through torch"))


def test_input_the_ir_cannot_express(caplog):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("no float8 in this torch")

    def fn(x):
        return x.to(torch.float32) * 2

    x = torch.randn(4).to(torch.float8_e4m3fn)
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        s = _run(fn, x, calls=3)
    assert s["fallbacks"] == 3 and s["kernels_launched"] == 0    # the graph, every call
    [msg] = _warnings(caplog, "runs through torch unfused")
    assert "float8" in msg


@pytest.mark.parametrize("case", ["op", "input"])
def test_strict_all_refuses_every_fallback(case, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "all")
    if case == "op":
        fn, x = (lambda x: torch.fft.rfft(x).abs()), torch.randn(4, 16)
    else:
        if not hasattr(torch, "float8_e4m3fn"):
            pytest.skip("no float8 in this torch")
        fn, x = (lambda x: x.to(torch.float32) * 2), torch.randn(4).to(torch.float8_e4m3fn)
    with pytest.raises(Exception, match="STRICT=all") as info:
        torch.compile(fn, backend=fusionstitch.backend(target="interpret"))(x)
    assert isinstance(info.value, FallbackRefused) or "FallbackRefused" in str(info.value)


def test_strict_one_does_not_refuse_designed_fallbacks(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    s = _run(lambda x: torch.fft.rfft(x).abs() + 1, torch.randn(4, 16), target="interpret")
    assert s["fallbacks"] == 4


# -- errors: counted, logged per graph with the cause; raised under STRICT=1 ------------
def _fake_compiler(tmp_path, body: str) -> str:
    path = tmp_path / "fake-cxx"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


BROKEN = {
    # no compiler at all
    "missing": (lambda tmp: str(tmp / "no-such-compiler"), "no working C++ compiler"),
    # a compiler that answers --version but rejects every source
    "rejects": (lambda tmp: _fake_compiler(tmp, 'case "$*" in *--version*|*--help*) exec g++ '
                                                '"$@";; esac\necho "error: no" >&2; exit 1\n'),
                "rejected the generated source"),
}


@needs_gxx
@pytest.mark.parametrize("how", sorted(BROKEN))
def test_kernels_that_cannot_be_built(how, tmp_path, monkeypatch, caplog):
    make, cause = BROKEN[how]
    monkeypatch.setenv("FUSIONSTITCH_CXX", make(tmp_path))
    x = torch.randn(8, 32)
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        s = _run(_two_kernel_graph, x)
        torch._dynamo.reset()
        _run(lambda x: x.sin() * 3, x, calls=1)   # a second graph: warned again
    assert s["kernels_launched"] == 0 and s["kernels_compiled"] == 0
    assert s["fallbacks"] >= 2 and s["fallbacks"] % 2 == 0    # every kernel group, per call
    msgs = _warnings(caplog, "run through torch")
    assert len(msgs) == 2 and all(cause in m for m in msgs), msgs


@needs_gxx
def test_kernel_the_printer_cannot_print(monkeypatch, caplog):
    from fusionstitch.targets.cpp import printer as cpu

    def cannot(*a, **k):
        raise cpu.CannotPrint("cpu backend: unsupported thing")

    monkeypatch.setattr(cpu, "cpp_source", cannot)
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        s = _run(_two_kernel_graph, torch.randn(8, 32))
    assert s["kernels_launched"] == 0 and s["fallbacks"] >= 2
    [msg] = _warnings(caplog, "run through torch")
    assert "printer cannot print" in msg and "unsupported thing" in msg
    assert "compiler" not in msg.replace("printer", "")   # not "the compiler is unavailable"


@needs_gxx
@pytest.mark.parametrize("how", sorted(BROKEN))
def test_strict_raises_when_kernels_cannot_be_built(how, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    monkeypatch.setenv("FUSIONSTITCH_CXX", BROKEN[how][0](tmp_path))
    with pytest.raises(Exception, match="C\\+\\+ compile|not available"):
        torch.compile(_two_kernel_graph, backend=fusionstitch.backend(target="cpu"))(
            torch.randn(8, 32))


# -- one kernel that cannot be built costs only its own group ----------------------------
def _four_kernel_graph(x):
    a = torch.softmax(x * 2, -1)
    b = (x.exp() + 1).sum(0)
    c = torch.sigmoid(x) @ x.t()         # a GEMM between kernels
    return a, b, (c * 3).amax(-1), x.tanh().cumsum(0) * 2


def _spoiled(cpu, marker: str, how: str):
    """printer.cpp_source, except for kernels whose source calls `marker`: a source the
    compiler rejects (`rejects`), or CannotPrint (`cannot_print`)."""
    real = cpu.cpp_source

    def source(kernel, *a, **k):
        text = real(kernel, *a, **k)
        if marker in text:
            if how == "cannot_print":
                raise cpu.CannotPrint("cpu backend: unsupported thing")
            text += "\nthis is not C++;\n"
        return text
    return source


@needs_gxx
@pytest.mark.parametrize("how", ["rejects", "cannot_print"])
def test_one_kernel_that_cannot_be_built_costs_only_its_group(how, monkeypatch, caplog):
    """The compiler rejecting one kernel of a graph's library (or the printer refusing
    it): the library is built without it (build.load_parts: halves of the rejected
    library, recursively), that group alone runs through torch, counted each call and
    named with its cause; the others are kernels. A MobileViT's graph ran all its 103
    groups through torch for one kernel's compile error."""
    from fusionstitch.targets.cpp import printer as cpu
    x = torch.randn(8, 32)
    kernels = _run(_four_kernel_graph, x, calls=1)["kernels_launched"]
    assert kernels >= 2
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    monkeypatch.setattr(cpu, "cpp_source", _spoiled(cpu, "tanh", how))
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        s = _run(_four_kernel_graph, x, calls=2)
    assert s["fallbacks"] == 2, s                     # one group, two calls
    assert s["kernels_launched"] == 2 * (kernels - 1), s      # the others ran
    [msg] = _warnings(caplog, "run through torch")
    cause = "rejected the generated source" if how == "rejects" else "printer cannot print"
    assert "kernel group" in msg and cause in msg, msg
    if how == "rejects":      # the rejected source is kept, and named
        kept = msg.split("the source: ")[1].split(")")[0]
        assert kept.endswith(".failed.cpp") and "this is not C++" in open(kept).read()
    # FUSIONSTITCH_STRICT=1 raises it
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    with pytest.raises(cpu.KernelBuildError):
        torch.compile(_four_kernel_graph, backend=fusionstitch.backend(target="cpu"))(x)


def test_rejected_parts_are_found_within_a_budget(monkeypatch):
    """build.load_parts halves a rejected library until each rejected part stands
    alone: 2 bad parts of 16 cost a few compiles, not 16; past MAX_PART_BUILDS rejected
    compiles, what is left unsplit takes the error."""
    calls = []

    def fake(n, source, libs=()):
        calls.append(source)
        if "bad" in source:
            raise cpu_build.CompileFailed("rejected")
        return f"lib{len(calls)}"

    monkeypatch.setattr(cpu_build, "load_library", fake)
    parts = {f"k{i}": ("bad" if i in (3, 12) else "good") for i in range(16)}
    got = cpu_build.load_parts(parts, " ".join)
    assert {k for k, v in got.items() if isinstance(v, cpu_build.CompileFailed)} == {"k3", "k12"}
    assert all(isinstance(v, str) for k, v in got.items() if k not in ("k3", "k12"))
    assert len(calls) <= 2 * 2 * 4 + 1, len(calls)
    calls.clear()
    monkeypatch.setattr(cpu_build, "MAX_PART_BUILDS", 2)
    got = cpu_build.load_parts(parts, " ".join)
    assert set(got) == set(parts) and len(calls) <= 3, calls    # each rejected compile counts
    assert isinstance(got["k3"], cpu_build.CompileFailed)


def test_internal_error(monkeypatch, caplog):
    from fusionstitch import compile as driver

    def boom(*a, **k):
        raise RuntimeError("planner bug")

    monkeypatch.setattr(driver, "make_plan", boom)
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        s = _run(lambda x: x.sin() + 1, torch.randn(6), calls=3, target="interpret")
    assert s["fallbacks"] == 3 and s["kernels_launched"] == 0
    assert any("planner bug" in (r.exc_text or "") or "internal error" in r.getMessage()
               for r in caplog.records)
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="planner bug"):
        torch.compile(lambda x: x.cos() + 1, backend=fusionstitch.backend(
            target="interpret"))(torch.randn(6))


def test_no_fallback_counts_nothing():
    s = _run(_two_kernel_graph, torch.randn(8, 32), target="interpret")
    assert s["fallbacks"] == 0 and s["kernels_launched"] >= 2


def test_random_ops_are_not_fallbacks():
    """torch draws the random numbers (eager's RNG stream): by design, like a GEMM."""
    def fn(x):
        return torch.nn.functional.dropout(x * 2, 0.5, training=True) + 1

    x = torch.randn(64)
    f = torch.compile(fn, backend=fusionstitch.backend(target="interpret"), dynamic=False)
    torch.manual_seed(0)
    got = f(x)
    torch.manual_seed(0)
    torch.testing.assert_close(got, fn(x))
    assert fusionstitch.stats()["fallbacks"] == 0
