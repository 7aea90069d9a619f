"""How training graphs are split (frontend/decompositions.py's `partitioner`,
FUSIONSTITCH_PARTITION): on the cpu target the min-cut rematerialisation partitioner
whose backward recomputes only values it gets back bit for bit (frontend/recompute.py);
elsewhere AOTAutograd's default; Inductor's min-cut as it is (`mincut`) on request."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.decompositions import partitioner
from fusionstitch.targets import resolve

pytestmark = pytest.mark.usefixtures("strict_fresh")


def _step(w, x):
    h = torch.tanh(x @ w).sin() * 2 + x.cos().mean()
    return (h.exp() * h).mean()


def _saved(monkeypatch, choice, fn=_step, shapes=((16, 16), (8, 16))):
    """(number of forward outputs, gradient of the first input) with partitioner
    `choice`."""
    monkeypatch.setenv("FUSIONSTITCH_PARTITION", choice)
    torch._dynamo.reset()
    sink = []
    torch.manual_seed(0)
    w = torch.randn(*shapes[0], requires_grad=True)
    x = torch.randn(*shapes[1])
    comp = torch.compile(fn, backend=fusionstitch.backend(target="cpu", _sink=sink))
    comp(w, x).backward()
    [fwd] = [g for g in sink if g.kind == "forward"]
    outs = len(next(n for n in fwd.gm.graph.nodes if n.op == "output").args[0])
    return outs, w.grad


def _eager_grad(fn=_step, shapes=((16, 16), (8, 16))):
    torch.manual_seed(0)
    w = torch.randn(*shapes[0], requires_grad=True)
    x = torch.randn(*shapes[1])
    fn(w, x).backward()
    return w.grad


def test_the_min_cut_forward_saves_fewer_tensors_and_the_gradients_match(monkeypatch):
    n_default, g_default = _saved(monkeypatch, "default")
    n_mincut, g_mincut = _saved(monkeypatch, "mincut")
    assert n_mincut < n_default
    for g in (g_default, g_mincut):
        torch.testing.assert_close(g, _eager_grad(), rtol=1e-4, atol=1e-6)


def _arith(w, x):
    """Exact arithmetic between two transcendentals: the backward may recompute the
    middle part (adds, products, a quotient, a square root), not the ends."""
    a = torch.tanh(x @ w)
    b = ((a * 3 + 4) / (a * a + 2)).sqrt() - a
    return torch.exp(b).sum()


def test_exact_recomputes_arithmetic_and_saves_fewer_tensors(monkeypatch):
    n_default, _ = _saved(monkeypatch, "default", _arith)
    n_exact, g_exact = _saved(monkeypatch, "exact", _arith)
    assert n_exact < n_default
    torch.testing.assert_close(g_exact, _eager_grad(_arith), rtol=1e-4, atol=1e-6)


def _recomputed(monkeypatch, choice, fn, shapes):
    """The ops the backward graph computes from saved values alone (no tangent among
    their inputs): what it recomputes of the forward."""
    monkeypatch.setenv("FUSIONSTITCH_PARTITION", choice)
    torch._dynamo.reset()
    sink = []
    w = torch.randn(*shapes[0], requires_grad=True)
    x = torch.randn(*shapes[1])
    torch.compile(fn, backend=fusionstitch.backend(target="cpu", _sink=sink))(w, x).backward()
    [bwd] = [g for g in sink if g.kind == "backward"]
    from_tangents, out = set(), []
    for n in bwd.gm.graph.nodes:
        if n.op == "placeholder" and n.name.startswith("tangents") or any(
                i in from_tangents for i in n.all_input_nodes):
            from_tangents.add(n)
        elif n.op == "call_function":
            out.append(n)
    return out


@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid", "log1p", "sin", "erf", "log"])
def test_a_value_compared_with_a_saved_minimum_is_never_recomputed(monkeypatch, op):
    """The class of the fuzzer's amin/xlogy program (tests/fuzz/regressions.py): amin's
    gradient goes to the elements equal to the saved minimum, divided by their count,
    and a transcendental recomputed by another kernel (vector code against a scalar
    tail) can miss it by one ulp (NaN). Inductor's min-cut recomputes the
    transcendental; ours recomputes nothing but exact arithmetic, and the gradient
    matches eager's."""
    fn = getattr(torch, op)   # (xlogy, decomposed: tests/fuzz/regressions.py)

    def f(w, x):
        v = fn((w * x).abs() + 0.5)
        return (v.amin(dim=0) * 2).sum() + (v * v).sum()

    def again(choice):   # the forward's op, computed again from saved values
        return [n for n in _recomputed(monkeypatch, choice, f, shapes)
                if n.target.overloadpacket is getattr(torch.ops.aten, op)]
    shapes = ((37, 3), (37, 3))
    assert again("mincut")
    assert again("exact") == []
    _, got = _saved(monkeypatch, "exact", f, shapes)
    assert not got.isnan().any()
    torch.testing.assert_close(got, _eager_grad(f, shapes), rtol=1e-5, atol=1e-6)


def test_auto_is_exact_on_the_cpu_target_and_the_default_elsewhere(monkeypatch):
    monkeypatch.delenv("FUSIONSTITCH_PARTITION", raising=False)
    from fusionstitch.frontend.recompute import partition
    assert partitioner(resolve("cpu")) == {"partition_fn": partition}
    assert resolve("cpu").exact_arithmetic
    assert partitioner(resolve("cuda")) == {} and partitioner(resolve("interpret")) == {}
    assert partitioner(None) == {}


def test_an_unknown_partitioner_is_refused(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_PARTITION", "greedy")
    with pytest.raises(ValueError, match="FUSIONSTITCH_PARTITION='greedy'"):
        partitioner()


def test_exact_means_ieee_arithmetic_in_a_wide_float():
    """What frontend/recompute.py lets the backward recompute: IEEE operations, copies
    and comparisons in float32/float64; not transcendentals, reductions, floor
    divisions, or anything in a narrower float (a kernel may keep it in float32)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fusionstitch.frontend.recompute import exact

    def f(x, h):
        return (x * 2 + 1, (x / 3).sqrt(), torch.rsqrt(x.abs() + 1), x.exp(), x.sum(0),
                torch.div(x, 3, rounding_mode="floor"), h * 2, x > 0, x.to(torch.float64),
                torch.add(x, x, alpha=2), torch.round(x, decimals=2))
    gm = make_fx(f)(torch.randn(4, 3), torch.randn(4, 3).to(torch.bfloat16))
    got = {n.name: exact(n) for n in gm.graph.nodes if n.op == "call_function"}
    want = {"mul": True, "add": True, "div": True, "sqrt": True, "abs_1": True,
            "add_1": True, "rsqrt": True, "exp": False, "sum_1": False, "div_1": False,
            "mul_1": False, "gt": True, "_to_copy": True, "add_2": False, "round_1": False}
    assert {k: got[k] for k in want} == want


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_exact_splits_tuples_and_symbolic_sizes(monkeypatch, dynamic):
    """Tuple-valued ops (max over a dim, topk: their elements are tagged through their
    getitems) and symbolic sizes (SymInt arithmetic is never tagged) in a training
    graph split by `exact`; the gradients match eager's."""
    def f(w, x):
        h = torch.tanh(x * w) * 3 + 1
        m, i = h.max(dim=1)
        t, _ = h.topk(2, dim=1)
        return (m * 2 + t.sum(1) + h.gather(1, i[:, None]).squeeze(1) / 2).sum() \
            + (h * h).sum()
    monkeypatch.setenv("FUSIONSTITCH_PARTITION", "exact")
    for n in (7, 11):
        torch._dynamo.reset()
        torch.manual_seed(n)
        w = torch.randn(n, 5, requires_grad=True)
        x = torch.randn(n, 5)
        comp = torch.compile(f, backend=fusionstitch.backend(target="cpu"), dynamic=dynamic)
        comp(w, x).backward()
        got = w.grad
        w.grad = None
        f(w, x).backward()
        torch.testing.assert_close(got, w.grad, rtol=1e-5, atol=1e-6)
