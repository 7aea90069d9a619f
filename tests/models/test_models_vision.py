"""Real `transformers` vision and audio models (bench/models.py), cpu target: as
test_models_text.py (model_judge.py judges), for the convolutional networks with batch
norm (their running statistics are compared too), the vision transformer and wav2vec2
(group norm, weight norm)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

transformers = pytest.importorskip("transformers")
import fusionstitch  # noqa: E402
from model_judge import SIZE, check_model, selected  # noqa: E402

VISION = ("vit", "convnext", "resnet", "mobilenet_v2", "wav2vec2")


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", selected(VISION))
def test_vision_model_matches_eager(name):
    check_model(name, SIZE, "cpu")
