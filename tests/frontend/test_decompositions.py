"""Every decomposition the frontend relies on is checked against the op it stands for.

AOTAutograd replaces each op of `fusionstitch.frontend.decompositions()` by its
decomposition below autograd, so the op's backward reads the decomposition's outputs:
one output of the wrong kind (torch's decomposition of the CPU flash attention returned
the attention matrix where the op returns the logsumexp) and every gradient is wrong
with nothing to see in the forward. Here each entry is checked (decomp_check.py):
outputs in count, shape, dtype and value, and the gradients of a forward and backward
run through it, against the op itself, in float64:

* with the samples of torch's OpInfo database: the first FUSIONSTITCH_DECOMP_SAMPLES of
  each OpInfo (default 2; `all` runs every sample, about 20 minutes on 2 cores), plus
  the samples that reach entries the first ones do not (`MORE_SAMPLES`);
* with hand-made samples (decomp_samples.py) for the entries OpInfo does not reach, and
  several for the normalisation layers, in float64 and float32;
* ops with no CPU kernel (cuDNN, MIOpen) by the structure of their outputs only.

`test_every_relied_on_decomposition_is_checked` fails when an entry is checked by none
of these (a new torch brings a new one: give it a sample, or leave the op whole).
"""
from __future__ import annotations

import functools
import os

import pytest
import torch

from decomp_check import (check_direct, check_meta, compare, name_of, relied_on, run_sample,
                          _tensors)
from decomp_samples import HAND, META_ONLY, overload
from fusionstitch.frontend.decompositions import KEEP_WHOLE, WRONG, decompositions

pytest.importorskip("expecttest")   # torch's OpInfo database imports it
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

TABLE = decompositions()
_knob = os.environ.get("FUSIONSTITCH_DECOMP_SAMPLES", "2")
SAMPLES = None if _knob == "all" else int(_knob)
# OpInfos whose first samples miss some entries: (OpInfo name, variant) -> sample count
MORE_SAMPLES = {
    ("arange", ""): 9, ("block_diag", ""): 3, ("cartesian_prod", ""): 3, ("corrcoef", ""): 3,
    ("diff", ""): 3, ("linspace", "tensor_overload"): 3, ("logspace", "tensor_overload"): 3,
    ("nn.functional.cross_entropy", ""): 3, ("_native_batch_norm_legit", ""): 10,
    ("nn.functional.pad", "reflect"): 10, ("nn.functional.pad", "replicate"): 10,
    ("nn.functional.interpolate", "nearest"): 15,
    ("nn.functional.interpolate", "nearest-exact"): 15, ("lerp", ""): 5,
    ("squeeze_copy", ""): 3, ("all", ""): 4, ("count_nonzero", ""): 4,
}


def _opinfos():
    return [op for op in op_db if torch.float64 in op.supported_dtypes("cpu")]


def _id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@functools.lru_cache(maxsize=None)
def _check_opinfo(key: str) -> tuple[frozenset, dict]:
    """(entries reached, {entry or "end to end": reason}) over the OpInfo's samples."""
    op = next(o for o in _opinfos() if _id(o) == key)
    count = SAMPLES if SAMPLES is None else max(
        SAMPLES, MORE_SAMPLES.get((op.name, op.variant_test_name), 0))
    hits, failures = set(), {}
    try:
        samples = op.sample_inputs("cpu", torch.float64, requires_grad=op.supports_autograd)
    except Exception:   # an OpInfo that cannot make samples here checks nothing
        return frozenset(), {}
    for i, s in enumerate(samples):
        if count is not None and i >= count:
            break
        ins = _tensors((s.input, s.args, s.kwargs))
        if any(t.layout != torch.strided for t in ins):
            continue
        result = run_sample(TABLE, lambda s=s: op(s.input, *s.args, **s.kwargs),
                            [t for t in ins if t.requires_grad])
        if result is None:
            continue
        hits |= result.hits
        for where, why in result.failures.items():
            failures.setdefault(where, f"sample {i}: {why}")
    return frozenset(hits), failures


@pytest.mark.parametrize("key", [_id(o) for o in _opinfos()])
def test_decompositions_on_opinfo_samples(key):
    _, failures = _check_opinfo(key)
    assert not failures, "\n".join(f"{k}: {v}" for k, v in failures.items())


@functools.lru_cache(maxsize=None)
def _check_hand(name: str):
    op = overload(name)
    args, kwargs = HAND[name](torch.float64)
    return check_direct(TABLE, op, args, kwargs)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(HAND))
def test_decompositions_on_hand_samples(name, dtype):
    op = overload(name)
    assert op in TABLE, f"{name}: no decomposition any more; drop its sample"
    if dtype == torch.float32:
        # float32: the structure (count, shapes, dtypes): values were judged in float64
        args, kwargs = HAND[name](dtype)
        with torch.no_grad():
            expected = op(*args, **kwargs)
            got = TABLE[op](*args, **kwargs)
        why = compare(expected, got, values=False)
        assert why is None, f"{name}: {why}"
        return
    failures = _check_hand(name).failures
    assert not failures, "\n".join(f"{name}: {k}: {v}" for k, v in failures.items())


@pytest.mark.parametrize("name", list(META_ONLY))
def test_decompositions_of_ops_without_cpu_kernel(name):
    op = overload(name)
    if name in WRONG:   # kept whole: check that the reason still holds in this torch
        from torch._decomp import core_aten_decompositions
        torch_table = dict(core_aten_decompositions())
        if op in torch_table:
            args, kwargs = META_ONLY[name](torch.float32)
            try:
                why = check_meta(torch_table, op, args, kwargs)
            except Exception as e:
                why = f"raises {type(e).__name__}"
            assert why is not None, f"{name}: torch's decomposition is right now; use it"
        assert op not in TABLE
        return
    args, kwargs = META_ONLY[name](torch.float32)
    why = check_meta(TABLE, op, args, kwargs)
    assert why is None, f"{name}: {why}"


def test_every_relied_on_decomposition_is_checked():
    checked = set()
    for o in _opinfos():
        checked |= _check_opinfo(_id(o))[0]
    for name in HAND:
        checked |= _check_hand(name).hits
    checked |= set(META_ONLY)
    missing = sorted(name_of(op) for op in relied_on(TABLE) if name_of(op) not in checked)
    assert not missing, ("decompositions with no check against their op (add a sample to "
                         f"decomp_samples.py, or keep the op whole): {missing}")


def test_ops_kept_whole_have_no_decomposition():
    assert not {name_of(op) for op in TABLE} & KEEP_WHOLE


def test_the_check_catches_a_decomposition_with_wrong_outputs():
    """torch's own decomposition of the CPU flash attention, which the frontend took
    before: its second output is the attention matrix, not the logsumexp; the checker
    says so, and the gradients through it are wrong."""
    from torch._decomp import core_aten_decompositions
    torch_table = dict(core_aten_decompositions())
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    assert op in torch_table
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 4, generator=g, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    result = run_sample(torch_table, lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True), [q, k, v])
    assert name_of(op) in result.hits
    assert "shape (2, 3, 8, 8) where the op gives (2, 3, 8)" in result.failures[name_of(op)]
    # and with the frontend's table the same sample passes: the op stays whole
    ours = run_sample(TABLE, lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True), [q, k, v])
    assert not ours.failures and name_of(op) not in ours.hits
