"""A value computed twice compares equal to itself: `v == amin(v)` over a dim of 1.

Eager computes `v` once; a fused kernel may compute it again (a reduction's pass and its
epilogue, two kernels that each recompute an elementwise producer), so every way of
computing one value must give the same bits. The dynamic fuzzer found `log1p` computed
by two loops that GCC had vectorised differently (libmvec's AVX-512 and AVX2 variants
and the scalar libm, which differ within 4 ulp): the mask came out wrong in 52 of 80
cases, and a training step's gradient was NaN. Static and dynamic shapes, every
transcendental the cpu target calls a library for, float32 and float64; bitwise.
"""
import shutil

import pytest
import torch

import fusionstitch

no_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
no_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
# the cuda target's kernels (Triton: LLVM may contract a*b+c into an FMA in one kernel and
# not in another) are checked where a GPU is lent
TARGETS = [pytest.param("cpu", marks=no_gxx), pytest.param("cuda", marks=[pytest.mark.gpu, no_gpu])]

FUNCTIONS = {
    "log1p": lambda a: torch.log1p(a.abs()), "log": lambda a: torch.log(a.abs() + 1e-3),
    "log2": lambda a: torch.log2(a.abs() + 1e-3), "exp2": lambda a: torch.exp2(a * 4),
    "expm1": lambda a: torch.expm1(a), "sin": lambda a: torch.sin(a * 30),
    "cos": lambda a: torch.cos(a * 30), "tan": lambda a: torch.tan(a.clamp(-1.5, 1.5)),
    "tanh": lambda a: torch.tanh(a * 3), "erf": lambda a: torch.erf(a * 2),
    "exp": lambda a: torch.exp(a * 5), "pow": lambda a: torch.pow(a.abs() + 0.5, a * 3),
    "sigmoid": lambda a: torch.sigmoid(a * 5), "gelu": lambda a: torch.nn.functional.gelu(a),
}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_value_equals_its_amin_over_a_dim_of_one(name, dtype, dynamic, target):
    f = FUNCTIONS[name]

    def fn(a):
        v = f(a)
        m = torch.amin(v, dim=(2,), keepdim=False)
        return m.view(a.shape[0], a.shape[1], 1, a.shape[3]) == v, v

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=fusionstitch.backend(target=target), dynamic=dynamic)
    g = torch.Generator().manual_seed(0)
    shapes = [(1, n, 1, k) for n, k in ((4, 2), (3, 17), (5, 9), (2, 33), (7, 40))]
    for shape in shapes if dynamic else shapes[1:3]:
        a = torch.randn(shape, generator=g, dtype=dtype).to(target)
        mask, v = compiled(a)
        assert bool(mask.all()), (name, shape, int((~mask).sum()))
        torch.testing.assert_close(v, f(a))     # (the value itself: within libm's ulps)
