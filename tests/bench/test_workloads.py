"""Tests for the benchmark model zoo ``bench/workloads.py``.

* every workload builds at "small" and "full", steps to finite results, and is
  bit-for-bit deterministic for a fixed seed; in-place state really changes;
* every workload builds and steps in bfloat16/float16 (small);
* every workload traces under ``torch.compile`` (AOTAutograd, with and without
  core-aten decompositions) and matches eager.
"""
import sys
from pathlib import Path

import pytest
import torch

# `bench` is a top-level folder, not part of the installed package: make the repo
# root importable also when pytest is run as a script (`python -m pytest` adds it).
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench.workloads import WORKLOADS, Instance, Workload, make, names, step  # noqa: E402

ALL = names()

EXPECTED = [
    "logreg", "word2vec", "mlp", "vae", "birnn", "lstm", "gru_residual",
    "resnet_bottleneck_train", "resnet_bottleneck_infer", "transformer_encoder",
    "capsule_routing", "cartpole", "adam", "layernorm_softmax_gelu", "softmax_chain",
]


def _finite(tensors):
    return all(torch.isfinite(t).all() for t in tensors if t.is_floating_point())


def _floating_inputs(inst):
    return [a for a in inst.args if isinstance(a, torch.Tensor) and a.is_floating_point()]


# --------------------------------------------------------------------------- #
# Registry / API
# --------------------------------------------------------------------------- #
def test_registry():
    assert ALL == EXPECTED
    assert set(names("train")) | set(names("inference")) == set(ALL)
    assert not set(names("train")) & set(names("inference"))
    assert "adam" in names("inference") and "lstm" in names("train")
    for name, w in WORKLOADS.items():
        assert isinstance(w, Workload) and w.name == name
        assert w.mode in ("train", "inference") and w.description
        assert set(w.sizes) >= {"small", "full"}
        for params in w.sizes.values():
            assert all(isinstance(v, (int, float)) for v in params.values())
    with pytest.raises(ValueError):
        names("bogus")


def test_overrides_and_errors():
    inst = make("lstm", steps=7)
    assert isinstance(inst, Instance)
    assert inst.args[0].shape[0] == 7 and inst.params["steps"] == 7
    big = make("lstm", size="full", steps=400)  # used by the planning benchmark
    assert big.args[0].shape[0] == 400
    with pytest.raises(TypeError):
        make("lstm", stpes=4)
    with pytest.raises(KeyError):
        make("no_such_workload")
    with pytest.raises(KeyError):
        make("lstm", size="huge")


def test_make_leaves_global_rng_alone():
    state = torch.get_rng_state()
    make("mlp")
    make("transformer_encoder")
    assert torch.equal(state, torch.get_rng_state())


def test_seed_changes_data():
    a, b = make("mlp", seed=0), make("mlp", seed=1)
    assert not torch.equal(a.args[0], b.args[0])


def test_integer_inputs_stay_int64():
    for name in ("logreg", "word2vec", "capsule_routing", "cartpole"):
        inst = make(name, dtype=torch.bfloat16)
        ints = [a for a in inst.args if isinstance(a, torch.Tensor) and not a.is_floating_point()]
        assert ints and all(a.dtype == torch.int64 for a in ints), name


def test_repeated_steps_do_not_accumulate_grads():
    inst = make("logreg")
    first, second = step(inst), step(inst)
    for x, y in zip(first, second):
        assert torch.equal(x, y)


# --------------------------------------------------------------------------- #
# Build + step at both sizes, determinism, mutation
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("size", ["small", "full"])
@pytest.mark.parametrize("name", ALL)
def test_build_step_deterministic(name, size):
    inst = make(name, size)
    w = inst.workload
    assert all(a.device.type == "cpu" for a in inst.args if isinstance(a, torch.Tensor))
    assert all(a.dtype == torch.float32 for a in _floating_inputs(inst))
    if w.mode == "inference":
        assert inst.grad_params == []
    else:
        assert inst.grad_params and all(p.is_leaf and p.requires_grad for p in inst.grad_params)

    before = [m.clone() for m in inst.mutated]
    out = step(inst)
    assert out and _finite(out)
    assert len(out) >= len(inst.grad_params) + len(inst.mutated)
    # mutated state really changes
    for b, m in zip(before, inst.mutated):
        assert not torch.equal(b, m)
    # gradients are not all zero
    if inst.grad_params:
        n_mut = len(inst.mutated)
        grads = out[len(out) - n_mut - len(inst.grad_params):len(out) - n_mut]
        assert any(g.abs().sum() > 0 for g in grads)

    again = step(make(name, size))
    assert len(again) == len(out)
    for x, y in zip(out, again):
        assert x.dtype == y.dtype and torch.equal(x, y), name


# --------------------------------------------------------------------------- #
# Half precision
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", ALL)
def test_half_dtypes(name, dtype):
    inst = make(name, dtype=dtype)
    assert all(a.dtype == dtype for a in _floating_inputs(inst))
    try:
        out = step(inst)
    except (RuntimeError, NotImplementedError) as e:  # an op without a CPU half kernel
        if dtype == torch.float16 and "not implemented" in str(e).lower():
            pytest.skip(f"CPU lacks an fp16 kernel: {e}")
        raise
    assert out and _finite(out)


# --------------------------------------------------------------------------- #
# torch.compile tracing
# --------------------------------------------------------------------------- #
def _aot_core_aten():
    """AOTAutograd with core-aten decompositions and no compiler (what real backends see)."""
    from functorch.compile import make_boxed_func
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    def nop(gm, example_inputs):
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=nop, bw_compiler=nop, decompositions=core_aten_decompositions())


@pytest.mark.parametrize("backend", ["aot_eager", "aot_core_aten"])
@pytest.mark.parametrize("name", ALL)
def test_compile_matches_eager(name, backend):
    torch._dynamo.reset()
    eager_inst, comp_inst = make(name), make(name)
    be = _aot_core_aten() if backend == "aot_core_aten" else backend
    compiled = torch.compile(comp_inst.fn, backend=be, fullgraph=True)
    # two steps: the second checks that in-place state updates (Adam, BN stats) propagated
    for _ in range(2):
        expected, actual = step(eager_inst), step(comp_inst, compiled)
        assert len(expected) == len(actual)
        for e, a in zip(expected, actual):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()
