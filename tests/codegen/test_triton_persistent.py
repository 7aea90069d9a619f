"""Both variants of a reduce component (targets/triton/printer.py): persistent (the row loaded once
and kept in registers) and looped (the row re-read by each loop over r), against eager.

Every case runs with the rule as it is (short rows: persistent) and with the limit
forced below every row (looped), on Triton's interpreter; the gpu tier runs the same
cases and longer rows on the GPU. A failure prints the case, shape and variant.
"""
import pytest
import torch
import torch.nn.functional as F

import fusionstitch
from fusionstitch.targets.triton import printer as T
from tests.codegen._interpret import _strict  # noqa: F401 (autouse fixture)


def _rows(shape, dtype=torch.float32):
    x = torch.randn(shape).to(dtype)
    if x.numel():
        x.view(-1)[:: max(1, x.shape[-1] + 3)] *= 8     # a few large values per row
    return (x,)


def _with_nans(shape, dtype=torch.float32):
    (x,) = _rows(shape, dtype)
    if x.shape[0] > 1 and x.shape[-1]:
        x[1, x.shape[-1] // 2] = float("nan")            # one NaN in row 1
        x[-1, :] = float("nan")                          # a row of NaNs
    return (x,)


def _norm_args(shape, dtype=torch.float32):
    n = shape[-1]
    return _rows(shape, dtype) + (torch.randn(n).to(dtype), torch.randn(n).to(dtype))


def _xent_args(shape, dtype=torch.float32):
    return _rows(shape, dtype) + (torch.randint(0, max(shape[-1], 1), shape[:-1]),)


def _ints(shape, dtype=torch.float32):
    return (torch.randint(-50, 50, shape, dtype=torch.int32), torch.rand(shape) > 0.7)


CASES = {
    "softmax": (lambda x: torch.softmax(x * 2, -1), _rows),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), _rows),
    "layernorm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), _norm_args),
    "xent": (lambda x, t: (F.cross_entropy(x, t, reduction="none"),
                           -(torch.log_softmax(x, -1) * torch.softmax(x * 0.5, -1)).sum(-1)),
             _xent_args),
    "var_mean": (lambda x: torch.var_mean(x, -1, correction=1) + (x.sum(-1),), _rows),
    "max_nan": (lambda x: (x.amax(-1), x.amin(-1), torch.softmax(x, -1)), _with_nans),
    "int_rows": (lambda a, m: (a.sum(-1), a.amax(-1), m.any(-1), m.sum(-1), a * 2 - a.sum(-1,
                 keepdim=True)), _ints),
}
HALF_CASES = ("softmax", "layernorm", "max_nan")
SHAPES = [(5, 37), (3, 1), (4, 0), (0, 7)]


@pytest.fixture
def decisions(monkeypatch):
    """The variant each launch of a reduce component took (True: persistent)."""
    seen = []
    rule = T.persistent

    def spy(rnumel, rblock):
        seen.append(rule(rnumel, rblock))
        return seen[-1]
    monkeypatch.setattr(T, "persistent", spy)
    return seen


def check(name, shape, variant, target, monkeypatch, dtype=torch.float32):
    """`name` compiled for `target` with the variant forced, against eager."""
    if variant == "looped":
        monkeypatch.setattr(T, "PERSISTENT_RNUMEL", -1)
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make(shape, dtype)
    try:
        ref = fn(*[a.float() if a.dtype in (torch.float16, torch.bfloat16) else a
                   for a in args])
    except (RuntimeError, IndexError):
        pytest.skip(f"eager rejects {name} at {shape}")
    dev = "cuda" if target == "cuda" else "cpu"
    compiled = torch.compile(fn, backend=fusionstitch.backend(target=target))
    fusionstitch.reset_stats()
    got = compiled(*[a.to(dev) for a in args])
    got = got if isinstance(got, tuple) else (got,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    where = f"case {name} shape {shape} {dtype} variant {variant} target {target}"
    if 0 not in shape:   # a reduction over an empty dim has no kernel yet: torch runs it
        assert fusionstitch.stats()["fallbacks"] == 0, where
    for g, r in zip(got, ref):
        assert g.shape == r.shape, where
        if dtype != torch.float32 and g.dtype in (torch.float16, torch.bfloat16):
            r = r.to(g.dtype)
        assert g.dtype == r.dtype, where
        torch.testing.assert_close(g.cpu().float() if g.is_floating_point() else g.cpu(),
                                   r.float() if r.is_floating_point() else r,
                                   equal_nan=True, msg=lambda m: f"{where}: {m}", **tol)


def _chose(decisions, variant, shape):
    if 0 in shape:      # no programs, or empty rows the plan may leave to a flat kernel
        return
    assert decisions, "no reduce component was launched"
    assert all(d == (variant == "persistent") for d in decisions), decisions


@pytest.mark.parametrize("variant", ["persistent", "looped"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_interpret_matches_eager(name, shape, variant, decisions, monkeypatch):
    check(name, shape, variant, "interpret", monkeypatch)
    _chose(decisions, variant, shape)


@pytest.mark.parametrize("variant", ["persistent", "looped"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", HALF_CASES)
def test_interpret_half_inputs_accumulate_in_fp32(name, dtype, variant, decisions, monkeypatch):
    check(name, (4, 45), variant, "interpret", monkeypatch, dtype)
    _chose(decisions, variant, (4, 45))


@pytest.mark.parametrize("rnumel,persistent", [(2048, True), (2049, False)])
def test_rows_up_to_the_limit_run_persistent(rnumel, persistent, decisions, monkeypatch):
    """The default rule: a row of PERSISTENT_RNUMEL elements is kept in registers, one more
    is looped over (the interpreter's block would hold it: the limit decides)."""
    assert T.PERSISTENT_RNUMEL == 2048
    check("softmax", (2, rnumel), "default", "interpret", monkeypatch)
    assert decisions == [persistent]
    rep = fusionstitch.explain(CASES["softmax"][0], torch.randn(2, rnumel), target="interpret")
    assert ("persistent r<" if persistent else "loop r<") in str(rep)


def test_rows_longer_than_a_block_loop_over_several_blocks(decisions, monkeypatch):
    """With a tiny block the looped variant runs several iterations per row."""
    monkeypatch.setattr(T, "block_sizes", lambda c, xn, rn, interpret: (2, 8))
    check("layernorm", (3, 37), "default", "interpret", monkeypatch)
    assert decisions == [False]


# The GPU tier: the same cases on the device, and rows around the GPU's block limit.
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("variant", ["persistent", "looped"])
@pytest.mark.parametrize("shape", SHAPES + [(64, 1000), (8, 2048), (8, 2049), (4, 5000)],
                         ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_matches_eager(name, shape, variant, decisions, monkeypatch):
    check(name, shape, variant, "cuda", monkeypatch)
    if shape[-1] <= T.PERSISTENT_RNUMEL:
        _chose(decisions, variant, shape)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("variant", ["persistent", "looped"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", HALF_CASES)
def test_gpu_half_inputs_accumulate_in_fp32(name, dtype, variant, decisions, monkeypatch):
    check(name, (64, 1000), variant, "cuda", monkeypatch, dtype)
    _chose(decisions, variant, (64, 1000))
