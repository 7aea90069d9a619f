"""The memory benchmark's plumbing (bench/memory.py): a child's measurement, the table."""
import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import memory as M  # noqa: E402

MIB = 2 ** 20


def _row(workload, variant, peak, before=100, held=100):
    return {"workload": workload, "variant": variant, "baseline": 90 * MIB,
            "before_steps": before * MIB, "steps_peak": peak * MIB, "held": held * MIB,
            "process_peak": None}


def test_table_gives_peak_rise_held_and_the_difference_to_inductor(tmp_path):
    rows = [_row("a", "eager", 110), _row("a", "inductor", 130), _row("a", "fusionstitch", 125),
            _row("b", "eager", 110), {"workload": "b", "variant": "inductor", "error": "x"},
            _row("b", "fusionstitch", 120)]
    text = M.table(rows, ["eager", "inductor", "fusionstitch"])
    a, b = text.splitlines()[2:]
    assert a.split(" | ")[1:4] == ["110.0", "130.0", "125.0"]
    assert a.split(" | ")[4:7] == ["10.0", "30.0", "25.0"]      # rise
    assert a.endswith("| -5.0 |") and b.endswith("| - |") and "error" in b
    meta = {"device": "cpu", "size": "small", "steps": 3, "date": "2026-01-02T00:00:00"}
    stem = M.write(rows, meta, str(tmp_path))
    assert Path(stem + ".md").read_text().count("| a |") == 1


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
def test_child_measures_one_variant_of_a_workload():
    got = M.child("softmax_chain", "eager", "small", 1, "cpu")
    assert got["steps_peak"] >= got["before_steps"] > 0 and got["held"] > 0
