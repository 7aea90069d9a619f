"""Split reductions (targets/triton/split.py): few long rows spread over many programs, partials
in a workspace, combined by a second launch of the same kernel. On Triton's interpreter
(which splits into TARGET_PROGRAMS_INTERPRET programs), compiled for sm_90, and on a GPU."""
import math

import pytest
import torch
import torch.nn.functional as F

import fusionstitch
from fusionstitch.targets.triton import split as S
from fusionstitch.codegen.lower import lower_group
from tests.codegen._interpret import _strict, run  # noqa: F401 (_strict: autouse fixture)
from tests.codegen._sm90 import compile_sm90


@pytest.fixture
def splits(monkeypatch):
    """The split factors launches chose (so a test can say that it split)."""
    chosen = []
    real = S.split_factor
    monkeypatch.setattr(S, "split_factor", lambda *a: chosen.append(real(*a)) or chosen[-1])
    return chosen


def _x(*shape, dtype=torch.float32):
    x = torch.randn(*shape).to(dtype)
    x.view(-1)[::97] *= 16          # a few large values
    return x


def _close(got, ref, rtol=1e-5, atol=1e-5):
    got = got if isinstance(got, (tuple, list)) else (got,)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=rtol, atol=atol, equal_nan=True)


CASES = {
    # a loss: one row of a million elements, reduced to a scalar, then divided
    "mse_scalar": (lambda x: F.mse_loss(x, torch.full_like(x, 0.5)), lambda: (_x(1 << 20),)),
    "sum_max_min": (lambda x: (x.sum(), x.amax(), x.amin()), lambda: (_x(300, 257),)),
    # column sums (a bias gradient, a batch-norm statistic): few columns, long
    "columns": (lambda x: (x.sum(0), (x * x).mean(0)), lambda: (_x(40000, 3),)),
    # a loop that stores every element and reduces them: each element stored once
    "store_and_reduce": (lambda x: ((x * 0.25).exp(), (x * 0.25).exp().sum()),
                         lambda: (_x(70001),)),
    "nan_propagates": (lambda x: (x.amax(), x.amin(0), x.sum()),
                       lambda: (_x(50000, 2).index_put_((torch.tensor([123]),),
                                                        torch.tensor(float("nan"))),)),
    "ints": (lambda i: (i.sum(), i.amax(0)),
             lambda: (torch.randint(-1000, 1000, (33333, 2)),)),
    "bf16": (lambda x: (x.float().sum(), x.amax()), lambda: (_x(1 << 18, dtype=torch.bfloat16),)),
    # a split reduction packed beside an unrelated elementwise op (kernel packing)
    "packed": (lambda x, w: (x.sum(), w * 3 + 1), lambda: (_x(1 << 18), _x(1000))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_split_matches_eager(case, splits):
    fn, make = CASES[case]
    args = make()
    got, st = run(fn, *args)
    rtol = 1e-2 if case == "bf16" else 1e-4
    _close(got, fn(*args), rtol=rtol, atol=1e-4)
    assert st["kernels_launched"] >= 1 and st["fallbacks"] == 0
    assert max(splits) > 1, f"{case}: no launch split ({splits})"


@pytest.mark.parametrize("case", ["mse_scalar", "columns", "store_and_reduce"])
def test_unsplit_gives_the_same_numbers(case, monkeypatch, splits):
    fn, make = CASES[case]
    args = make()
    split_got, _ = run(fn, *args)
    torch._dynamo.reset()
    monkeypatch.setattr(S, "TARGET_PROGRAMS_INTERPRET", 1)   # one program a block: no split
    plain_got, _ = run(fn, *args)
    assert splits[-1] == 1
    # two summation orders of n float32 terms (tree sums) differ by at most
    # 2 * ceil(log2 n) * eps * sum |term|: relative 1e-5 holds for terms of one sign; the
    # column sums of signed values (cancellation) get that absolute bound
    x = args[0]
    n = x.shape[0]
    atol = 2 * math.ceil(math.log2(n)) * torch.finfo(torch.float32).eps * \
        float(x.double().abs().sum(0).max()) if case == "columns" else 1e-5
    _close(split_got, plain_got, rtol=1e-5, atol=atol)


def test_split_factor_rule():
    gpu = dict(persistent=False, interpret=False)
    # a scalar of 2**24 elements: 256 programs (two per multiprocessor), a power of two
    assert S.split_factor(1, 1 << 24, 1, 2048, **gpu) == 256
    # enough rows already: no split
    assert S.split_factor(4096, 1 << 20, 2, 2048, **gpu) == 1
    # 64 columns of 100k (32 blocks of 2): 8 programs a block
    assert S.split_factor(64, 100_000, 2, 2048, **gpu) == 8
    # short rows: each program must loop over MIN_BLOCKS_PER_PROGRAM blocks
    assert S.split_factor(1, 4 * 2048 - 1, 1, 2048, **gpu) == 1
    assert S.split_factor(1, 8 * 2048, 1, 2048, **gpu) == 2
    # persistent rows, empty launches: never
    assert S.split_factor(1, 1 << 24, 1, 2048, persistent=True, interpret=False) == 1
    assert S.split_factor(0, 1 << 24, 1, 2048, **gpu) == 1
    for xn in (1, 3, 17, 100):
        for rn in (10_000, 123_457, 1 << 22):
            f = S.split_factor(xn, rn, 2, 1024, **gpu)
            assert f & (f - 1) == 0 and 1 <= f <= S.MAX_SPLIT
            if f > 1:
                assert S.chunk(rn, f, 1024) * f >= rn and S.chunk(rn, f, 1024) % 1024 == 0


def test_only_one_loop_of_sum_max_min_splits():
    def lower(fn, *args):
        rep = fusionstitch.explain(fn, *args, strategy="stitch", target="interpret")
        [g] = [g.plan.graph for g in rep.graphs]
        ops = [n.name for n in g.nodes if n.op not in ("parameter", "constant")]
        return lower_group(g, ops, "k")
    assert S.splittable(lower(lambda x: x.sum(), torch.randn(64, 64)).components[0])
    # softmax: a later loop needs the whole row's max and sum
    k = lower(lambda x: torch.softmax(x, -1), torch.randn(4, 64))
    assert not S.splittable(k.components[0])


def test_split_source_compiles_for_sm90():
    def f(x):
        return x.sum(), (x * 2).exp()
    rep = fusionstitch.explain(f, torch.randn(1 << 16), strategy="stitch", target="cuda")
    [g] = [g.plan.graph for g in rep.graphs]
    k = lower_group(g, [n.name for n in g.nodes if n.op not in ("parameter", "constant")], "k")
    tag = next(i for i, c in enumerate(k.components) if S.splittable(c))
    for meta in ({f"SPLIT{tag}": 8, "STAGE": 1}, {f"SPLIT{tag}": 8, "STAGE": 2},
                 {f"SPLIT{tag}": 1, "STAGE": 2}):
        src, out = compile_sm90(k, **meta)
        assert "cubin" in out.asm
    assert "ws0_" in src or f"ws{tag}_" in src


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape,dim", [((1 << 24,), None), ((100_000, 64), 0),
                                       ((64, 100_000), 1), ((3, 1 << 20), 1)])
def test_split_on_the_gpu(shape, dim, splits):
    x = torch.randn(*shape, device="cuda")

    def f(t):
        return (t.sum() if dim is None else t.sum(dim)), t.abs().amax()
    fn = torch.compile(f, backend=fusionstitch.backend(target="cuda"))
    got, ref = fn(x), f(x)
    _close(got, ref, rtol=1e-4, atol=1e-3)
    assert max(splits) > 1


def test_explain_shows_the_split():
    """The template explain() prints names the split at the lowering-time sizes."""
    rep = fusionstitch.explain(lambda x: F.mse_loss(x, torch.zeros_like(x)),
                               torch.randn(1 << 20), target="cuda")
    assert "[grid x<1, split 128 loop r<" in str(rep)
    rep = fusionstitch.explain(lambda x: torch.softmax(x, -1), torch.randn(8, 64),
                               target="cuda")
    assert "persistent r<" in str(rep) and "split" not in str(rep)
