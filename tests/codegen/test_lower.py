"""Lowering (codegen/lower.py): what a group may hold, and reductions of degenerate shapes.

Found by the OpInfo sweep (tests/opinfo): reductions over 0-d inputs with a `dim`
crashed lowering (an IndexError caught and run through torch), and a kernel group with
complex values reached the C++ printer, which has no complex type.
"""
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.codegen.lower import Unsupported, lower_group
from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])


@pytest.fixture(autouse=True)
def _strict(monkeypatch, tmp_path_factory):
    """Internal errors raise (no silent fallback to torch); Dynamo starts fresh per test."""
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    torch._dynamo.reset()


def compiled(fn, target):
    return torch.compile(fn, backend=fusionstitch.backend(target=target), dynamic=False)


REDUCTIONS = {
    "sum": lambda x: torch.sum(x, 0, keepdim=True),
    "mean": lambda x: torch.mean(x, -1),
    "amax": lambda x: torch.amax(x, 0),
    "amin": lambda x: torch.amin(x, -1, keepdim=True),
    "prod": lambda x: torch.prod(x, 0),
    "any": lambda x: torch.any(x > 0, 0),
    "all": lambda x: torch.all(x > 0, -1),
    "logsumexp": lambda x: torch.logsumexp(x, 0),
    "var": lambda x: torch.var(x, 0, correction=0),
    "softmax": lambda x: torch.softmax(x, 0),
    "norm": lambda x: torch.linalg.vector_norm(x, 2, -1),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_reductions_over_0d_and_one_element_inputs(shape, target, caplog):
    """Every reduction with a `dim` of a 0-d or one-element input, in one graph. `prod`
    over a real dim has no code generation rule yet (README: Status and limits): it may
    run through torch, counted and named; nothing else may."""
    def fn(x):
        return [f(x) for f in REDUCTIONS.values()]
    x = torch.randn(shape)
    fusionstitch.reset_stats()
    with caplog.at_level("WARNING", logger="fusionstitch.frontend"):
        got = compiled(fn, target)(x)
    for name, g, w in zip(REDUCTIONS, got, fn(x)):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, msg=name)
    fallbacks = fusionstitch.stats()["fallbacks"]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert fallbacks == 0 or (fallbacks == 1 and "(prod.dim_int)" in logged), logged


@pytest.mark.parametrize("target", TARGETS)
def test_dim_ops_on_0d_tensors(target):
    """aten takes dim 0 / -1 of a 0-d tensor as its one element: index_select, gather,
    transpose and the backward of index_reduce and scatter (which gather from a 0-d
    gradient) crashed lowering with an IndexError."""
    def fn(x, y, i):
        return (torch.index_select(x, 0, i.view(1)) * 2, torch.gather(x, -1, i) + 1,
                x.transpose(0, -1).exp(), torch.index_select(y, 0, i.view(1)).sin(),
                torch.scatter(x, 0, i, y).cos())
    x = torch.randn((), requires_grad=True)
    y = torch.randn((), requires_grad=True)
    i = torch.zeros((), dtype=torch.int64)
    got = compiled(fn, target)(x, y, i)
    want = fn(x, y, i)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w)
    grads = torch.autograd.grad(sum(g.sum() for g in got), (x, y))
    wgrads = torch.autograd.grad(sum(w.sum() for w in want), (x, y))
    for g, w in zip(grads, wgrads):
        torch.testing.assert_close(g, w)


@pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta")
@pytest.mark.parametrize("target", TARGETS)
def test_index_reduce_backward_of_0d_input(target):
    def fn(x, s, i):
        return torch.index_reduce(x, 0, i, s, "amax", include_self=True)
    x = torch.randn((), requires_grad=True)
    s = torch.randn((), requires_grad=True)
    i = torch.zeros(1, dtype=torch.int64)
    got = compiled(fn, target)(x, s, i)
    want = fn(x, s, i)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, (x, s)), torch.autograd.grad(want, (x, s)))


def test_complex_values_are_not_lowered():
    g = parse("""graph c(%x: c64[4], %y: f32[4]) {
  %m: c64[4] = mul.Scalar(%x, complex(0.0, 1.0))
  %r: f32[4] = exp.default(%y)
  return (%m, %r)
}""")
    with pytest.raises(Unsupported, match="dtype c64"):
        lower_group(g, ["m"], "k")
    lower_group(g, ["r"], "k")
    plan = make_plan(g, "stitch", "cpu")
    kinds = {n: grp.kind for grp in plan.groups for n in grp.nodes}
    assert kinds == {"m": "library", "r": "kernel"}


def test_complex_read_by_a_real_op_is_not_lowered():
    g = parse("""graph c(%x: c64[4]) {
  %a: f32[4] = abs.default(%x)
  %e: f32[4] = exp.default(%a)
  return (%e)
}""")
    with pytest.raises(Unsupported, match="reads %x, which has dtype c64"):
        lower_group(g, ["a", "e"], "k")


@pytest.mark.parametrize("target", TARGETS)
def test_complex_graph_runs_complex_ops_through_torch(target):
    """polar's backward multiplies by the complex literal 1j: the graph plans (the literal
    prints), complex ops run through torch, and the gradients match eager."""
    def fn(a, b):
        return torch.view_as_real(torch.polar(a, b) * (2 + 1j)).exp().sum()
    a, b = torch.rand(6) + 0.5, torch.randn(6)
    ga, gb = a.clone().requires_grad_(), b.clone().requires_grad_()
    ca, cb = a.clone().requires_grad_(), b.clone().requires_grad_()
    want = fn(ga, gb)
    want.backward()
    got = compiled(fn, target)(ca, cb)
    got.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ca.grad, ga.grad)
    torch.testing.assert_close(cb.grad, gb.grad)


_CHANNELS_FIRST_NORM = """graph g(%x: f32[2,8,4,4], %w: f32[8], %b: f32[8]) {
  %p: f32[2,4,4,8] = permute.default(%x, [0, 2, 3, 1])
  %vm: (f32[2,4,4,1], f32[2,4,4,1]) = var_mean.correction(%p, [3], correction=0, keepdim=True)
  %v: f32[2,4,4,1] = getitem(%vm, 0)
  %m: f32[2,4,4,1] = getitem(%vm, 1)
  %e: f32[2,4,4,1] = add.Tensor(%v, 1e-06)
  %rs: f32[2,4,4,1] = rsqrt.default(%e)
  %d: f32[2,4,4,8] = sub.Tensor(%p, %m)
  %n: f32[2,4,4,8] = mul.Tensor(%d, %rs)
  %s: f32[2,4,4,8] = mul.Tensor(%n, %w)
  %a: f32[2,4,4,8] = add.Tensor(%s, %b)
  %o: f32[2,8,4,4] = permute.default(%a, [0, 3, 1, 2])
  return (%o)
}"""


def test_a_row_kernel_stores_a_permuted_output_at_its_own_rows():
    """A channels-first layer norm (permute, var_mean over the last dim, normalise,
    permute back) lowers as one row kernel: the permuted output's index is the
    reduction's own, permuted, so each row reads its own statistics. Unravelling the
    output from the linear position read them at other rows (Unsupported), and the
    planner split the norm into a var_mean kernel and a normalise kernel."""
    g = parse(_CHANNELS_FIRST_NORM)
    names = [n.name for n in g.nodes if n.op != "parameter"]
    lower_group(g, names, "k")       # raised "read at another row than its own" before
    for target in TARGETS:
        plan = make_plan(g, "stitch", target)
        assert plan.num_kernels == 1, str(plan)
        from fusionstitch.runtime.program import Program
        prog = Program(plan, target=target)
        x, w, b = torch.randn(2, 8, 4, 4), torch.randn(8), torch.randn(8)
        want = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (8,), w, b, 1e-6)
        torch.testing.assert_close(prog([x, w, b])[0], want.permute(0, 3, 1, 2))


def _batch_norm_stored_nhwc(n, c, h, w):
    """Batch norm's statistics over (N, H, W), the normalised relu, and its copy in NHWC
    order (conv_layout's input copy for the next channels-last convolution)."""
    return f"""graph g(%x: f32[{n},{c},{h},{w}]) {{
  %vm: (f32[1,{c},1,1], f32[1,{c},1,1]) = var_mean.correction(%x, [0, 2, 3], correction=0, keepdim=True)
  %v: f32[1,{c},1,1] = getitem(%vm, 0)
  %m: f32[1,{c},1,1] = getitem(%vm, 1)
  %e: f32[1,{c},1,1] = add.Tensor(%v, 1e-05)
  %rs: f32[1,{c},1,1] = rsqrt.default(%e)
  %d: f32[{n},{c},{h},{w}] = sub.Tensor(%x, %m)
  %y: f32[{n},{c},{h},{w}] = mul.Tensor(%d, %rs)
  %r: f32[{n},{c},{h},{w}] = relu.default(%y)
  %p: f32[{n},{h},{w},{c}] = permute.default(%r, [0, 2, 3, 1])
  %o: f32[{n},{h},{w},{c}] = clone.default(%p)
  return (%o)
}}"""


@pytest.mark.parametrize("shape", [(2, 8, 4, 6), (4, 8, 8, 8)])
def test_batch_statistics_store_a_channels_last_copy_at_their_rows(shape):
    """Batch norm in training, its result copied to NHWC for a channels-last convolution:
    one kernel. The copy is clone(permute(r)), whose index is the statistics' own,
    permuted (each channel's block stores its own elements); unravelled from its own
    shape, the copy read the statistics at other channels (Unsupported, and the group was
    split into one kernel per op). Where every dim has the same size (the second shape),
    the copy is shaped like the reduction's input: it took the input's index unpermuted."""
    g = parse(_batch_norm_stored_nhwc(*shape))
    lower_group(g, [n.name for n in g.nodes if n.op != "parameter"], "k")
    x = torch.randn(shape) * 3 + 1
    mean = x.mean((0, 2, 3), keepdim=True)
    var = x.var((0, 2, 3), keepdim=True, correction=0)
    want = torch.relu((x - mean) * torch.rsqrt(var + 1e-5)).permute(0, 2, 3, 1)
    for target in TARGETS:
        plan = make_plan(g, "stitch", target)
        assert plan.num_kernels == 1, str(plan)
        from fusionstitch.runtime.program import Program
        got = Program(plan, target=target)([x])[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert got.is_contiguous()
