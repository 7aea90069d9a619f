"""Integer division by zero behaves as eager: on the cpu target the compiled graph raises
eager's RuntimeError("ZeroDivisionError") (the kernel records the zero divisor and the
runner raises after the launch, instead of a SIGFPE or a silent 0); the Triton targets
(cuda, and interpret, which runs the cuda target's kernels on CPU tensors) give 0 there,
as eager CUDA's floor_divide does, and never divide by zero in the generated code."""
import shutil

import pytest
import torch

import fusionstitch

OPS = {
    "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "fmod": torch.fmod,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "scalar": lambda a, b: (a + b) // 0,
    "fused": lambda a, b: ((a * 3) // (b - 1) + 1).sum(),
}
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    fusionstitch.reset_stats()


def _inputs(dtype, zero: bool):
    a = torch.tensor([7, -7, 5, 0, 100, -3, 2, 9], dtype=torch.int64)
    b = torch.tensor([2, 3, -2, 5, 7, 1, 4, 3], dtype=torch.int64)
    if dtype == torch.uint8:
        a, b = a.abs(), b.abs()
    if zero:
        b[3] = 0
    return a.to(dtype), b.to(dtype)


def _eager_error(fn, a, b):
    try:
        fn(a, b)
    except RuntimeError as e:
        return str(e)
    return None


@needs_gxx
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize("name", sorted(OPS))
def test_cpu_target_raises_as_eager(name, dtype):
    fn = OPS[name]
    f = torch.compile(fn, backend=fusionstitch.backend(target="cpu"), dynamic=False)
    a, b = _inputs(dtype, zero=False)
    if name == "fused":
        b = b + 1   # no zero divisor after the subtraction
    if name != "scalar":
        torch.testing.assert_close(f(a, b), fn(a, b))
    za, zb = _inputs(dtype, zero=True)
    if name == "fused":
        zb = zb.clone()
        zb[3] = 1   # b - 1 == 0 inside the kernel: a zero made in the kernel itself
    want = _eager_error(fn, za, zb)
    assert want == "ZeroDivisionError"
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        f(za, zb)
    if name != "scalar":   # the same compiled graph still works afterwards
        torch.testing.assert_close(f(a, b), fn(a, b))


@needs_gxx
def test_kernel_flags_zero_divisor_per_call():
    """The error cell is per call: a launch without a zero divisor after one with it
    does not raise, and concurrent calls from threads see only their own."""
    from concurrent.futures import ThreadPoolExecutor
    f = torch.compile(lambda a, b: a // b + a % b, backend=fusionstitch.backend(target="cpu"),
                      dynamic=False)
    a = torch.randint(-1000, 1000, (1 << 16,))
    good = torch.randint(1, 50, (1 << 16,))
    bad = good.clone()
    bad[12345] = 0
    f(a, good)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(f, a, bad if i % 2 else good) for i in range(16)]
        for i, fut in enumerate(futures):
            if i % 2:
                with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                    fut.result()
            else:
                torch.testing.assert_close(fut.result(), a // good + a % good)


def test_only_kernels_that_divide_integers_take_the_error_argument():
    from fusionstitch.targets.cpp import printer as cpu
    from fusionstitch.codegen.lower import lower_group
    from fusionstitch.ir.text import parse
    g = parse("""graph g(%a: i64[8], %b: i64[8], %x: f32[8]) {
  %q: i64[8] = remainder.Tensor(%a, %b)
  %y: f32[8] = remainder.Tensor(%x, %x)
  return (%q, %y)
}""")
    ints, floats = lower_group(g, ["q"], "ints"), lower_group(g, ["y"], "floats")
    assert "int64_t* __restrict__ fs_error) {" in cpu.cpp_source(ints)
    assert "fs_error" not in cpu.cpp_source(floats)


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod", "div_floor"])
def test_interpret_target_gives_zero_for_a_zero_divisor(name):
    """The Triton targets: 0 where the divisor is 0 (eager CUDA's floor_divide), eager's
    result everywhere else; the generated code divides by 1 there instead of by 0."""
    fn = OPS[name]
    f = torch.compile(fn, backend=fusionstitch.backend(target="interpret"), dynamic=False)
    a, b = _inputs(torch.int64, zero=True)
    got = f(a, b)
    nz = b != 0
    assert got[~nz].eq(0).all()
    torch.testing.assert_close(got[nz], fn(a[nz], b[nz]))
