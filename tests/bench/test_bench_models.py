"""The real-model suite ``bench/models.py``: every model builds at both sizes, steps
eagerly to finite numbers, deterministically (dropout and other training randomness
off), with the outputs each mode promises. Compiled numbers: tests/models/."""
import sys
from pathlib import Path

import pytest
import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

pytest.importorskip("transformers")
from bench import models as M  # noqa: E402
from bench import workloads as W  # noqa: E402


@pytest.mark.parametrize("name", M.names())
def test_model_steps_deterministically(name):
    first = M.step(M.make(name, "small"))
    inst = M.make(name, "small")
    torch.manual_seed(1234)   # another global RNG state: a live dropout would draw anew
    again = M.step(inst)
    assert len(first) == len(again)
    for a, b in zip(first, again):
        assert torch.equal(a, b), name
    assert all(torch.isfinite(t).all() for t in first if t.is_floating_point())
    inst = M.make(name, "small")
    if name.endswith("_train"):
        assert inst.workload.mode == "train" and inst.workload.loss_first
        out = inst.fn(*inst.args)
        assert out[0].dim() == 0   # the loss first, then the logits
        assert inst.grad_params
    else:
        assert inst.workload.mode == "inference" and not inst.grad_params
        assert not inst.fn.training


def test_full_size_builds():
    for arch in M.MODELS:
        inst = M.make(f"{arch}_infer", "full")
        assert inst.params["hidden"] == M.SIZES["full"]["hidden"]


def test_models_are_found_by_the_zoo_functions():
    assert W.workload("llama_train") is M.WORKLOADS["llama_train"]
    assert W.make("gpt2_infer").workload is M.WORKLOADS["gpt2_infer"]
    with pytest.raises(KeyError, match="no_such"):
        W.workload("no_such")


def test_dropout_like_config_fields_are_caught():
    """A dropout left at a config's default (MobileNetV2's classifier_dropout_prob,
    GPT-2's summary_first_dropout=0.1 for a head the LM model lacks) is refused."""
    import transformers as T
    found = M.random_config_fields(T.MobileNetV2Config().to_dict())
    assert len(found) == 1 and found[0].startswith("config.classifier_dropout_prob="), found
    assert "config.summary_first_dropout=0.1" in M.random_config_fields(
        T.GPT2Config().to_dict())
    assert M.random_config_fields({"text_config": {"layerdrop": 0.1}, "dropout": 0.0}) == [
        "config.text_config.layerdrop=0.1"]
    for arch in M.MODELS:   # every model of the suite sets them all to 0
        inst = M.make(f"{arch}_train", "small")
        model = inst.fn.model
        assert M.random_config_fields(model.config.to_dict()) == [], arch
