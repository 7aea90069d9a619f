"""Shape-generic compilation (frontend/dynamic.py): one plan and one set of kernels serve
every shape of a graph of symbolic sizes, and every shape gets eager's numbers."""
import logging

import pytest
import torch
import torch.nn.functional as F

import fusionstitch

TARGETS = ["cpu", "interpret"]


pytestmark = pytest.mark.usefixtures("strict_fresh")   # tests/conftest.py


def compile_(fn, target, sink=None, **kw):
    return torch.compile(fn, backend=fusionstitch.backend(target=target, _sink=sink), **kw)


def block(x, w, b):
    """A transformer-ish block: layer norm, GEMM, bias + GELU, softmax over the rows."""
    h = F.layer_norm(x, (x.shape[-1],))
    y = F.gelu(h @ w + b)
    return torch.softmax(y, -1) * x.shape[1], y.mean(-1)


def new_work(before: dict) -> dict:
    now = fusionstitch.stats()
    keys = ("compiles", "specialisations", "plan_cache_misses", "kernels_compiled")
    return {k: now[k] - before[k] for k in keys}


@pytest.mark.parametrize("target", TARGETS)
def test_one_plan_and_one_set_of_kernels_serve_every_shape(target):
    w, b = torch.randn(16, 16), torch.randn(16)
    sink = []
    f = compile_(block, target, sink, dynamic=True)
    shapes = [(4, 6), (2, 3), (16, 16), (6, 6), (5, 16), (16, 5), (9, 2)]
    for i, (batch, seq) in enumerate(shapes):
        x = torch.randn(batch, seq, 16)
        before = fusionstitch.stats()
        got = f(x, w, b)
        for g, r in zip(got, block(x, w, b)):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
        if i:   # the first call compiled the one symbolic program; nothing since
            assert new_work(before) == dict.fromkeys(new_work(before), 0), (batch, seq)
    [cg] = sink
    assert cg.dynamic_reason is None and len(cg._programs) == 1
    assert fusionstitch.stats()["symbolic_programs"] == 1


@pytest.mark.parametrize("target", TARGETS)
def test_training_with_dynamic_batch_matches_eager(target):
    """Forward and backward graphs of a training step: one symbolic program each, eager's
    loss and gradients at every batch size (sizes 1 and 0 are Dynamo's own graphs)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(12, 12), torch.nn.LayerNorm(12),
                              torch.nn.GELU(), torch.nn.Linear(12, 5))
    ref = torch.nn.Sequential(*(m for m in net))   # the same parameters, run eagerly

    def step(model, x, y):
        return F.cross_entropy(model(x), y)

    sink = []
    f = compile_(lambda x, y: step(net, x, y), target, sink, dynamic=True)
    for batch in (7, 3, 12, 5, 1, 0, 12):
        x, y = torch.randn(batch, 12), torch.randint(0, 5, (batch,))
        net.zero_grad()
        loss = f(x, y)
        if batch:
            loss.backward()
        grads = [p.grad.clone() for p in net.parameters()] if batch else []
        net.zero_grad()
        want = step(ref, x, y)
        torch.testing.assert_close(loss, want, equal_nan=True)
        if batch:
            want.backward()
            for g, p in zip(grads, net.parameters()):
                torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)
    programs = [len(cg._programs) for cg in sink if cg._programs]
    kinds = {cg.kind for cg in sink if cg._programs}
    assert {"forward", "backward"} <= kinds
    if target == "cpu":
        assert programs == [1, 1], programs
    else:   # block composition around the GEMMs holds what fits on chip: guarded sizes
        assert max(programs) <= 3, programs


def test_automatic_dynamic_compiles_once_from_the_second_shape():
    """Without dynamic=True, Dynamo makes a size symbolic when it changes: the second shape
    compiles the symbolic program, later shapes compile nothing."""
    f = compile_(lambda x: torch.softmax(x * 2, -1).sum(0), "cpu")
    for i, n in enumerate((4, 6, 9, 13, 2)):
        x = torch.randn(n, 8)
        before = fusionstitch.stats()
        torch.testing.assert_close(f(x), torch.softmax(x * 2, -1).sum(0))
        work = new_work(before)
        if i >= 2:
            assert work == dict.fromkeys(work, 0), n
    assert fusionstitch.stats()["symbolic_programs"] == 1


def test_mark_dynamic():
    def fn(x):
        return (x - x.mean(0)).relu().sum(1)

    sink = []
    f = compile_(fn, "cpu", sink)
    x = torch.randn(5, 7)
    torch._dynamo.mark_dynamic(x, 0)
    f(x)
    for n in (3, 8, 11):
        y = torch.randn(n, 7)
        torch.testing.assert_close(f(y), fn(y))
    assert [len(cg._programs) for cg in sink] == [1]
    assert fusionstitch.stats()["specialisations"] == 1



def _symbolic_on_dim0(fn, x, w):
    """(compiled fn, its CompiledGraph, the kernels of its first symbolic program): `fn`
    compiled for the cpu target with x's dim 0 dynamic, called once and checked."""
    sink = []
    f = compile_(fn, "cpu", sink)
    torch._dynamo.mark_dynamic(x, 0)
    torch.testing.assert_close(f(x, w), fn(x, w))
    [cg] = sink
    return f, cg, [s.kernel for s in cg._programs[0].program.kernel_steps.values()]


def _serves_without_compiling(f, fn, cg, w, xs):
    """Each x of `xs` gives fn's result through the one symbolic program, compiling no
    kernel."""
    compiled_before = fusionstitch.stats()["kernels_compiled"]
    for x in xs:
        torch.testing.assert_close(f(x, w), fn(x, w))
    assert fusionstitch.stats()["kernels_compiled"] == compiled_before
    assert len(cg._programs) == 1

def test_sizes_equal_by_coincidence_stay_apart():
    """The first symbolic compile sees batch == hidden == 16 (a symbol and a static size):
    each keeps its own kernel sym, so other batch sizes reuse the kernels and are right."""
    def fn(x, w):
        return torch.softmax(x @ w, -1) + x.sum(0)

    w = torch.randn(16, 16)
    f, cg, kernels = _symbolic_on_dim0(fn, torch.randn(16, 16), w)
    exprs = {str(how[1]) for k in kernels for _, how in k.bindings if how[0] == "expr"}
    consts = {how[1] for k in kernels for _, how in k.bindings if how[0] == "const"}
    assert exprs and 16 in consts     # the batch is a symbol, the hidden size a constant
    _serves_without_compiling(f, fn, cg, w, [torch.randn(n, 16) for n in (3, 16, 40)])


def test_a_size_dependent_choice_is_guarded():
    """A loss's rows and their sum run as one staged program only while the whole thing is
    small (STAGED_ELEMENTS_MAX): a guard. A size past it compiles a second symbolic program
    (two kernels) and gets eager's numbers; a small size goes back to the first."""
    from fusionstitch.schedule.propagate import STAGED_ELEMENTS_MAX

    def fn(x):
        return (x.softmax(-1) * x).amax(-1).sum()

    sink = []
    f = compile_(fn, "interpret", sink, dynamic=True)
    for n in (4, STAGED_ELEMENTS_MAX // 16 + 3, 6):
        x = torch.randn(n, 16)
        torch.testing.assert_close(f(x), fn(x), rtol=1e-5, atol=1e-4)
    [cg] = sink
    small, large = cg._programs
    assert any(str(STAGED_ELEMENTS_MAX) in g for g in small.guarded.text())
    assert small.plan.num_kernels == 1 < large.plan.num_kernels
    assert fusionstitch.stats()["symbolic_programs"] == 2


def test_a_graph_that_is_not_symbolic_is_specialised_with_its_reason(caplog):
    """A size no input carries (nonzero's, captured): compiled per shape, never wrong."""
    def fn(x):
        y = x[torch.nonzero(x > 0).squeeze(1)]
        return (y * 2).sum() + x.sum()

    sink = []
    f = compile_(fn, "cpu", sink, dynamic=True)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True), \
            caplog.at_level(logging.INFO, logger="fusionstitch.frontend"):
        for x in (torch.tensor([1.0, -2, 3]), torch.tensor([-1.0, 2, -3, 4, 5])):
            torch.testing.assert_close(f(x), fn(x))
    reasons = [cg.dynamic_reason for cg in sink if cg.dynamic_reason]
    assert reasons and any("compiled per shape" in r.getMessage() for r in caplog.records)
    assert fusionstitch.stats()["dynamic_refusals"] == len(reasons)


def test_dynamic_off_compiles_per_shape(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_DYNAMIC", "0")
    f = compile_(lambda x: (x * 3).exp().sum(-1), "cpu", dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x), (x * 3).exp().sum(-1))
    st = fusionstitch.stats()
    assert st["specialisations"] == 3 and st["symbolic_programs"] == 0
    assert st["dynamic_refusals"] == 0      # turned off, not refused


def test_explain_reports_a_symbolic_program_once():
    def fn(x):
        return torch.softmax(x, -1) * 2

    f = compile_(fn, "cpu", dynamic=True)
    f(torch.randn(3, 5))
    rep = fusionstitch.explain(fn, torch.randn(4, 5), target="cpu")
    assert rep.num_kernels >= 1 and len(rep.graphs) == 1


def test_a_symbolic_programs_kernels_take_their_sizes_as_parameters():
    """The cpu target prints the sizes of static graphs as constants (targets/cpp/
    printer.py); a symbolic program's size syms ("expr" bindings) stay parameters of
    the one kernel that serves every size, and only its static sizes are constants."""
    import re

    from fusionstitch.codegen.kernel import constant_syms
    from fusionstitch.targets.cpp.printer import cpp_source

    def fn(x, w):
        return torch.softmax(x * w, -1) + x.sum(0)

    w = torch.randn(12)
    f, cg, kernels = _symbolic_on_dim0(fn, torch.randn(5, 12), w)
    sizes = {name for k in kernels for name, how in k.bindings if how[0] == "expr"}
    assert sizes
    for k in kernels:
        src = cpp_source(k)
        head, body = src.split(") {", 1)
        named = set(re.findall(r"int64_t (\w+)[,)]", head))
        for name, how in k.bindings:
            if how[0] == "expr":
                assert name in named and f"constexpr int64_t {name} " not in body
        for name, v in constant_syms(k).items():
            assert name not in named and f"constexpr int64_t {name} = {v};" in body
    # (1 would be specialised: Dynamo guards sizes 0 and 1)
    _serves_without_compiling(f, fn, cg, w, [torch.randn(n, 12) for n in (9, 3)])


@pytest.mark.parametrize("target", TARGETS)
def test_a_stepped_slice_of_a_symbolic_dim_is_written_in_place_of_its_elements(target):
    """`x[::2] = y[::2] * 0.5` (slice_scatter) over a symbolic dim: the slice's end, from
    its symbolic length, is a sym (the dynamic fuzzer's program printed it as a Python
    expression, `((s32 + 1)//2)`, into the C++); odd and even sizes."""
    def fn(x, y):
        x = x.clone()
        x[::2] = y[::2] * 0.5
        return x * 2
    f = compile_(fn, target, dynamic=True)
    for n in (4, 5, 9):
        x, y = torch.randn(n, 3), torch.randn(n, 3)
        torch.testing.assert_close(f(x, y), fn(x, y))


@pytest.mark.parametrize("target", TARGETS)
def test_a_derived_size_of_one_at_the_hint_is_a_guarded_constant(target):
    """`v[3::3]` of a dynamic dim of 4 at the hint has (s - 1) // 3 = 1 element: the
    kernel takes it as the constant 1 under the guard (s - 1) // 3 == 1 (the dynamic
    fuzzer's program printed the Dim's expression into the C++); other sizes compile
    again and are right."""
    def fn(x):
        v = x.amin(1)[3::3]
        return torch.stack([v, v], 0), v.contiguous() * 2
    f = compile_(fn, target, dynamic=True)
    for n in (4, 5, 6, 10, 16):
        x = torch.randn(n, 4)
        for got, want in zip(f(x), fn(x)):
            torch.testing.assert_close(got, want)
