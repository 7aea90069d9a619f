"""`explain` of a real model plans what a compiled call runs.

GPT-2 and BERT from bench/models.py (small configs, random weights, their default
attention: scaled_dot_product_attention), inference: `explain(..., strategy="none")`
reports as many kernels as one compiled call of the same strategy launches, and leaves
the process-wide counters as they were. Their numbers against eager, in both modes,
are tests/models/test_models_text.py's.

FUSIONSTITCH_STRICT=1 makes internal errors raise instead of silently running the graph
through torch.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:   # `bench` is a top-level folder, not part of the package
    sys.path.insert(0, _ROOT)

import known_fallbacks  # noqa: E402

transformers = pytest.importorskip("transformers")
fusionstitch = pytest.importorskip("fusionstitch")
from bench import models as M  # noqa: E402


pytestmark = pytest.mark.usefixtures("strict_fresh")   # tests/conftest.py


@pytest.mark.parametrize("name", ["gpt2_infer", "bert_infer"])
def test_stats_match_explain(name):
    inst = M.make(name, "small")
    # one inference call with strategy "none" launches what explain(strategy="none") plans
    compiled = torch.compile(inst.fn, backend=fusionstitch.backend(strategy="none"))
    fusionstitch.reset_stats()
    with torch.no_grad():
        compiled(*inst.args)
    launched = fusionstitch.stats()["kernels_launched"]
    assert launched > 0
    stats = fusionstitch.stats()

    with torch.no_grad():
        report = fusionstitch.explain(inst.fn, *inst.args, strategy="none")
    known_fallbacks.check(stats, report, name)
    assert report.num_ops > 0, str(report)
    assert all(g.fallback_reason is None for g in report.graphs), str(report)
    assert {g.kind for g in report.graphs} == {"inference"}, str(report)
    assert report.num_kernels == launched, str(report)
    # explain leaves the process-wide counters as they were
    assert fusionstitch.stats()["kernels_launched"] == launched
