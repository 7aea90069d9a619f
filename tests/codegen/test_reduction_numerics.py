"""Numerics of sums and normalisation statistics, forward and backward, on the cpu and
interpret targets: the variance's shifted two-pass scheme (reductions._variance_passes),
the cpu target's blocked float/double sums (cpu_reduce.SUM_BLOCK) and Triton's lane-wise
sums with their tree and split combines.

Two kinds of checks:
- exact: layer, batch and group norm over constant rows (a padding token's embedding, a
  channel saturated by ReLU6) give eager's exact zeros, and var_mean gives exactly 0 and
  the row's value;
- against a float64 run: a compiled result is no further from it than FACTOR times eager's
  own result is, norm-wise, plus SLACK_ULPS float32 units of roundoff of the reference.

FUSIONSTITCH_NUMERICS_SIZES (comma-separated element counts, default 100000) sizes the long
sums on the cpu target; the interpret target always takes the smallest.
"""
from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.nn.functional as F

import fusionstitch

TARGETS = ("cpu", "interpret")
# The criterion: no further from float64 than 3x eager's own distance.
FACTOR = 3.0
# Rounding the exact result to float32 costs up to one unit roundoff u = 2**-24 of it, and
# eager may land closer than that by luck; our float partial sums add at most 32 terms a
# SIMD lane with AVX2 (cpu_reduce.SUM_BLOCK) before adding up in double, a few more u. So
# a compiled result may be SLACK_ULPS * u * |reference| further away than FACTOR allows.
SLACK_ULPS = 8
U = 2.0 ** -24
SIZES = sorted(int(float(s)) for s in
               os.environ.get("FUSIONSTITCH_NUMERICS_SIZES", "100000").split(","))


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()


def compiled(fn, target):
    return torch.compile(fn, backend=fusionstitch.backend(target=target))


def _pairs(got, eager, ref):
    if isinstance(ref, torch.Tensor):
        return [(got, eager, ref)]
    return [p for g, e, r in zip(got, eager, ref) for p in _pairs(g, e, r)]


def assert_near_float64(got, eager, ref, what: str, scale=None) -> None:
    """Each tensor of `got` is no further from `ref` (float64) than FACTOR times `eager`'s
    distance, plus SLACK_ULPS of float32 roundoff of `ref` or, where larger, of `scale`
    (the same computation on |inputs|: a sum's rounding scales with the sum of its terms'
    magnitudes, not with the sum), norm-wise."""
    scales = [s for _, _, s in _pairs(got, eager, scale)] if scale is not None else None
    for i, (g, e, r) in enumerate(_pairs(got, eager, ref)):
        r = r.double()
        dg = (g.double() - r).norm().item()
        de = (e.double() - r).norm().item()
        size = max(r.norm().item(), scales[i].double().norm().item() if scales else 0.0)
        bound = FACTOR * de + SLACK_ULPS * U * size
        assert dg <= bound, (f"{what} [{i}]: {dg:.3e} from float64 where eager is {de:.3e} "
                             f"(bound {bound:.3e}, scale {size:.3e})")


def _rows_of_constants(n: int) -> torch.Tensor:
    """Rows each of one value: values that round differently when summed (12345.678 is
    the issue's), negative, tiny, huge, zero."""
    values = torch.tensor([12345.678, -3.3e4, 1e-3, 7.1, 0.0, 2.5e5, -1e-30, 1.0 / 3])
    return values[:, None].expand(-1, n).contiguous()


# -- exact: constant rows ------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layout", ["rows", "columns", "channels"])
@pytest.mark.parametrize("correction", [0, 1])
def test_var_mean_of_constant_rows_is_exact(target, layout, correction):
    x = _rows_of_constants(768)
    if layout == "rows":
        dims, want = -1, x[:, 0]
    elif layout == "columns":           # the cpu target's column order: x along memory
        x, dims, want = x.t().contiguous(), 0, x[:, 0]
    else:                               # batch-norm statistics of NCHW: over N, H, W
        x = x.view(8, 3, 16, 16).transpose(0, 1).contiguous()
        dims, want = (0, 2, 3), x[0, :, 0, 0]
    var, mean = compiled(lambda t: torch.var_mean(t, dims, correction=correction),
                         target)(x)
    assert torch.equal(var, torch.zeros_like(var)), var
    assert torch.equal(mean, want), mean - want
    if layout == "rows":          # var and std alone (var.correction)
        torch._dynamo.reset()
        var, std = compiled(lambda t: (torch.var(t, dims, correction=correction),
                                       torch.std(t, dims, correction=correction)), target)(x)
        assert not var.any() and not std.any()


@pytest.mark.parametrize("target", TARGETS)
def test_var_mean_of_rows_with_inf_nan_or_nothing(target):
    """A first element of +-inf must not turn the mean into NaN (the shift replaces it by
    0): the mean is torch.mean's (inf where the row has one inf), the variance eager's."""
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[inf, 1, 2, 3], [1, inf, 2, 3], [-inf, inf, 1, 2], [nan, 1, 2, 3],
                      [1, 2, nan, 3], [-inf, 1, 2, 3], [5, 5, 5, 5], [0.5, 1, 2, 3]])
    var, mean = compiled(lambda t: torch.var_mean(t, -1), target)(x)
    torch.testing.assert_close(mean, x.mean(-1), equal_nan=True)
    torch.testing.assert_close(var, torch.var_mean(x, -1)[0], equal_nan=True)
    torch._dynamo.reset()
    empty = torch.zeros(3, 0)
    var, mean = compiled(lambda t: torch.var_mean(t, -1, correction=0), target)(empty)
    assert var.isnan().all() and mean.isnan().all()


@pytest.mark.parametrize("target", TARGETS)
def test_layer_norm_of_constant_rows_is_exact(target):
    """The issue's repro: LayerNorm(768) over rows of 12345.678 gave up to 0.84 and an
    input gradient of 121 where eager and float64 give exactly 0. Output and gradients are
    float64's exactly (eager's output and input gradient are too)."""
    gen = torch.Generator().manual_seed(0)
    ln = torch.nn.LayerNorm(768)
    with torch.no_grad():
        ln.bias.copy_(torch.randn(768, generator=gen))
    x = _rows_of_constants(768).requires_grad_()
    got = compiled(ln, target)(x)
    got.sum().backward()
    want = ln(x.detach())
    assert torch.equal(got, want)
    assert torch.equal(got, ln.bias.detach().expand_as(got))     # float64's, rounded
    assert not x.grad.any()
    assert not ln.weight.grad.any() and torch.equal(ln.bias.grad, torch.full((768,), 8.0))


@pytest.mark.parametrize("target", TARGETS)
def test_batch_and_group_norm_of_constant_channels_are_exact(target):
    """Channels (batch norm) and groups (group norm) of one value each: a ReLU6-saturated
    channel, a constant image. The output is exactly the bias, float64's answer (eager's
    batch norm misses it by 0.1 on a channel of 12345.678, its group norm by 0.2 on groups
    of 7.1), and the running variance is exactly eager's."""
    gen = torch.Generator().manual_seed(0)
    values = torch.tensor([6.0, 0.0, 12345.678, -0.1, 7.1, -3.3e4])
    x = values[None, :, None, None].expand(3, 6, 5, 7).contiguous()
    bn = torch.nn.BatchNorm2d(6)
    with torch.no_grad():
        bn.bias.copy_(torch.randn(6, generator=gen))
    bn_c = copy.deepcopy(bn)
    got = compiled(bn_c, target)(x)
    bn(x)
    assert torch.equal(got, bn.bias.detach()[None, :, None, None].expand_as(got))
    torch.testing.assert_close(bn_c.running_mean, bn.running_mean)
    assert torch.equal(bn_c.running_var, bn.running_var)
    # group norm: groups of two channels of one value each
    x = values.repeat_interleave(2)[None, :, None, None].expand(3, 12, 5, 7).contiguous()
    w, b = torch.randn(12, generator=gen), torch.randn(12, generator=gen)

    def group_norm(t):           # native_group_norm's decomposition, as torch's is
        n, c = t.shape[:2]
        rows = t.reshape(n, 6, -1)
        var, mean = torch.var_mean(rows, -1, correction=0, keepdim=True)
        y = ((rows - mean) * torch.rsqrt(var + 1e-5)).reshape(t.shape)
        return y * w[:, None, None] + b[:, None, None]
    exact = b[None, :, None, None].expand_as(x)
    torch._dynamo.reset()
    assert torch.equal(compiled(group_norm, target)(x), exact)
    # torch's group norm: exact where our kernels compute it, eager's where torch does
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    got = compiled(lambda t: F.group_norm(t, 6, w, b), target)(x)
    lowered = fusionstitch.stats()["library_calls"] == 0
    assert torch.equal(got, exact if lowered else F.group_norm(x, 6, w, b))


# -- against float64 -----------------------------------------------------------------------
def _check(fn, args, target, what):
    """fn's results, compiled and eager, against fn in float64."""
    got = compiled(fn, target)(*args)
    assert_near_float64(got, fn(*args), fn(*(a.double() for a in args)), what,
                        fn(*(a.double().abs() for a in args)))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mean,std", [(1e4, 1e-2), (1e3, 1.0), (0.0, 1.0)])
def test_statistics_of_rows_with_a_large_mean(target, mean, std):
    """|mean| >> std: sum(x) / n rounds by ulp(mean), and a variance around a rounded mean
    gains its square (1e4 and 1e-2: 2e-3 relative before the shift, eager 3e-8)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, 4096, generator=gen) * std + mean
    _check(lambda t: torch.var_mean(t, -1, correction=1), (x,), target, "var_mean rows")
    torch._dynamo.reset()
    _check(lambda t: torch.var_mean(t, 0, correction=0), (x.t().contiguous(),), target,
           "var_mean columns")
    torch._dynamo.reset()
    img = x.view(8, 16, 16, 16).transpose(0, 1).contiguous()
    _check(lambda t: torch.var_mean(t, (0, 2, 3), correction=0), (img,), target,
           "var_mean channels")


@pytest.mark.parametrize("layout", ["rows", "rows of 16", "rows of 12", "rows of 4",
                                    "columns", "columns of 16"])
def test_variance_of_a_large_mean_and_a_small_spread_on_every_cpu_order(layout):
    """Mean 1e4, std 1e-2 (|mean| / std = 1e6) on every loop order of the cpu target:
    the row order (rows of 4096), blocks of rows with SIMD along r (16, 12: 8 + 4 lanes),
    r unrolled inside the lanes (4), the column order with its float partial blocks (4096
    and 16 rows). The one-pass formula (sum(x^2) - sum(x)^2 / n) / (n - 1) in float32
    loses every digit of such a variance (checked on the data first: the test can tell);
    the shifted two-pass variance stays within the float64 bound, as does the mean."""
    gen = torch.Generator().manual_seed(3)
    shape, dim = {"rows": ((8, 4096), -1), "rows of 16": ((64, 4, 16), -1),
                  "rows of 12": ((37, 5, 12), -1), "rows of 4": ((64, 4, 4), -1),
                  "columns": ((4096, 8), 0), "columns of 16": ((16, 4, 64), 0)}[layout]
    x = torch.randn(*shape, generator=gen) * 1e-2 + 1e4
    n = x.shape[dim]
    naive = ((x * x).sum(dim) - x.sum(dim) ** 2 / n) / (n - 1)
    exact = x.double().var(dim)
    assert ((naive.double() - exact).abs() > 0.5 * exact).any(), "the data does not tell"
    _check(lambda t: torch.var_mean(t, dim, correction=1), (x,), "cpu", f"var_mean {layout}")
    torch._dynamo.reset()
    _check(lambda t: (t - t.mean(dim, keepdim=True)) * torch.rsqrt(
        t.var(dim, keepdim=True, correction=0) + 1e-12), (x,), "cpu", f"normalised {layout}")


@pytest.mark.parametrize("target", TARGETS)
def test_long_sums_with_a_large_mean(target):
    """Row, column, batch-norm-shaped and whole-tensor sums and means of up to
    max(SIZES) elements of mean 1000 (the interpret target: the smallest size)."""
    sizes = SIZES if target == "cpu" else SIZES[:1]
    for n in sizes:
        gen = torch.Generator().manual_seed(n)
        x = torch.rand(n, generator=gen) + 1000.0
        cases = {
            "all": (lambda t: t.sum(), x),
            "rows": (lambda t: t.sum(1), x[: n // 4 * 4].view(4, -1)),
            "row means": (lambda t: t.mean(1), x[: n // 4 * 4].view(4, -1)),
            "columns": (lambda t: t.sum(0), x[: n // 64 * 64].view(-1, 64)),
            "channels": (lambda t: t.sum((0, 2, 3)),
                         x[: n // 2500 * 2500].view(-1, 4, 25, 25)),
        }
        for what, (fn, t) in cases.items():
            torch._dynamo.reset()
            _check(fn, (t,), target, f"{what} of {t.numel()}")


def _norm_step(kind: str):
    """Forward and backward of a normalisation layer, its parameters random: (output,
    input gradient, weight gradient, bias gradient)."""
    def step(x, w, b, g):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        if kind == "layer":
            y = F.layer_norm(x, x.shape[-1:], w, b)
        elif kind == "batch":
            y = F.batch_norm(x, None, None, w, b, training=True)
        else:
            y = F.group_norm(x, 4, w, b)
        gx, gw, gb = torch.autograd.grad((y * g).sum(), (x, w, b))
        return y.detach(), gx, gw, gb
    return step


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["layer", "batch", "group"])
def test_norm_forward_and_backward_near_float64(target, kind):
    """Output and input/weight/bias gradients of layer, batch and group norm over inputs
    with |mean| >> std, no further from float64 than eager's."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(8, 16, 12, 12, generator=gen) * 0.5 + 300.0
    if kind == "layer":
        x = x.view(16, 8 * 144)
    c = x.shape[-1] if kind == "layer" else x.shape[1]
    w, b = torch.randn(c, generator=gen), torch.randn(c, generator=gen)
    g = torch.randn(x.shape, generator=gen)
    step = _norm_step(kind)

    def fn(x, w, b, g):
        with torch.enable_grad():
            return step(x, w, b, g)
    got = compiled(fn, target)(x, w, b, g)
    assert_near_float64(got, fn(x, w, b, g), fn(x.double(), w.double(), b.double(),
                                                 g.double()), f"{kind} norm")


def _conv_bn_stack() -> torch.nn.Module:
    """MobileNetV2's pattern: conv, batch norm, ReLU6, a depthwise conv, a pointwise one."""
    torch.manual_seed(3)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU6(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU6(),
        torch.nn.Conv2d(8, 12, 1, bias=False), torch.nn.BatchNorm2d(12),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(12, 5))


@pytest.mark.parametrize("target", TARGETS)
def test_conv_batch_norm_training_step_near_float64(target):
    """A training step of a conv / batch norm / ReLU6 stack: every parameter's gradient and
    every running statistic no further from a float64 run than eager's."""
    model = _conv_bn_stack()
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(4, 3, 32, 32, generator=gen) + 2.0
    labels = torch.tensor([0, 3, 1, 4])

    def run(m, x, call=None):
        out = (call or m)(x)
        F.cross_entropy(out, labels).backward()
        return ([p.grad for p in m.parameters()] +
                [b for b in m.buffers() if b.is_floating_point()])
    ref = run(copy.deepcopy(model).double(), x.double())
    eager = run(copy.deepcopy(model), x)
    mine = copy.deepcopy(model)
    got = run(mine, x, compiled(mine, target))
    assert_near_float64(got, eager, ref, "conv/bn step")


# -- low precision inputs accumulate in float32 ---------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_reduce_in_float32(dtype):
    """Every Reduce of a half-precision group accumulates in f32 (kernel IR, both
    targets), and a bf16/f16 sum of 4096 ones is 4096 (in bf16 it would stop at 256)."""
    from fusionstitch.codegen.kernel import Reduce, bodies
    from fusionstitch.codegen.lower import lower_group
    from fusionstitch.fusion.plan import KERNEL
    x = torch.randn(4, 8, 6, 6).to(dtype)
    w = torch.randn(8).to(dtype)
    fns = [lambda t: t.sum(-1), lambda t: torch.var_mean(t, (0, 2, 3)),
           lambda t: F.layer_norm(t, t.shape[-1:]), lambda t: torch.softmax(t, -1),
           lambda t: F.batch_norm(t, None, None, w, w, training=True)]
    seen = 0
    for fn in fns:
        torch._dynamo.reset()
        with torch.no_grad():
            rep = fusionstitch.explain(fn, x, target="cpu")
        for gr in rep.graphs:
            for grp in gr.plan.groups:
                if grp.kind != KERNEL:
                    continue
                k = lower_group(gr.plan.graph, grp.nodes, "k")
                for c in k.components:
                    for body in bodies(c):
                        for s in body:
                            if isinstance(s, Reduce):
                                seen += 1
                                assert s.dtype in ("f32", "f64"), (fn, s)
    assert seen >= len(fns)
    ones = torch.ones(4, 4096, dtype=dtype)
    for target in TARGETS:
        torch._dynamo.reset()
        got = compiled(lambda t: t.sum(-1), target)(ones)
        assert got.dtype == dtype and (got == 4096).all(), (target, got)


@pytest.mark.parametrize("target", TARGETS)
def test_half_layer_norm_near_float64(target):
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(16, 512, generator=gen) * 2 + 50).to(torch.bfloat16)
    w = torch.randn(512, generator=gen).to(torch.bfloat16)
    fn = lambda t, w: F.layer_norm(t, t.shape[-1:], w)  # noqa: E731
    got = compiled(fn, target)(x, w)
    # the float64 run of the same bf16 values, compared in float64 (eager rounds to bf16 too)
    assert_near_float64(got, fn(x, w), fn(x.double(), w.double()), "bf16 layer norm")
