"""bench/cold.py: a cold first step per backend, each in a fresh process with empty
caches. Plumbing only (a tiny workload): the clocks count, the caches start empty, a
failure names the workload, the CLI writes its JSON."""
import json
import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import cold  # noqa: E402


def test_each_run_compiles_from_empty_caches(tmp_path, monkeypatch):
    # a filled cache of the caller's would make the second run warm: it is not used
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    runs = [cold.cold("softmax_chain", "fusionstitch") for _ in range(2)]
    assert not any(tmp_path.iterdir())
    for r in runs:
        assert r["workload"] == "softmax_chain" and r["backend"] == "fusionstitch"
        assert 0 < r["cpu_s"] and 0 < r["wall_s"]
    # both compiled everything (a warm start takes a fraction of a cold one's time)
    assert max(r["cpu_s"] for r in runs) < 3 * min(r["cpu_s"] for r in runs)


def test_the_cli_prints_the_ratio_and_writes_json(tmp_path, capsys):
    out = tmp_path / "cold.json"
    assert cold.main(["softmax_chain", "--backends", "eager,fusionstitch",
                      "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["backend"] for r in data["rows"]] == ["eager", "fusionstitch"]
    assert data["meta"]["torch"] and data["command"].startswith("python -m bench.cold")
    assert "softmax_chain: eager" in capsys.readouterr().out


def test_a_failing_run_names_the_workload():
    with pytest.raises(RuntimeError, match="no_such_workload"):
        cold.cold("no_such_workload", "fusionstitch")
