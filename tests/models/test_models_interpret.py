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

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

pytest.importorskip("transformers")
pytest.importorskip("triton")
from model_judge import check_model  # noqa: E402

TINY = dict(batch=2, seq=4, hidden=16, heads=2, layers=1, image=16)


pytestmark = pytest.mark.usefixtures("strict_fresh")   # tests/conftest.py


@pytest.mark.parametrize("name", ["llama_train", "bert_infer", "convnext_train",
                                  "resnet_train"])
def test_model_matches_eager_interpret(name):
    check_model(name, "small", "interpret", **TINY)
