"""The autograd-inside benchmark's plumbing (bench/autograd_inside.py): it checks the
variants against eager before timing, and reports a miss of the target with exit 1."""
import json
import sys
from pathlib import Path

import pytest
import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import autograd_inside as A  # noqa: E402


def test_a_variant_that_differs_from_eager_stops_the_benchmark():
    work = A.LogRegFunctional()

    def wrong(w, b):
        w2, b2, loss = work.inner(w, b)
        return w2 * (1 + 1e-3), b2, loss
    with pytest.raises(AssertionError, match="differ from eager"):
        A._check(work, {"eager": work.inner, "broken": wrong})


def test_one_workload_measured_and_written(tmp_path, monkeypatch):
    torch._dynamo.reset()
    rows = []
    real = A.bench_workload

    def small(name, backends, repeat):
        rows.append(real(name, backends, repeat))
        # the verdict is the plumbing's, not this machine's timing
        rows[-1]["inner_over_outer"]["fusionstitch"] = 5.0
        rows[-1]["inner_over_outer_p10"]["fusionstitch"] = 5.0
        return rows[-1]
    monkeypatch.setattr(A, "bench_workload", small)
    code = A.main(["--workloads", "logreg_step", "--backends", "fusionstitch",
                   "--repeat", "2", "--out", str(tmp_path)])
    assert code == 1   # a ratio above the target is a miss
    row = rows[0]
    assert row["rel_err_vs_eager"]["fusionstitch_inner"] <= A.RTOL
    assert row["graphs_made_while_timing"] == 0
    path, = tmp_path.glob("autograd_inside_cpu_*.json")
    saved = json.loads(path.read_text())
    assert saved["missed"] and "logreg_step" in saved["missed"][0]
    assert saved["meta"]["command"].startswith("python -m bench.autograd_inside")
    assert "| logreg_step |" in path.with_suffix(".md").read_text()
