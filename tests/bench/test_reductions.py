"""Tests for ``bench/reductions.py`` on Triton's interpreter (the GPU run is in
tools/gpu_session.sh): both variants are what they say, and match eager."""
import json
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import reductions as B  # noqa: E402
from fusionstitch.targets.triton import printer as T  # noqa: E402


def test_persistent_and_looped_variants(tmp_path):
    limit = T.PERSISTENT_RNUMEL
    result = B.run("interpret", lengths=(64, 4096), elements=8192, repeat=1, min_time=0.0,
                   out_dir=str(tmp_path))
    assert T.PERSISTENT_RNUMEL == limit                 # the forced limit is put back
    rows = {(r["case"], r["length"]): r for r in result["rows"]}
    assert set(rows) == {(c, n) for c in B.CASES for n in (64, 4096)}
    for (case, n), r in rows.items():
        v = r["variants"]
        assert r["rows"] == 8192 // n
        for name in ("persistent", "looped"):
            assert v[name]["max_rel_err"] <= 1e-4, (case, n, name)
            assert v[name]["reduce_launches"] >= 1
        assert v["looped"]["persistent_launches"] == 0
        # a short row fits one block: persistent; past PERSISTENT_RNUMEL: looped in both
        assert (v["persistent"]["persistent_launches"] > 0) == (n <= limit), (case, n)
        assert r["looped_over_persistent"] > 0
    data = json.loads(Path(result["json_path"]).read_text())
    assert data["meta"]["persistent_rnumel"] == limit
    assert "looped / persistent" in B.table(result["rows"])
