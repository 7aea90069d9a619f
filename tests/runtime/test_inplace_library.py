"""A library `addmm` that adds into the memory of its addend, read for the last time
there (runtime/inplace.py's `plan_library_writes`): the chains of
passes/gemm_accumulate.py run as `addmm(c, a, b, out=c)`.

The plan-level cases name which addmms may write; the compiled cases compare against
eager and against FUSIONSTITCH_INPLACE=0, where any wrong choice (an addend read again,
returned, or viewed by the GEMM's own operands) would change a number."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion import make_plan
from fusionstitch.passes import canonicalize
from fusionstitch.runtime.inplace import plan_library_writes

pytestmark = pytest.mark.usefixtures("strict_fresh")


def _writes(build):
    b = GraphBuilder()
    g = canonicalize(b.build(*build(b)))
    plan = make_plan(g, "stitch", target="cpu")
    return g, plan_library_writes(plan)


def _mm(b, m=8, k=4, n=6):
    return b.op("mm.default", b.param((m, k), "f32"), b.param((k, n), "f32"))


def test_a_chain_adds_into_its_running_sum():
    def build(b):
        acc = _mm(b)
        for _ in range(3):
            acc = b.op("add.Tensor", acc, _mm(b))
        return [b.op("neg.default", acc)]
    g, writes = _writes(build)
    links = [n.name for n in g.nodes if n.op == "addmm.default"]
    assert len(links) == 3 and set(links) == writes


def test_an_addend_read_again_or_returned_keeps_its_memory():
    def read_again(b):
        p = _mm(b)
        s = b.op("add.Tensor", p, _mm(b))
        return [s, b.op("neg.default", p)]     # p read after the addmm
    g, writes = _writes(read_again)
    assert [n.op for n in g.ops].count("addmm.default") == 1 and not writes

    def returned(b):
        p = _mm(b)
        return [b.op("add.Tensor", p, _mm(b)), p]
    g, writes = _writes(returned)
    assert [n.op for n in g.ops].count("addmm.default") == 1 and not writes


def test_a_parameter_addend_is_never_written():
    # addmm(c, a, b) with c the caller's tensor: torch's copy, never the caller's memory
    b = GraphBuilder()
    c, x, y = b.param((8, 6), "f32"), b.param((8, 4), "f32"), b.param((4, 6), "f32")
    g = b.build(b.op("addmm.default", c, x, y))
    assert not plan_library_writes(make_plan(g, "stitch", target="cpu"))


def test_an_operand_viewing_the_addend_is_refused():
    # addmm(p, p[:, :4], w): the GEMM reads the memory it would write
    b = GraphBuilder()
    p = _mm(b, 8, 4, 8)
    a = b.op("slice.Tensor", p, 1, 0, 4)
    g = b.build(b.op("addmm.default", p, a, b.param((4, 8), "f32")))
    assert not plan_library_writes(make_plan(g, "stitch", target="cpu"))


def _compiled(fn, args, monkeypatch, inplace, grad=False):
    monkeypatch.setenv("FUSIONSTITCH_INPLACE", "1" if inplace else "0")
    torch._dynamo.reset()
    comp = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    outs = []
    for _ in range(3):     # the first call decides; later ones run the generated code
        with (torch.enable_grad() if grad else torch.no_grad()):
            outs.append(comp(*args))
    return outs


@pytest.mark.parametrize("case", ["chain", "read_again", "returned"])
def test_compiled_sums_of_products_match_eager(case, monkeypatch):
    torch.manual_seed(0)
    xs, ws = torch.randn(5, 64, 32), torch.randn(5, 32, 48)

    def fn(xs, ws):
        first = xs[0] @ ws[0]
        acc = first
        for t in range(1, 5):
            acc = acc + xs[t] @ ws[t]
        if case == "read_again":
            return acc * first.sum()
        if case == "returned":
            return acc, first
        return torch.relu(acc)
    before = (xs.clone(), ws.clone())
    on = _compiled(fn, (xs, ws), monkeypatch, True)
    off = _compiled(fn, (xs, ws), monkeypatch, False)
    want = fn(xs, ws)
    for got in on + off:
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-4)
    # every call's result is its own: a later call wrote no earlier result
    for a, b in zip(on[0] if isinstance(want, tuple) else (on[0],),
                    on[-1] if isinstance(want, tuple) else (on[-1],)):
        assert a.data_ptr() != b.data_ptr()
    assert torch.equal(xs, before[0]) and torch.equal(ws, before[1])


def test_an_unrolled_rnns_gradients_match_eager(monkeypatch):
    torch.manual_seed(0)
    cell = torch.nn.Linear(24 + 32, 4 * 32)
    x = torch.randn(6, 8, 24)

    def f(x):
        h = c = torch.zeros(8, 32)
        for t in range(6):
            i, fg, g, o = cell(torch.cat([x[t], h], 1)).chunk(4, 1)
            c = torch.sigmoid(fg) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return h.square().sum()

    def grads(fn):
        cell.zero_grad()
        fn(x).backward()
        return [p.grad.clone() for p in cell.parameters()]
    want = grads(f)
    monkeypatch.setenv("FUSIONSTITCH_INPLACE", "1")
    torch._dynamo.reset()
    comp = torch.compile(f, backend=fusionstitch.backend(target="cpu"))
    for _ in range(3):
        got = grads(comp)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
