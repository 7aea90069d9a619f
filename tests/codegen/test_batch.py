"""Block composition with small GEMMs (codegen/batch.py), run by Triton's interpreter.

Each case compiles a function with the stitch planner for target="interpret",
checks it against eager (fp32: 1e-5 relative; f16/bf16: against fp32 math), and
checks that the GEMMs ran inside generated kernels (no library call) with
kernels_launched == explain().num_kernels.
"""
import pytest
import torch
import torch.nn.functional as F

import fusionstitch
from fusionstitch.codegen.kernel import kernel_text, template
from fusionstitch.codegen.lower import Unsupported, lower_group
from fusionstitch.targets.triton.printer import triton_source
from tests.codegen._interpret import _strict, run  # noqa: F401 (_strict: autouse fixture)
from tests.codegen._sm90 import compile_sm90
from fusionstitch.fusion import make_plan
from fusionstitch.fusion.plan import KERNEL
from fusionstitch.schedule.propagate import FUSIBLE_DOTS


def check(fn, *args, kernels=1, rtol=1e-5, atol=1e-5):
    """Run `fn` compiled, compare with eager, and check the launch counts."""
    got, st = run(fn, *args)
    ref = fn(*args)
    got = got if isinstance(got, (tuple, list)) else (got,)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=rtol, atol=atol)
    rep = fusionstitch.explain(fn, *args, target="interpret")
    assert st["kernels_launched"] == rep.num_kernels, str(rep)
    assert st["library_calls"] == rep.num_library_calls == 0, str(rep)
    if kernels is not None:
        assert st["kernels_launched"] == kernels, str(rep)
    return rep


def library_gemms(rep):
    return [n for g in rep.graphs for grp in g.plan.groups if grp.kind != KERNEL
            for n in grp.nodes if g.plan.graph[n].op in FUSIBLE_DOTS]


def _graph(fn, *args):
    rep = fusionstitch.explain(fn, *args, strategy="none", target="interpret")
    return rep.graphs[0].plan.graph


def _ops(g):
    return [n.name for n in g.nodes if n.op not in ("parameter", "constant")]


def test_mm_with_elementwise_prologue_and_epilogue():
    def f(a, b):
        return torch.relu((a * 2 - 1) @ torch.tanh(b)) + 0.5
    check(f, torch.randn(8, 16), torch.randn(16, 12))


def test_addmm_linear_with_gelu():
    lin = torch.nn.Linear(12, 20)

    def f(x):
        return F.gelu(lin(x))
    with torch.no_grad():
        check(f, torch.randn(6, 12))


def test_addmm_alpha_beta():
    def f(c, a, b):
        return torch.addmm(c, a, b, beta=0.5, alpha=-2.0).exp()
    check(f, torch.randn(5, 7), torch.randn(5, 3), torch.randn(3, 7))


@pytest.mark.parametrize("batch", [1, 3])
def test_bmm_with_prologue_epilogue(batch):
    def f(a, b, s):
        return torch.sigmoid(torch.bmm(a * s, b.exp()) * 3)
    check(f, torch.randn(batch, 6, 9), torch.randn(batch, 9, 4), torch.randn(batch, 1, 9))


@pytest.mark.parametrize("m,n,k", [(7, 13, 5), (1, 17, 3), (33, 2, 64), (64, 64, 64)])
def test_odd_and_non_square_sizes(m, n, k):
    def f(a, b):
        return (a @ b).neg()
    check(f, torch.randn(m, k), torch.randn(k, n), rtol=1e-4, atol=1e-4)


def test_transposed_and_strided_operands():
    def f(a, b, c):
        return torch.bmm(a.transpose(1, 2), b[:, ::2, :]) + c.t()
    a = torch.randn(2, 5, 7)             # read as [2, 7, 5]
    b = torch.randn(2, 10, 6)            # every other row: [2, 5, 6]
    c = torch.randn(6, 7)                # a transposed broadcast operand
    check(f, a, b, c)


def test_gemm_feeding_softmax():
    def f(a, b):
        return torch.softmax(a @ b, dim=-1)
    check(f, torch.randn(9, 16), torch.randn(16, 11))


@pytest.mark.parametrize("batch", [1, 4])
def test_attention_softmax_feeding_bmm(batch):
    def f(q, k, v):
        s = torch.bmm(q, k.transpose(1, 2)) * 0.25
        return torch.bmm(torch.softmax(s, -1), v)
    q, k, v = (torch.randn(batch, 5, 8) for _ in range(3))
    rep = check(f, q, k, v)
    assert "stage dot" in str(rep) and "stage reduce" in str(rep)


def test_gemm_chain_with_layer_norm_between():
    def f(x, w1, w2):
        h = F.layer_norm(x @ w1, (w1.shape[1],))
        return F.relu(h) @ w2
    check(f, torch.randn(10, 16), torch.randn(16, 24), torch.randn(24, 8), rtol=1e-4,
          atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_accumulate_in_fp32(dtype):
    def f(a, b, c):
        return torch.relu(torch.bmm(a, b) + c)
    a, b, c = torch.randn(3, 7, 20), torch.randn(3, 20, 9), torch.randn(3, 7, 9)
    half = [t.to(dtype) for t in (a, b, c)]
    got, st = run(f, *half)
    assert got.dtype == dtype and st["library_calls"] == 0 and st["kernels_launched"] == 1
    ref = f(*[t.float() for t in half])
    torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=2e-2)


def test_training_step_gradients_through_a_fused_gemm():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 5))
    x = torch.randn(6, 12, requires_grad=True)
    y = torch.randint(0, 5, (6,))

    def f(x):
        return F.cross_entropy(mlp(x), y)
    compiled = torch.compile(f, backend=fusionstitch.backend(target="interpret"))
    fusionstitch.reset_stats()
    loss = compiled(x)
    loss.backward()
    got = [x.grad.clone()] + [p.grad.clone() for p in mlp.parameters()]
    rep = fusionstitch.explain(f, x, target="interpret")
    assert fusionstitch.stats()["kernels_launched"] == rep.num_kernels
    assert library_gemms(rep) == [], str(rep)     # (the loss's scatter stays one)
    x.grad = None
    mlp.zero_grad()
    ref_loss = f(x)
    ref_loss.backward()
    ref = [x.grad] + [p.grad for p in mlp.parameters()]
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)


def test_kernel_text_template_and_source_show_the_stages():
    def f(a, b):
        return torch.softmax(a @ b, -1) * 2
    g = _graph(f, torch.randn(4, 8), torch.randn(8, 6))
    k = lower_group(g, _ops(g), "k")
    text = kernel_text(k)
    assert "batch b < 1" in text and "stage 0: dot" in text and "scratch s0" in text
    assert "lhs at (x, r):" in text and "dot(" in text
    assert template(k).startswith("[grid b<1, stage dot") and " S" in template(k)
    src = triton_source(k, interpret=False)[1]
    assert "tl.dot(" in src and 'input_precision="ieee"' in src and "tl.debug_barrier()" in src


def test_a_reduction_across_gemm_entries_takes_whole_groups_per_program():
    """A softmax over the head dim of [b, h, s, s] scores mixes the bmm's entries (b*h):
    a program runs the h entries of one b (a z loop in the dot stage), so the softmax
    stays inside it."""
    def f(q, k):
        s = torch.bmm(q, k.transpose(1, 2)).view(2, 3, 4, 4)
        return torch.softmax(s, 1).sum(-1)
    q, k = torch.randn(6, 4, 8), torch.randn(6, 4, 8)
    rep = check(f, q, k)
    assert " z<" in str(rep)
    g = _graph(f, q, k)
    (comp,) = lower_group(g, _ops(g), "k").components
    assert comp.kind == "batch" and comp.xnumel.value == 2


def test_a_read_of_another_programs_entry_is_not_generated():
    """Entry b reading entry b+1 of a staged bmm would race with the program writing it:
    Unsupported with the reason, and the planner keeps them apart (still exact)."""
    def f(a, b):
        c = torch.bmm(a, b)
        return torch.bmm(torch.cat([c[1:], c[:1]], 0), b)
    a, b = torch.randn(4, 5, 5), torch.randn(4, 5, 5)
    g = _graph(f, a, b)
    with pytest.raises(Unsupported, match="not provably in the program's own"):
        lower_group(g, _ops(g), "k")
    got, st = run(f, a, b)
    torch.testing.assert_close(got, f(a, b))
    rep = fusionstitch.explain(f, a, b, target="interpret")
    assert st["kernels_launched"] == rep.num_kernels
    # handed such a group, legalisation splits it into its ops (GEMMs: library calls)
    from fusionstitch.fusion.codegen_legal import legalize
    from fusionstitch.fusion.plan import LIBRARY, FusionPlan, Group
    plan = legalize(FusionPlan(g, (Group(0, tuple(_ops(g)), KERNEL, "block"),), "stitch"),
                    "interpret")
    assert len(plan.groups) == len(_ops(g))
    assert all(grp.kind == LIBRARY for grp in plan.groups if g[grp.nodes[0]].op in FUSIBLE_DOTS)


def test_an_output_laid_out_across_programs_is_stored_from_its_source():
    """Attention's [b*h, s, d] result viewed as [b*s, h*d]: program (b, h) owns strided rows
    of the output; it stores them from its own part of the value GEMM."""
    def f(q, k, v):
        o = torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)), -1), v) * 2
        return o.view(2, 3, 5, 8).permute(0, 2, 1, 3).reshape(10, 24)
    rep = check(f, *(torch.randn(6, 5, 8) for _ in range(3)))
    assert "grid b<" in str(rep)


def test_integer_and_double_gemms_stay_library_calls():
    def f(a, b):
        return (a @ b) + 1
    for dtype in (torch.int64, torch.float64):
        a, b = torch.randint(-3, 3, (4, 5)).to(dtype), torch.randint(-3, 3, (5, 6)).to(dtype)
        g = _graph(f, a, b)
        with pytest.raises(Unsupported, match="GEMMs are generated for f32"):
            lower_group(g, _ops(g), "k")
        got, st = run(f, a, b)
        torch.testing.assert_close(got, f(a, b))
        assert st["library_calls"] == 1


def test_cpu_target_keeps_gemms_library_calls():
    """The C++ printer has no GEMM stages: cpu plans never put a GEMM in a kernel, and
    legalisation splits a batch group handed to it."""
    from fusionstitch.fusion.codegen_legal import legalize
    from fusionstitch.fusion.plan import FusionPlan, Group

    def f(a, b):
        return torch.relu(a @ b) * 2
    g = _graph(f, torch.randn(4, 8), torch.randn(8, 6))
    for target, fused in (("cpu", False), ("cuda", True), ("interpret", True)):
        plan = make_plan(g, "stitch", target)
        in_kernel = any(g[n].op in FUSIBLE_DOTS for grp in plan.groups if grp.kind == KERNEL
                        for n in grp.nodes)
        assert in_kernel == fused, (target, plan.to_text())
    one = FusionPlan(g, (Group(0, tuple(_ops(g)), KERNEL, "block"),), "stitch")
    for target, groups in (("cpu", 3), ("interpret", 1)):
        assert len(legalize(one, target).groups) == groups


def test_packed_with_an_independent_component():
    def f(a, b, c):
        return torch.relu(a @ b), c.sum(-1) * 2
    check(f, torch.randn(4, 8), torch.randn(8, 6), torch.randn(5, 7), kernels=None)


def test_tiles_smaller_than_the_entry_loop_over_it(monkeypatch):
    """With GPU-like blocks (64 x 64 dot tiles, 32-deep k slices) and small stage blocks the
    printer's loops over x, y and r tiles run; the numbers stay the same."""
    from fusionstitch.targets.triton import printer as T
    gpu_dot = T.dot_block
    monkeypatch.setattr(T, "dot_block", lambda n, dim, interpret: min(gpu_dot(n, dim, False),
                                                                      16 if dim == "R" else 32))
    monkeypatch.setattr(T, "block_sizes", lambda c, xn, rn, interpret: (8, 4))

    def f(a, b):
        return torch.softmax(torch.relu(a @ b), -1) * 2
    check(f, torch.randn(40, 50), torch.randn(50, 36), rtol=1e-4, atol=1e-6)


def test_gpu_source_compiles_for_sm90():
    """No GPU in CI: Triton still compiles the cuda source to a cubin, which catches
    type errors of loop-carried values, tl.dot shapes and the like. fp32 GEMMs use the
    "ieee" precision (no TF32); f16 operands go to tl.dot as they are (tensor cores)."""
    def attention(q, k, v):
        s = torch.bmm(q * 2, k.transpose(1, 2)) * 0.25
        return torch.bmm(torch.softmax(s, -1), v).sum(-1)
    g = _graph(attention, *(torch.randn(3, 5, 8) for _ in range(3)))
    src, out = compile_sm90(lower_group(g, _ops(g), "k"))
    assert "cubin" in out.asm and src.count('input_precision="ieee"') == 2

    def half(a, b):
        return torch.relu(torch.bmm(a, b)) * 2
    g = _graph(half, torch.randn(3, 7, 20).half(), torch.randn(3, 20, 9).half())
    src, out = compile_sm90(lower_group(g, _ops(g), "k"))
    assert "input_precision" not in src and "mma" in out.asm["ptx"]


def test_in_place_writes_see_the_reads_of_batch_stages():
    """A kernel packing a GEMM that reads w with the update of w: storing the new w into
    w's memory would race with the GEMM's reads, and runtime/inplace.py must see them
    (they live in the batch component's stages)."""
    from fusionstitch.runtime.inplace import kernel_hazard

    def f(w, x):
        return torch.relu(x @ w), w * 0.9
    g = _graph(f, torch.randn(8, 6), torch.randn(4, 8))
    k = lower_group(g, _ops(g), "k")
    assert [c.kind for c in k.components] == ["batch", "flat"]
    new_w = next(b for b in k.outputs if g[b.value].op == "mul.Tensor")
    w = g[new_w.value].args[0].name
    assert kernel_hazard(k, w, new_w) == "another part of the kernel reads the input"


# Staged single-program kernels (schedule.propagate.component_space(staged=True)): reductions
# of different shapes run as stages of one program, without GEMMs.

def test_staged_row_losses_summed_to_a_scalar():
    def f(x, t):
        logp = torch.log_softmax(x, 1)
        return -(logp * t).sum(1).mean()
    x, t = torch.randn(64, 10), torch.softmax(torch.randn(64, 10), 1)
    rep = check(f, x, t, kernels=1)
    (g,) = [g for gr in rep.graphs for g in gr.plan.groups if g.kind == KERNEL]
    assert g.composition == "block"


def test_staged_row_gradient_and_its_column_sum():
    def f(x, w):
        y = torch.softmax(x * w, 1)
        return y.sum(0), y * 2
    check(f, torch.randn(48, 12), torch.randn(12), kernels=1)


def test_staged_kernel_reads_non_contiguous_inputs():
    def f(x):
        return (x - x.amax(1, keepdim=True)).exp().sum(1).log().sum()
    check(f, torch.randn(10, 33).t(), kernels=1)


def test_staged_gpu_source_compiles_for_sm90():
    def f(x, t):
        return -(torch.log_softmax(x, 1) * t).sum(1).mean()
    g = _graph(f, torch.randn(64, 10), torch.randn(64, 10))
    k = lower_group(g, _ops(g), "k")
    assert [c.kind for c in k.components] == ["batch"]
    src, out = compile_sm90(k)
    assert "cubin" in out.asm and "debug_barrier" in src
