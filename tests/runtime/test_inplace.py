"""Mutated inputs written in place by generated kernels (runtime/inplace.py).

Each case runs eager and compiled on equal copies and compares every input after
the call (the mutation) and every output; `inplace_writes` says whether a kernel
stored a new value straight into the input."""
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.runtime.inplace import kernel_hazard

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def run_both(fn, make_args, target, grad=False):
    """(writes in place, eager args after, compiled args after, eager out, compiled out)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    a = make_args()
    torch.manual_seed(0)
    b = make_args()
    ctx = torch.enable_grad if grad else torch.no_grad
    with ctx():
        ref = fn(*a)
    comp = torch.compile(fn, backend=fusionstitch.backend(target=target))
    fusionstitch.reset_stats()
    with ctx():
        got = comp(*b)
    return fusionstitch.stats()["inplace_writes"], a, b, ref, got


def assert_same(xs, ys):
    for x, y in zip(xs if isinstance(xs, (list, tuple)) else [xs],
                    ys if isinstance(ys, (list, tuple)) else [ys]):
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6)


def sgd_momentum(params, grads, bufs):
    for p, g, m in zip(params, grads, bufs):
        m.mul_(0.9).add_(g)
        p.add_(m, alpha=-0.1)


@pytest.mark.parametrize("target", TARGETS)
def test_optimizer_step_writes_parameters_in_place(target):
    def make():
        torch.manual_seed(0)
        shapes = [(16, 8), (8,), (3, 4, 5)]
        return ([torch.randn(s) for s in shapes], [torch.randn(s) for s in shapes],
                [torch.randn(s) for s in shapes])
    ptrs = None

    def step(ps, gs, ms):
        nonlocal ptrs
        ptrs = [p.data_ptr() for p in ps]
        sgd_momentum(ps, gs, ms)
    writes, a, b, _, _ = run_both(step, make, target)
    assert writes == 6          # 3 parameters and 3 momentum buffers
    for x, y in zip(a, b):
        assert_same(x, y)
    assert [p.data_ptr() for p in b[0]] == ptrs


@pytest.mark.parametrize("target", TARGETS)
def test_old_value_read_elsewhere_is_not_overwritten(target):
    # the transpose (an index map in the same kernel) reads other elements of p than
    # the ones the update writes
    def f(p):
        out = p.t() * 2
        p.add_(1)
        return out

    writes, a, b, ref, got = run_both(f, lambda: (torch.arange(16.).reshape(4, 4),), target)
    assert_same(ref, got)
    assert_same(a, b)
    assert writes == 0


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dim", [0, 1])
def test_old_value_reduced(target, dim):
    # dim 1: the row the update writes is reduced first in the same kernel (in place is
    # fine); dim 0: the reduction reads across the rows
    def f(p):
        s = p.sum(dim, keepdim=True)
        p.sub_(s)
        return s

    _, a, b, ref, got = run_both(f, lambda: (torch.randn(32, 5),), target)
    assert_same(ref, got)
    assert_same(a, b)


@pytest.mark.parametrize("target", TARGETS)
def test_non_contiguous_input_gets_new_memory(target):
    def f(p, g):
        p.sub_(g)

    def make():
        torch.manual_seed(1)
        return torch.randn(6, 4).t(), torch.randn(4, 6)
    writes, a, b, _, _ = run_both(f, make, target)
    assert_same(a, b)
    assert writes == 0


@pytest.mark.parametrize("target", TARGETS)
def test_aliased_inputs(target):
    # p and q overlap: q's elements 0..5 are p's 2..7, mutated before q is read
    def f(p, q):
        p.mul_(2)
        return q * 1

    def make():
        base = torch.arange(10.)
        return base[:8], base[2:]
    _, a, b, ref, got = run_both(f, make, target)
    assert_same(ref, got)
    assert_same(a, b)


def test_batch_norm_running_stats_in_training():
    bn_a, bn_b = torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
    x = torch.randn(2, 4, 3, 3)
    ref = bn_a(x)
    torch._dynamo.reset()
    comp = torch.compile(bn_b, backend=fusionstitch.backend(target=TARGETS[-1]))
    fusionstitch.reset_stats()
    got = comp(x)
    assert_same(ref, got)
    assert_same([bn_a.running_mean, bn_a.running_var], [bn_b.running_mean, bn_b.running_var])
    assert fusionstitch.stats()["inplace_writes"] >= 2


def test_kernel_hazard_names_the_reason():
    from fusionstitch.codegen.lower import lower_group
    from fusionstitch.ir.text import parse
    g = parse("""graph h(%p: f32[4,3]) {
  %t: f32[3,4] = permute.default(%p, [1, 0])
  %c: f32[4,3] = view.default(%t, [4, 3])
  %n: f32[4,3] = add.Tensor(%c, 1.0)
  return (%n)
}""")
    k = lower_group(g, ["t", "c", "n"], "k")
    why = kernel_hazard(k, "p", k.outputs[0])
    assert why is not None and "another element" in why


@pytest.mark.parametrize("target", TARGETS)
def test_new_value_saved_for_backward_gets_its_own_memory(target):
    """A buffer updated in a training step and then read by the differentiable output: the
    forward graph returns the new value twice, as the mutation and as a tensor saved for
    backward. Stored into the buffer's memory, the saved tensor would alias the buffer, and
    the epilogue's `copy_` would bump its version: backward raised. (Also the OpInfo sweep's
    _batch_norm_with_update in bf16/fp16 with gradients.)"""
    def f(x, rs):
        rs.copy_(rs.float() * 0.9 + x.detach().mean(0) * 0.1)
        return x * rs

    def make():
        return torch.randn(4, 8, requires_grad=True), torch.randn(8).bfloat16()
    writes, a, b, ref, got = run_both(f, make, target, grad=True)
    ref.sum().backward()
    got.sum().backward()
    assert writes == 0
    assert torch.equal(a[1], b[1])
    torch.testing.assert_close(b[0].grad, a[0].grad)
    # the product reads the bf16 buffer: eager rounds the new value first (a kernel that
    # keeps fp32 there is nearer to float64; see the OpInfo sweep's tolerance)
    torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)


def _scale_by_one_element(a, s):
    """A one-element input read at every point of a loop over a larger tensor and updated
    in the same kernel: its new value is stored by one point only (a mask), so storing it
    into the input would change what the other points read."""
    out = torch.where(a > 0, s, a)
    s.mul_(2)
    return out, out + s


def _row_sums_scaled_by_a_scalar(a, s):
    out = (a * s).sum(1)
    s.add_(1)
    return out, a * s


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn,shape", [(_scale_by_one_element, (1,)),
                                      (_scale_by_one_element, ()),
                                      (_row_sums_scaled_by_a_scalar, ())])
def test_one_element_input_read_by_every_point_is_not_written_in_place(target, fn, shape):
    """The fuzzer's wrong number (seed 120009): `where(mask, a2, a0)` with a2 of shape [1]
    updated in place read a2's new value at every point after the first."""
    def make():
        return [torch.randn(3, 5), torch.randn(shape)]
    writes, a, b, ref, got = run_both(fn, make, target)
    assert_same(ref, got)
    assert_same(a, b)


def test_kernel_hazard_sees_a_store_by_some_points_only():
    from fusionstitch.codegen.lower import lower_group
    from fusionstitch.ir.text import parse
    g = parse("""graph h(%p: f32[1], %a: f32[2]) {
  %w: f32[2] = add.Tensor(%a, %p)
  %n: f32[1] = mul.Tensor(%p, 2.0)
  %y: f32[2] = add.Tensor(%w, %n)
  return (%y, %n)
}""")
    k = lower_group(g, ["w", "n", "y"], "k")
    # n (one element) is stored by a component of its own beside y's two points
    # (codegen/lower._lower_flat); before, by y's loop under `x < 1` ("some points")
    assert len(k.components) == 2
    new = next(b for b in k.outputs if b.value == "n")
    why = kernel_hazard(k, "p", new)
    assert why is not None and "another part of the kernel reads the input" in why
