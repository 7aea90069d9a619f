"""The performance library's sqlite store (fusionstitch/tune/library.py): rows of this
machine are read, anything damaged, of another format, schema, machine or with values
that are not times is ignored and counted, writers rebuild what they cannot trust, and
concurrent writers do not corrupt it."""
import logging
import math
import os
import sqlite3
import subprocess
import sys

import pytest

import fusionstitch
from fusionstitch.runtime.cache import clear_memory_caches
from fusionstitch.tune import library
from fusionstitch.tune.key import PatternKey, machine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = PatternKey("s" * 24, "64x1024", "f32")


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSIONSTITCH_TUNE", raising=False)
    clear_memory_caches()
    fusionstitch.reset_stats()
    yield tmp_path
    clear_memory_caches()


def rejected() -> int:
    return fusionstitch.stats()["tune_rejected"]


def test_no_library_reads_as_empty_and_creates_nothing(fresh):
    assert library.snapshot("cpu").times == {} and library.snapshot("cpu").stamp == ""
    assert not library.library_path().exists() and rejected() == 0


def test_recorded_times_read_back_for_this_machine_and_target_only(fresh):
    library.record("cpu", [(KEY, "fused", 1e-4, 7), (KEY, "split", 3e-4, 7)])
    snap = library.snapshot("cpu")
    assert snap.get(KEY, "fused") == 1e-4 and snap.get(KEY, "split") == 3e-4 and snap.stamp
    assert library.snapshot("cuda").times == {}     # another target's key
    # a row of another machine (other hardware, versions or code) is never read
    con = sqlite3.connect(library.library_path())
    with con:
        con.execute("UPDATE times SET machine = 'elsewhere'")
    con.close()
    assert library.snapshot("cpu").times == {} and rejected() == 0


def test_first_measurement_of_a_key_stays(fresh):
    library.record("cpu", [(KEY, "fused", 1e-4, 7)])
    library.record("cpu", [(KEY, "fused", 9e-4, 7)])
    assert library.snapshot("cpu").get(KEY, "fused") == 1e-4


@pytest.mark.parametrize("damage", ["garbage", "truncated", "foreign_sqlite", "old_schema"])
def test_untrusted_file_is_ignored_counted_and_rebuilt_by_a_writer(fresh, damage, caplog):
    library.record("cpu", [(KEY, "fused", 1e-4, 7), (KEY, "split", 3e-4, 7)])
    path = library.library_path()
    if damage == "garbage":
        path.write_bytes(b"not a database at all" * 100)
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:700])
    elif damage == "foreign_sqlite":
        path.unlink()
        con = sqlite3.connect(path)
        with con:
            con.execute("CREATE TABLE times (a, b)")
            con.execute("INSERT INTO times VALUES (1, 2)")
        con.close()
    else:
        con = sqlite3.connect(path)
        with con:
            con.execute("UPDATE meta SET value = '0' WHERE name = 'schema'")
        con.close()
    with caplog.at_level(logging.WARNING, logger="fusionstitch.tune"):
        assert library.snapshot("cpu").times == {}
        assert library.snapshot("cpu").times == {}   # one count per version of the file
    assert rejected() == 1
    assert any("ignoring the whole file" in r.getMessage() for r in caplog.records)
    library.record("cpu", [(KEY, "fused", 2e-4, 5), (KEY, "split", 1e-4, 5)])
    snap = library.snapshot("cpu")
    assert snap.get(KEY, "fused") == 2e-4 and snap.get(KEY, "split") == 1e-4


@pytest.mark.parametrize("bad", ["fast", math.inf, -1e-4, 0.0, 1e9])
def test_rows_that_are_not_times_are_ignored(fresh, bad):
    good = PatternKey("g" * 24, "8", "f32")
    library.record("cpu", [(KEY, "fused", 1e-4, 7), (good, "fused", 1e-4, 7)])
    con = sqlite3.connect(library.library_path())
    with con:
        con.execute("UPDATE times SET median_s = ? WHERE structure = ?", (bad, KEY.structure))
    con.close()
    snap = library.snapshot("cpu")
    assert snap.get(KEY, "fused") is None and snap.get(good, "fused") == 1e-4
    assert rejected() == 1


WRITER = """
import sys
from fusionstitch.tune import library
from fusionstitch.tune.key import PatternKey
me = sys.argv[1]
for i in range(40):
    library.record("cpu", [(PatternKey(f"{me}{i:022d}", "8", "f32"), "fused", 1e-4, 1)])
"""


def test_concurrent_writers_keep_every_row_and_a_sound_file(fresh):
    env = {**os.environ, "FUSIONSTITCH_CACHE_DIR": str(fresh), "PYTHONPATH": ROOT}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, w], cwd=ROOT, env=env)
             for w in ("a", "b")]
    assert [p.wait(timeout=240) for p in procs] == [0, 0]
    con = sqlite3.connect(library.library_path())
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    assert len(library.snapshot("cpu").times) == 80 and rejected() == 0


def test_machine_description_is_stored_for_readers(fresh):
    library.record("cpu", [(KEY, "fused", 1e-4, 7)])
    con = sqlite3.connect(library.library_path())
    (desc,) = con.execute("SELECT description FROM machines WHERE machine = ?",
                          (machine("cpu"),)).fetchone()
    con.close()
    assert "torch" in desc and "fusionstitch" in desc
