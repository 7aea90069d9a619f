"""The generated per-call code of a Program (runtime/wrapper.py): the same results, the
same counters and the same drops as the interpreter it replaces from the second call."""
import re
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse
from fusionstitch.runtime import wrapper
from fusionstitch.runtime.program import Program

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])

# kernels, a library call (cumsum), a fallback (an op outside the IR: fft), a view run
# through torch, a tuple result read by getitem, an input returned, a number returned
_GRAPH = """graph g(%a: f32[4,8], %b: f32[8]) {
  %e: f32[4,8] = exp.default(%a)
  %c: f32[4,8] = cumsum.default(%e, 1)
  %s: f32[4,8] = add.Tensor(%c, %b)
  %t: f32[8,4] = permute.default(%s, [1, 0])
  %m: (f32[8], i64[8]) = max.dim(%t, 1)
  %v: f32[8] = getitem(%m, 0)
  %i: i64[8] = getitem(%m, 1)
  %r: f32[8] = relu.default(%v)
  return (%r, %i, %t, %a, 3)
}"""


def _inputs():
    return [torch.randn(4, 8), torch.randn(8)]


def _counts() -> dict:
    s = fusionstitch.stats()
    return {k: s[k] for k in ("kernels_launched", "library_calls", "fallbacks")}


@pytest.mark.parametrize("target", TARGETS)
def test_generated_code_gives_the_interpreters_results_and_counts(target):
    g = parse(_GRAPH)
    generated = Program(make_plan(g, "stitch", target), target=target)
    interpreted = Program(make_plan(g, "stitch", target), target=target)
    interpreted.use_generated(False)
    args = _inputs()
    want = None
    for _ in range(3):
        fusionstitch.reset_stats()
        got = generated(list(args))
        counts = _counts()
        assert generated.generated_source is not None, "written out by the first call"
        fusionstitch.reset_stats()
        ref = interpreted(list(args))
        assert _counts() == counts, "every launch, library call and fallback counted alike"
        assert counts["kernels_launched"] == generated.num_kernels
        assert counts["library_calls"] == generated.num_library_calls
        assert counts["fallbacks"] == generated.num_fallback_calls
        assert interpreted.generated_source is None
        for x, y in zip(got, ref):
            if isinstance(x, torch.Tensor):
                assert torch.equal(x, y)
            else:
                assert x == y
        assert got[3] is args[0], "an input returned is the input itself"
        want = want or [t.clone() if isinstance(t, torch.Tensor) else t for t in got]
    e = args[0].exp().cumsum(1) + args[1]
    torch.testing.assert_close(want[0], e.t().max(1).values.relu())
    assert torch.equal(want[1], e.t().max(1).indices)


def test_a_fallback_in_the_generated_code_is_still_counted():
    """An op outside fusionstitch's IR runs through torch and counts as a fallback at
    every call, generated code or not."""
    g = parse("""graph g(%a: f32[4,8]) {
  %e: f32[4,8] = exp.default(%a)
  %f: c64[4,5] = _fft_r2c.default(%e, [1], 0, True)
  return (%f)
}""")
    prog = Program(make_plan(g, "stitch", "interpret"), target="interpret")
    assert prog.num_fallback_calls == 1
    a = torch.randn(4, 8)
    for _ in range(3):
        fusionstitch.reset_stats()
        out = prog([a])
        assert fusionstitch.stats()["fallbacks"] == 1
        torch.testing.assert_close(out[0], torch.fft.rfft(a.exp()))
    assert prog.generated_source is not None and "BUMP" in prog.generated_source


def test_generated_code_frees_what_the_interpreter_frees():
    """Values die after the same steps: the code writes None where the plan drops them."""
    g = parse("""graph g(%a: f32[16]) {
  %x: f32[16] = exp.default(%a)
  %y: f32[16] = cumsum.default(%x, 0)
  %z: f32[16] = cumsum.default(%y, 0)
  return (%z)
}""")
    prog = Program(make_plan(g, "stitch", "interpret"), target="interpret")
    a = torch.randn(16)
    prog([a])
    src = prog.generated_source
    dead = {slot for _, ops in prog.steps if _ != "generated" for *_, d in ops for slot in d}
    dead |= {slot for kind, ops in prog.steps if kind == "generated" for slot in ops[1]}
    assert dead and all(f"values[{s}] = " in src and "None" in src for s in dead)
    torch.testing.assert_close(prog([a])[0], a.exp().cumsum(0).cumsum(0))


def test_knob_keeps_the_interpreter(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_WRAPPER", "0")
    assert not wrapper.enabled()
    prog = Program(make_plan(parse(_GRAPH), "stitch", "interpret"), target="interpret")
    for _ in range(2):
        prog(_inputs())
    assert prog.generated_source is None


def test_use_generated_toggles_and_keeps_the_code():
    prog = Program(make_plan(parse(_GRAPH), "stitch", "interpret"), target="interpret")
    prog(_inputs())
    src = prog.generated_source
    assert src is not None
    prog.use_generated(False)
    prog(_inputs())
    assert prog.generated_source is None
    prog.use_generated(True)
    assert prog.generated_source == src


def test_a_failure_to_generate_keeps_the_interpreter(monkeypatch, caplog):
    def broken(*a, **k):
        raise RuntimeError("boom")
    monkeypatch.setattr(wrapper, "build", broken)
    monkeypatch.delenv("FUSIONSTITCH_STRICT", raising=False)
    prog = Program(make_plan(parse(_GRAPH), "stitch", "interpret"), target="interpret")
    args = _inputs()
    first = prog(list(args))
    second = prog(list(args))
    assert prog.generated_source is None
    assert torch.equal(first[0], second[0])
    assert "could not generate" in caplog.text
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    prog = Program(make_plan(parse(_GRAPH), "stitch", "interpret"), target="interpret")
    with pytest.raises(RuntimeError, match="boom"):
        prog(list(args))


@pytest.mark.skipif("cpu" not in TARGETS, reason="needs a C++ compiler")
def test_a_static_kernel_is_launched_inline_and_a_wrapped_run_is_seen():
    """A static kernel's launch is written out (its syms fixed by the first call), and
    reads the step's `run` at each call, so wrapping it (a profiler, a test) still works."""
    g = parse("""graph g(%a: f32[4,8]) {
  %e: f32[4,8] = exp.default(%a)
  return (%e)
}""")
    prog = Program(make_plan(g, "stitch", "cpu"), torch.device("cpu"), "cpu", static=True)
    a = torch.randn(4, 8)
    prog([a])
    assert ".run([" in prog.generated_source
    [step] = prog.kernel_steps.values()
    seen = []
    run = step.run
    step.run = lambda buffers, syms: (seen.append(len(buffers)), run(buffers, syms))
    torch.testing.assert_close(prog([a])[0], a.exp())
    assert seen == [2]


@pytest.mark.skipif("cpu" not in TARGETS, reason="needs a C++ compiler")
def test_in_place_writes_in_generated_code_follow_the_storages(tmp_path, monkeypatch):
    """An optimizer step stores new values into its parameters. The generated code takes
    the choice the step remembered only for the same storages: the same parameters write
    in place (counted), other parameters (new storages) launch as a step that decides
    again; every call equals eager."""
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()

    def step(ps, gs, ms):
        for p, g, m in zip(ps, gs, ms):
            m.mul_(0.9).add_(g)
            p.add_(m, alpha=-0.1)

    def make(seed):
        torch.manual_seed(seed)
        shapes = [(16, 8), (8,)]
        return [[torch.randn(s) for s in shapes] for _ in range(3)]
    graphs = []
    comp = torch.compile(step, backend=fusionstitch.backend(target="cpu", _sink=graphs))
    for seed in (0, 0, 1):    # twice on one set of storages, then on new ones
        got, want = make(seed), make(seed)
        for call in range(3):
            ptrs = [p.data_ptr() for p in got[0]]
            fusionstitch.reset_stats()
            with torch.no_grad():
                comp(*got)
            step(*want)
            assert fusionstitch.stats()["inplace_writes"] == 4, (seed, call)
            assert [p.data_ptr() for p in got[0]] == ptrs
            for xs, ys in zip(got, want):
                for x, y in zip(xs, ys):
                    torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-6)
    [prog] = [s.program for g in graphs for s in g.specialisations.values()]
    assert "else:" in prog.generated_source, "the remembered storages are checked per call"


def test_a_launch_writing_in_place_beside_new_activations_stays_written_out(monkeypatch):
    """A batch norm's training forward reads the convolution's result (new memory at each
    call) and stores the running statistics into their buffers: the remembered in-place
    choice holds for any storages of their own, so every call takes the written-out
    launch (no KernelStep call), writes in place, and matches eager."""
    from fusionstitch.runtime.launch import KernelStep
    torch._dynamo.reset()
    torch.manual_seed(0)
    mods = [torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).train()
            for _ in range(2)]
    mods[1].load_state_dict(mods[0].state_dict())
    comp = torch.compile(mods[0], backend=fusionstitch.backend(target="cpu"))
    calls = []
    real = KernelStep.__call__
    monkeypatch.setattr(KernelStep, "__call__",
                        lambda self, *a, **k: (calls.append(1), real(self, *a, **k))[1])
    for i in range(4):
        x = torch.randn(2, 3, 8, 8)
        calls.clear()
        fusionstitch.reset_stats()
        with torch.no_grad():
            torch.testing.assert_close(comp(x), mods[1](x), rtol=1e-5, atol=1e-5)
        if i >= 1:
            assert not calls, i
            assert fusionstitch.stats()["inplace_writes"] >= 2
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(mods[0][1], name), getattr(mods[1][1], name))


def test_a_launch_with_tuple_outputs_is_written_out(monkeypatch):
    """A kernel that stores both elements of var_mean (a layer norm's statistics, read by
    a library call in between) is launched by the generated code, not as a step, and the
    elements land in their tuple as the step would put them."""
    from fusionstitch.runtime.launch import KernelStep

    def fn(x, w):
        v, m = torch.var_mean(x, dim=-1, keepdim=True)
        y = torch.mm(((x - m) * torch.rsqrt(v + 1e-5)).view(-1, 32), w)
        return y.tanh(), v * 2
    torch._dynamo.reset()
    x, w = torch.randn(4, 6, 32), torch.randn(32, 8)
    comp = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
    calls = []
    real = KernelStep.__call__
    monkeypatch.setattr(KernelStep, "__call__",
                        lambda self, *a, **k: (calls.append(self), real(self, *a, **k))[1])
    for i in range(3):
        calls.clear()
        got = comp(x, w)
        for g, r in zip(got, fn(x, w)):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    assert not calls


def test_ops_run_through_torch_are_called_without_a_python_frame():
    """The generated code calls an aten op's C operator object (what OpOverload.__call__
    forwards to), not the OpOverload, and views and getitem as torch's C functions: tens
    of such ops per call in a model, each a Python frame otherwise. Results as before."""
    g = parse(_GRAPH)
    prog = Program(make_plan(g, "stitch", TARGETS[-1]), target=TARGETS[-1])
    args = _inputs()
    first = prog(list(args))
    called = {n: f for n, f in prog._fast.__globals__.items() if n.startswith("F")}
    assert called, "the graph runs ops through torch"
    assert not [f for f in called.values() if isinstance(f, torch._ops.OpOverload)]
    assert not [f for f in called.values()
                if getattr(f, "__code__", None) is not None
                and f.__code__.co_filename.endswith("program.py")]
    second = prog(list(args))
    for x, y in zip(first, second):
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y


@pytest.mark.parametrize("target", TARGETS)
def test_views_of_constants_are_made_once_not_per_call(target):
    """A reshape / expand / permute of a graph constant (a chain of them) is computed when
    the program is built and bound as a constant: the generated code runs no op on a
    constant, a kernel and an op through torch read the bound views, the results are
    the interpreter's and torch's. A view of a constant that is a graph output is still
    made per call (the caller gets a fresh tensor each time)."""
    from fusionstitch.frontend.build import GraphBuilder
    b = GraphBuilder("g")
    x = b.param((2, 8, 4))
    c = b.constant(torch.arange(8, dtype=torch.float32))
    w = b.constant(torch.randn(12))
    e = b.op("expand.default", b.op("view.default", c, (1, 8, 1)), (2, 8, 4))
    y = b.op("mul.Tensor", x, e)                              # a kernel reads the view
    z = b.op("mm.default", b.op("view.default", y, (16, 4)),
             b.op("permute.default", b.op("view.default", w, (3, 4)), (1, 0)))  # a chain
    g = b.build(z, b.op("view.default", c, (2, 4)))
    generated = Program(make_plan(g, "stitch", target), target=target)
    interpreted = Program(make_plan(g, "stitch", target), target=target)
    interpreted.use_generated(False)
    const_slots = {i for i, n in enumerate(g.nodes) if n.op == "constant"}
    bound = {slot for slot, _ in generated.constants} - const_slots
    assert len(bound) >= 3, "the view read by the kernel, the chain read by the mm"
    xs = torch.randn(2, 8, 4)
    want = (xs * torch.arange(8.0).view(1, 8, 1)).view(16, 4) @ w_value(g).t()
    outs = []
    for _ in range(3):
        got, ref = generated([xs]), interpreted([xs])
        torch.testing.assert_close(got[0], want)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
        assert torch.equal(got[1], torch.arange(8.0).view(2, 4))
        outs.append(got[1])
    assert outs[1] is not outs[2], "an output view of a constant: a fresh tensor per call"
    import re
    for line in generated.generated_source.splitlines():
        call = re.search(r"= F\d+\((.*)\)$", line)
        if call:
            read = {int(s) for s in re.findall(r"values\[(\d+)\]", call.group(1))}
            made = int(re.search(r"values\[(\d+)\] =", line).group(1))
            if read <= const_slots | bound:
                assert g.nodes[made].name == g.outputs[1].name, \
                    f"an op on constants alone run per call: {line}"


def w_value(g):
    """The second constant of `g` (the mm's weight)."""
    return [n.kwarg("value").value for n in g.nodes if n.op == "constant"][1].view(3, 4)


_VIEWS = """graph g(%a: f32[4,8], %b: f32[2,3]) {
  %c: f32[4,8] = cumsum.default(%a, 1)
  %v: f32[2,16] = view.default(%c, [2, 16])
  %p: f32[16,2] = permute.default(%v, [1, 0])
  %t: f32[2,16] = t.default(%p)
  %x: f32[16,2] = transpose.int(%t, 0, 1)
  %u: f32[1,16,2] = unsqueeze.default(%x, 0)
  %e: f32[3,16,2] = expand.default(%u, [3, 16, 2])
  %s: f32[16,2] = squeeze.dim(%u, 0)
  %l: f32[2] = select.int(%s, 0, 5)
  %d: f32[2,3] = cumsum.default(%b, 0)
  %z: f32[6] = view.default(%d, [6])
  %o: f32[] = select.int(%z, 0, 4)
  %q: f32[] = view.default(%o, [])
  return (%p, %t, %x, %e, %s, %l, %q)
}"""


@pytest.mark.parametrize("target", TARGETS)
def test_views_through_torch_are_tensor_method_calls_with_the_same_results(target):
    """Views run through torch are written as Tensor method calls (`x.permute(1, 0)`,
    a third of the operator object's cost): the values, sizes and strides are the
    interpreter's and torch's, and an empty size (a view to a 0-d tensor) keeps the
    operator call (`x.view()` is not `view(x, [])`)."""
    g = parse(_VIEWS)
    generated = Program(make_plan(g, "none", target), target=target)
    interpreted = Program(make_plan(g, "none", target), target=target)
    interpreted.use_generated(False)
    a, b = torch.randn(4, 8), torch.randn(2, 3)
    c = a.cumsum(1).view(2, 16).permute(1, 0)
    want = [c, c.t(), c.t().transpose(0, 1), c.unsqueeze(0).expand(3, 16, 2), c,
            c[5], b.cumsum(0).view(6)[4]]
    for _ in range(3):
        got, ref = generated([a, b]), interpreted([a, b])
        for x, y, w in zip(got, ref, want):
            assert torch.equal(x, w) and torch.equal(y, w)
            assert x.shape == w.shape and x.stride() == y.stride() == w.stride()
    src = generated.generated_source
    for method in (".permute(1, 0)", ".t()", ".transpose(0, 1)", ".expand(3, 16, 2)",
                   ".unsqueeze(0)", ".squeeze(0)", ".select(0, 5)"):
        assert method in src, method
    assert ".view()" not in src and ".reshape()" not in src


# views of a library result, of a kernel output and of an input, chains of views (one
# whose first value dies at the chain's first view), a reshape that must copy, and a
# view that is a graph output
_STATIC_VIEWS = """graph g(%a: f32[4,8], %b: f32[8,4]) {
  %c: f32[4,8] = cumsum.default(%a, 1)
  %v: f32[2,16] = view.default(%c, [2, 16])
  %p: f32[16,2] = permute.default(%v, [1, 0])
  %m: f32[16,2] = cumsum.default(%p, 0)
  %w: f32[32] = view.default(%m, [32])
  %f: f32[32] = view.default(%p, [32])
  %g: f32[32] = cumsum.default(%f, 0)
  %q: f32[4,8] = permute.default(%b, [1, 0])
  %r: f32[4,8] = cumsum.default(%q, 0)
  %t: f32[8,4] = t.default(%r)
  %s: f32[4,8] = add.Tensor(%r, %c)
  %k: f32[2,16] = view.default(%s, [2, 16])
  %n: f32[2,16] = cumsum.default(%k, 1)
  return (%w, %g, %t, %n)
}"""


def _static_views_reference(a, b):
    c = a.cumsum(1)
    p = c.view(2, 16).permute(1, 0)
    r = b.permute(1, 0).cumsum(0)
    return [p.cumsum(0).view(32), p.reshape(32).cumsum(0), r.t(),
            (r + c).view(2, 16).cumsum(1)]


@pytest.mark.parametrize("target", TARGETS)
def test_views_of_a_static_program_reinterpret_memory_with_the_same_results(target):
    """In a program whose every value has the same layout at each call (static), a view
    run through torch is made as a reinterpretation of its input's memory, with the
    sizes, strides and storage offset (relative to the input's) of the first call, a
    view of a view from the chain's first value. The results are torch's at every call,
    for inputs whose storage offsets differ from call to call (Dynamo does not guard
    them); a reshape that had to copy stays a reshape, and a view the caller gets is
    torch's own (with its `_base`)."""
    g = parse(_STATIC_VIEWS)
    generated = Program(make_plan(g, "none", target), target=target, static=True)
    interpreted = Program(make_plan(g, "none", target), target=target, static=True)
    interpreted.use_generated(False)
    for offset in (0, 3, 1, 7):
        a = torch.randn(48)[offset:offset + 32].view(4, 8)
        b = torch.randn(40)[offset:offset + 32].view(4, 8).t()
        want = _static_views_reference(a, b)
        got, ref = generated([a, b]), interpreted([a, b])
        for x, y, w in zip(got, ref, want):
            torch.testing.assert_close(x, w, rtol=0, atol=0)
            torch.testing.assert_close(y, w, rtol=0, atol=0)
            assert x.shape == w.shape and x.stride() == w.stride()
        assert got[2]._base is not None     # the output view is torch's
    src = generated.generated_source
    # p made from c (v, read by nothing else, is not made at all), q and k; w and t are
    # graph outputs
    assert src.count("RT") == 3 and "(values[2], (16, 2), (1, 16), 0)" in src, src
    assert ".reshape(32)" in src, src      # the copying reshape
    assert ".t()" in src, src              # the output view


def test_kernel_outputs_of_a_static_program_are_allocated_without_the_dispatcher():
    """A static cpu kernel's outputs are allocated with torch's C helper for CPU tensors
    (the dispatcher's `torch.empty` costs ~3x as much per call), contiguous, as before."""
    if not shutil.which("g++") or wrapper._EMPTY_CPU is None:
        pytest.skip("needs g++ and torch._C._dynamo.guards._empty_strided_cpu")
    g = parse(_GRAPH)
    generated = Program(make_plan(g, "stitch", "cpu"), target="cpu", static=True)
    a, b = _inputs()
    for _ in range(3):
        out = generated([a, b])
    assert "ES" in generated.generated_source and "empty(" not in generated.generated_source
    assert out[0].is_contiguous()
    # exp in a kernel and in torch: each within glibc's bound of the true value (1 ulp),
    # summed over 8 terms by cumsum
    torch.testing.assert_close(out[0], torch.relu((a.exp().cumsum(1) + b).permute(1, 0)
                                                  .max(1).values), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_a_view_saved_for_the_backward_reinterprets_memory_a_seen_one_stays_torchs(target):
    """Outputs only the graph's backward reads (`free_outputs`: a training forward's
    saved values, such as the `alias`es of an LSTM's gates) are made like the views
    inside: reinterpretations of memory; a view the caller sees stays torch's view."""
    g = parse("""graph g(%a: f32[4,8]) {
  %c: f32[4,8] = cumsum.default(%a, 1)
  %s: f32[4,8] = alias.default(%c)
  %u: f32[8,4] = t.default(%c)
  return (%u, %s)
}""")
    prog = Program(make_plan(g, "none", target), target=target, static=True,
                   free_outputs=frozenset({1}))
    for _ in range(3):
        a = torch.randn(4, 8)
        u, s = prog([a])
        torch.testing.assert_close(s, a.cumsum(1), rtol=0, atol=0)
        torch.testing.assert_close(u, a.cumsum(1).t(), rtol=0, atol=0)
        assert s.stride() == (8, 1) and u._base is not None
    src = prog.generated_source
    assert src.count("RT") == 1 and ".t()" in src, src
    seen = Program(make_plan(g, "none", target), target=target, static=True)
    seen([torch.randn(4, 8)])
    seen([torch.randn(4, 8)])
    assert "RT" not in seen.generated_source


@pytest.mark.parametrize("target", TARGETS)
def test_the_elements_of_a_split_are_views_of_its_input_and_the_split_is_not_run(target):
    """A split (a QKV projection's, an LSTM's gates) read only through its elements: each
    element is a reinterpretation of the split's input, and the split itself is not run
    (a split through torch: about 10 us); the results are torch's at every call."""
    g = parse("""graph g(%a: f32[4,12]) {
  %c: f32[4,12] = cumsum.default(%a, 1)
  %s: (f32[4,4], f32[4,8]) = split_with_sizes.default(%c, [4, 8], 1)
  %x: f32[4,4] = getitem(%s, 0)
  %y: f32[4,8] = getitem(%s, 1)
  %u: f32[4,4] = cumsum.default(%x, 0)
  %v: f32[4,8] = cumsum.default(%y, 0)
  return (%u, %v)
}""")
    prog = Program(make_plan(g, "none", target), target=target, static=True)
    for _ in range(3):
        a = torch.randn(4, 12)
        x, y = a.cumsum(1).split([4, 8], 1)
        u, v = prog([a])
        torch.testing.assert_close(u, x.cumsum(0), rtol=0, atol=0)
        torch.testing.assert_close(v, y.cumsum(0), rtol=0, atol=0)
    src = prog.generated_source
    assert src.count("RT") == 2 and "(values[1], (4, 8), (12, 1), 4)" in src, src
    assert src.count("= F") == 3, src      # the three cumsums, no split


@pytest.mark.skipif("cpu" not in TARGETS, reason="needs a C++ compiler")
def test_split_elements_a_kernel_reads_are_views_of_the_split_input():
    """A kernel reading a split's elements directly (an LSTM cell's gates) gets them as
    views of the split's input, made in the generated code; the split is not run."""
    torch._dynamo.reset()
    sink = []

    def cell(x, w, c):
        i, f, g, o = (x @ w).chunk(4, 1)
        c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c2), c2
    comp = torch.compile(cell, backend=fusionstitch.backend(target="cpu", _sink=sink))
    with torch.no_grad():
        for _ in range(3):
            x, w, c = torch.randn(2, 8), torch.randn(8, 32), torch.randn(2, 8)
            for got, want in zip(comp(x, w, c), cell(x, w, c)):
                torch.testing.assert_close(got, want)
    [src] = [s.program.generated_source for g in sink for s in g.specialisations.values()]
    assert src.count("RT") == 4 and "(2, 8), (32, 1), 24)" in src, src
    assert src.count("= F") == 1, src       # the GEMM alone: no split


@pytest.mark.skipif("cpu" not in TARGETS, reason="needs a C++ compiler")
def test_a_view_read_only_by_launches_is_its_source_and_one_torch_reads_is_made():
    """A launch takes a buffer's data pointer only (its sizes and strides are the syms
    fixed at the first call): a view at offset 0 that only written-out launches read is
    its source in the generated code, no reinterpretation made; a view torch reads is,
    and so is the view itself where a step's `run` was replaced (a profiler, a test)."""
    g = parse("""graph g(%a: f32[4,8]) {
  %c: f32[4,8] = cumsum.default(%a, 1)
  %u: f32[8,4] = view.default(%c, [8, 4])
  %e: f32[8,4] = neg.default(%u)
  %v: f32[8,4] = view.default(%c, [8, 4])
  %w: f32[8,4] = cumsum.default(%v, 0)
  return (%e, %w)
}""")
    prog = Program(make_plan(g, "stitch", "cpu"), target="cpu", static=True)
    for _ in range(3):
        a = torch.randn(4, 8)
        e, w = prog([a])
        c = a.cumsum(1)
        torch.testing.assert_close(e, -c.view(8, 4), rtol=0, atol=0)
        torch.testing.assert_close(w, c.view(8, 4).cumsum(0), rtol=0, atol=0)
    src = prog.generated_source
    assert re.search(r"values\[\d+\] = values\[\d+\]\n", src), src
    # the view torch reads, and the view made only for a replaced `run`
    assert src.count("RT") == 2, src
    [step] = prog.kernel_steps.values()
    seen = []
    run = step.run

    def wrapped(buffers, syms):
        seen.append([tuple(b.shape) for b in buffers])
        return run(buffers, syms)
    step.run = wrapped
    a = torch.randn(4, 8)
    e, _ = prog([a])
    torch.testing.assert_close(e, -a.cumsum(1).view(8, 4), rtol=0, atol=0)
    assert seen == [[(8, 4), (8, 4)]], "a wrapper of `run` sees the view itself"


@pytest.mark.skipif("cpu" not in TARGETS, reason="needs a C++ compiler")
@pytest.mark.parametrize("reuse", ["1", "0"])
def test_a_dead_kernel_output_only_launches_read_gives_its_memory_to_a_later_one(
        monkeypatch, reuse):
    """As Inductor's wrapper reuses buffers: an output of a written-out launch that only
    such launches read (an LSTM's cell state), once dead, is the memory of a later
    output of its shape and dtype; the same numbers, and what the caller gets is never
    written by a later call. FUSIONSTITCH_REUSE=0 allocates every output."""
    monkeypatch.setenv("FUSIONSTITCH_REUSE", reuse)
    torch._dynamo.reset()
    sink = []

    def cells(xs, w, u, h, c):
        for x in xs:
            i, f, g, o = (x @ w + h @ u).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return h, c
    comp = torch.compile(cells, backend=fusionstitch.backend(target="cpu", _sink=sink))
    seen = []
    with torch.no_grad():
        for _ in range(4):
            args = (torch.randn(4, 2, 8), torch.randn(8, 32), torch.randn(8, 32),
                    torch.randn(2, 8), torch.randn(2, 8))
            got = comp(*args)
            for g, w in zip(got, cells(*args)):
                torch.testing.assert_close(g, w)
            seen.append([(t, t.clone()) for t in got])
    for outs in seen:       # no later call wrote into an earlier call's outputs
        for t, value in outs:
            assert torch.equal(t, value)
    [src] = [s.program.generated_source for g in sink for s in g.specialisations.values()]
    taken = re.findall(r"= (free\d+_\d+)$", src, re.M)
    released = re.findall(r"^\s*(free\d+_\d+) = values\[\d+\]$", src, re.M)
    assert sorted(taken) == sorted(released), src       # no release left unused
    assert bool(taken) == (reuse == "1"), src


def test_library_ops_with_a_torch_function_of_their_own_call_it_with_the_same_results():
    """convolution, mm, addmm, bmm, baddbmm, index_put, embedding, max pooling, CPU
    attention: the generated code calls torch's function
    (an unboxed call; the operator object converts every argument first), which is the
    same overload: the same numbers, bitwise, with keyword arguments too."""
    from fusionstitch.runtime.wrapper import direct
    aten = torch.ops.aten
    x, w = torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3)
    a, b, c = torch.randn(4, 6), torch.randn(6, 5), torch.randn(5)
    A, B, C = torch.randn(2, 4, 6), torch.randn(2, 6, 5), torch.randn(2, 4, 5)
    cases = [
        (aten.convolution.default, (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
        (aten.mm.default, (a, b), {}),
        (aten.addmm.default, (c, a, b), {"beta": 0.5, "alpha": 2.0}),
        (aten.bmm.default, (A, B), {}),
        (aten.baddbmm.default, (C, A, B), {"beta": 2.0, "alpha": 0.5}),
        (aten.index_put.default, (torch.zeros(5, 3), [torch.tensor([0, 4, 0, -1])],
                                  torch.randn(4, 3), True), {}),
        (aten.embedding.default, (torch.randn(7, 3), torch.tensor([[1, 6], [0, 1]])), {}),
        (aten.max_pool2d_with_indices.default, (x, [3, 3], [2, 2], [1, 1]), {}),
        (aten._scaled_dot_product_flash_attention_for_cpu.default,
         (A[:, None], A[:, None], A[:, None], 0.0, True),
         {"attn_mask": None, "scale": 0.3}),
    ]
    for op, args, kwargs in cases:
        fn = direct(op)
        assert fn is not op._op, op
        got, want = fn(*args, **kwargs), op(*args, **kwargs)
        for g, w in zip(*(r if isinstance(r, tuple) else (r,) for r in (got, want))):
            assert torch.equal(g, w), op
