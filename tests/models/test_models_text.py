"""Real `transformers` text models (bench/models.py) compiled with fusionstitch, cpu target.

Every model, both modes (`infer`: eval, no_grad; `train`: the model's loss, backward),
two compiled calls, judged by model_judge.py against eager fp32 and against a float64 run
of the same model: the outputs and the loss, the gradient of every parameter, every
floating buffer. Every fallback counted and allowed (tests/frontend/known_fallbacks.py). The
vision and audio models are test_models_vision.py's; FUSIONSTITCH_MODELS: model_judge.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:   # `bench` is a top-level folder, not part of the package
    sys.path.insert(0, _ROOT)

transformers = pytest.importorskip("transformers")
from bench import models as M  # noqa: E402
from model_judge import SIZE, check_model, selected  # noqa: E402

TEXT = ("gpt2", "llama", "mistral", "qwen2", "gemma", "mixtral", "opt", "bert", "roberta",
        "distilbert", "albert", "electra", "t5", "bart", "whisper")


pytestmark = pytest.mark.usefixtures("strict_fresh")   # tests/conftest.py


@pytest.mark.parametrize("name", selected(TEXT))
def test_text_model_matches_eager(name):
    check_model(name, SIZE, "cpu")


def test_suite_covers_the_architectures_of_the_issue():
    from test_models_vision import VISION
    wanted = {"gpt2", "llama", "mistral", "qwen2", "gemma", "opt", "bert", "roberta",
              "distilbert", "t5", "bart", "vit", "convnext", "resnet", "mobilenet_v2"}
    assert wanted <= set(M.MODELS), sorted(wanted - set(M.MODELS))
    # every model of the suite is tested by one of the two files
    assert sorted(TEXT + VISION) == sorted(M.MODELS)
