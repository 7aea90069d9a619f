"""Real `transformers` vision and audio models (bench/models.py), cpu target: as
test_models_text.py (model_judge.py judges), for the convolutional networks with batch
norm (their running statistics are compared too), the vision transformer and wav2vec2
(group norm, weight norm)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

transformers = pytest.importorskip("transformers")
from model_judge import SIZE, check_model, selected  # noqa: E402

VISION = ("vit", "convnext", "resnet", "mobilenet_v2", "mobilevit", "wav2vec2")


pytestmark = pytest.mark.usefixtures("strict_fresh")   # tests/conftest.py


@pytest.mark.parametrize("name", selected(VISION))
def test_vision_model_matches_eager(name):
    check_model(name, SIZE, "cpu")


# the convolutional networks channels-last (model and images, PyTorch's advice on CPU):
# graph inputs, convolutions and outputs in another layout than row-major (CI: two of them)
CHANNELS_LAST = ("resnet", "mobilenet_v2") if SIZE == "small" else \
    ("convnext", "resnet", "mobilenet_v2", "mobilevit")


@pytest.mark.parametrize("name", [pytest.param(p.values[0] + "_cl", id=p.id + "_cl")
                                  for p in selected(CHANNELS_LAST)])
def test_channels_last_model_matches_eager(name):
    check_model(name, SIZE, "cpu")
