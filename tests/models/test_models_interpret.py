"""A few real models through the interpret target (Triton's interpreter on CPU tensors),
at tiny sizes, judged as on the cpu target (model_judge.py): a decoder with grouped-query
attention and rotary embeddings (llama, training), an encoder with a padding mask (bert,
inference), a convolutional network with layer norms (convnext, training) and one with
batch norm and its running statistics (resnet, training). (Group norm on this target:
tests/frontend/test_group_norm.py.)
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

pytest.importorskip("transformers")
pytest.importorskip("triton")
import fusionstitch  # noqa: E402
from model_judge import check_model  # noqa: E402

TINY = dict(batch=2, seq=4, hidden=16, heads=2, layers=1, image=16)


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["llama_train", "bert_infer", "convnext_train",
                                  "resnet_train"])
def test_model_matches_eager_interpret(name):
    check_model(name, "small", "interpret", **TINY)
