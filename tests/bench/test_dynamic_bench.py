"""bench/dynamic.py's plumbing at tiny sizes: the sweep, its counts, the files it writes.

Not the speed: two batch sizes of the transformer block, eager and fusionstitch only
(Inductor's compile takes a minute on a CI machine; bench/run.py's tests cover it)."""
import json
import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import dynamic as D  # noqa: E402


def test_ranges():
    assert D._ranges("1-4,8,16") == [1, 2, 3, 4, 8, 16]
    assert D._ranges("") == []


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("dynamic")
    rc = D.main(["--models", "transformer", "--variants", "fusionstitch", "--batches", "2,3",
                 "--seqs", "", "--hws", "", "--repeat", "1", "--min-time", "0",
                 "--out", str(out)])
    assert rc == 0
    [js] = out.glob("dynamic_cpu_*.json")
    assert js.with_suffix(".md").exists()
    return json.loads(js.read_text()), js.with_suffix(".md").read_text()


def test_one_symbolic_program_per_graph_serves_both_sizes(result):
    data, _ = result
    [sweep] = data["sweeps"]
    assert sweep["model"] == "transformer" and sweep["axis"] == "batch"
    assert sweep["sizes"] == [2, 3] and sweep["fixed"] == "seq=32"
    fs = sweep["totals"]["fusionstitch"]
    # forward and backward: one symbolic program each, built at the first size
    assert fs["compiles"] == 2 and fs["symbolic_programs"] == 2
    assert fs["planning_s"] > 0 and fs["kernels_compiled"] > 0
    second = sweep["rows"][1]["variants"]["fusionstitch"]
    assert second["compiles"] == 0 and second["kernels_compiled"] == 0
    assert second["plan_cache_misses"] == 0
    # eager's numbers (k.bias's gradient, zero in exact arithmetic, is left out)
    assert fs["max_rel_err"] < 1e-4
    assert set(sweep["totals"]) == {"eager", "fusionstitch"}   # eager always runs


def test_report(result):
    data, md = result
    meta = data["meta"]
    assert meta["target"] == "cpu" and meta["command"].startswith("python -m bench.dynamic")
    assert {"torch", "date", "cpu"} <= set(meta["versions"])
    assert "## transformer: batch 2..3 (2 sizes, seq=32)" in md
    assert "| fusionstitch | 1 | 2 | 2 |" in md
