"""The performance library's store: measured times in sqlite (stdlib `sqlite3`).

The file is `cache_dir("perflib")/perflib.sqlite` (under FUSIONSTITCH_CACHE_DIR). Tables:

    meta(name, value)          format = fusionstitch-perflib, schema = SCHEMA
    times(structure, shapes, dtype, target, machine, variant, median_s, count, measured_at)
                               one row per key and variant (key.py; measure.py's variants)
    machines(machine, target, description)   what each machine digest stands for, in words

Reading (`snapshot`) loads this machine's rows for one target into memory once per
version of the file (the 2018 paper's "loaded into memory at initialisation"), opened
read-only: planning never writes and never creates the file. A file that is not sqlite,
fails sqlite's quick check, has another format or schema, or rows whose values are not
times (not finite, not positive, no count) is not trusted: the whole file, or the bad
rows, are ignored with one warning per file version and counted in
`stats()["tune_rejected"]`. Rows of other machines, targets or code are never read (the
key says whose they are).

Writing (`record`, only under FUSIONSTITCH_TUNE=1) runs in one `BEGIN IMMEDIATE`
transaction with a 30 s busy timeout, so concurrent processes serialise instead of
corrupting the file; the first measurement of a key stays (`INSERT OR IGNORE`: measured
once, then remembered). A file that cannot be trusted is rebuilt empty by the writer (a new
file made whole aside and renamed into place, as the other caches write), never patched.
"""
from __future__ import annotations

import logging
import math
import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from ..runtime import counters
from ..runtime.cache import cache_dir, digest, register_memory_cache
from .key import PatternKey, describe_machine, machine

log = logging.getLogger("fusionstitch.tune")

FORMAT = "fusionstitch-perflib"
SCHEMA = 1
VARIANTS = ("fused", "split")
BUSY_TIMEOUT_S = 30.0
# a time longer than this is not a kernel time (a damaged or hand-edited row)
MAX_TIME_S = 3600.0

_TABLES = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE times (structure TEXT NOT NULL, shapes TEXT NOT NULL, dtype TEXT NOT NULL, "
    "target TEXT NOT NULL, machine TEXT NOT NULL, variant TEXT NOT NULL, "
    "median_s REAL NOT NULL, count INTEGER NOT NULL, measured_at REAL NOT NULL, "
    "PRIMARY KEY (structure, shapes, dtype, target, machine, variant))",
    "CREATE TABLE machines (machine TEXT PRIMARY KEY, target TEXT NOT NULL, "
    "description TEXT NOT NULL)",
)


class Untrusted(Exception):
    """The library file is not one this code wrote (format, schema, damage)."""


@dataclass
class Snapshot:
    """This machine's measured times for one target: (structure, shapes, dtype, variant) ->
    median seconds; `stamp` digests them (the plan cache's key part: "" when empty)."""

    times: dict[tuple[str, str, str, str], float] = field(default_factory=dict)
    stamp: str = ""
    # the op signatures (key.op_signature) of the structures held: a pattern whose
    # signature is not here has no times, and is not keyed
    signatures: frozenset = frozenset()

    def get(self, key: PatternKey, variant: str) -> float | None:
        return self.times.get((key.structure, key.shapes, key.dtype, variant))


def library_path() -> Path:
    return cache_dir("perflib") / "perflib.sqlite"


# (path, file identity, target, machine) -> Snapshot; file identities already warned about
_SNAPSHOTS: dict[tuple, Snapshot] = {}
_WARNED: set[tuple] = set()


def _identity(path: Path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _check(con: sqlite3.Connection) -> None:
    """Raise Untrusted unless `con` is a sound library of this format and schema."""
    ok = con.execute("PRAGMA quick_check").fetchone()
    if not ok or ok[0] != "ok":
        raise Untrusted(f"sqlite's quick check fails: {ok[0] if ok else 'no answer'}")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables or "times" not in tables:
        raise Untrusted(f"not a performance library (tables: {sorted(tables)})")
    meta = dict(con.execute("SELECT name, value FROM meta"))
    if meta.get("format") != FORMAT or meta.get("schema") != str(SCHEMA):
        raise Untrusted(f"format {meta.get('format')!r} schema {meta.get('schema')!r}; this "
                        f"code reads {FORMAT!r} schema {SCHEMA}")


def _valid(row) -> bool:
    structure, shapes, dtype, variant, median, count = row
    return (all(isinstance(v, str) for v in (structure, shapes, dtype, variant))
            and variant in VARIANTS and isinstance(median, float) and math.isfinite(median)
            and 0.0 < median < MAX_TIME_S and isinstance(count, int) and count >= 1)


def _reject(memo, path: Path, what: str, why: str, n: int = 1) -> None:
    counters.bump("tune_rejected", n)
    if memo not in _WARNED:
        _WARNED.add(memo)
        log.warning("fusionstitch: ignoring %s of the performance library %s: %s; planning "
                    "with the cost model there", what, path, why)


def snapshot(target: str) -> Snapshot:
    """This machine's times for `target`, from the library file (empty when there is none
    or it cannot be trusted; see the module doc)."""
    path = library_path()
    ident = _identity(path)
    if ident is None:
        return Snapshot()
    memo = (str(path), ident, target, machine(target))
    got = _SNAPSHOTS.get(memo)
    if got is not None:
        return got
    snap = Snapshot()
    try:
        con = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True,
                              timeout=BUSY_TIMEOUT_S)
        try:
            _check(con)
            rows = con.execute(
                "SELECT structure, shapes, dtype, variant, median_s, count FROM times "
                "WHERE target = ? AND machine = ? ORDER BY structure, shapes, dtype, variant",
                (target, memo[3])).fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError as e:
        if "locked" in str(e) or "busy" in str(e):   # a writer held it past the timeout
            log.warning("fusionstitch: the performance library %s is busy (%s); planning "
                        "with the cost model alone", path, e)
            return snap
        _reject(memo, path, "the whole file", f"{type(e).__name__}: {e}")
        _SNAPSHOTS[memo] = snap
        return snap
    except (sqlite3.DatabaseError, Untrusted) as e:
        _reject(memo, path, "the whole file", f"{type(e).__name__}: {e}")
        _SNAPSHOTS[memo] = snap
        return snap
    bad = [r for r in rows if not _valid(r)]
    if bad:
        _reject(memo, path, f"{len(bad)} rows", "their values are not times", len(bad))
    for r in rows:
        if _valid(r):
            snap.times[tuple(r[:4])] = r[4]
    if snap.times:
        snap.signatures = frozenset(k[0].split("-", 1)[0] for k in snap.times)
        snap.stamp = digest(*(f"{k} {v.hex()}" for k, v in sorted(snap.times.items())))
    _SNAPSHOTS[memo] = snap
    return snap


def _create(con: sqlite3.Connection) -> None:
    for sql in _TABLES:
        con.execute(sql)
    con.executemany("INSERT INTO meta VALUES (?, ?)",
                    [("format", FORMAT), ("schema", str(SCHEMA))])


def _rebuild(path: Path, why: str) -> None:
    """Replace an untrusted library by an empty one, made whole aside then renamed."""
    log.warning("fusionstitch: rebuilding the performance library %s: %s", path, why)
    fd, tmp = tempfile.mkstemp(prefix="perflib.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("BEGIN")
            _create(con)
            con.execute("COMMIT")
        finally:
            con.close()
        os.chmod(tmp, 0o644)
        # a journal left by the old file must not be played back into the new one
        for suffix in ("-journal", "-wal", "-shm"):
            try:
                os.unlink(str(path) + suffix)
            except FileNotFoundError:
                pass
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write(path: Path, target: str, rows: list[tuple]) -> None:
    con = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                _create(con)
            else:
                _check(con)
            con.executemany("INSERT OR IGNORE INTO times VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            rows)
            con.execute("INSERT OR REPLACE INTO machines VALUES (?, ?, ?)",
                        (machine(target), target, describe_machine(target)))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:
        con.close()


def record(target: str, entries: list[tuple[PatternKey, str, float, int]]) -> None:
    """Store measured times (key, variant, median seconds, repetitions); a key already in
    the library keeps its first time. Failures are logged, never raised: a library that
    cannot be written costs a re-measurement next time, not a compile."""
    if not entries:
        return
    now = time.time()
    mach = machine(target)
    rows = [(k.structure, k.shapes, k.dtype, target, mach, variant, float(median), int(count),
             now) for k, variant, median, count in entries]
    path = library_path()
    for attempt in range(2):
        try:
            _write(path, target, rows)
            return
        except sqlite3.OperationalError as e:
            if attempt == 0 and not ("locked" in str(e) or "busy" in str(e)):
                _rebuild(path, f"{type(e).__name__}: {e}")
                continue
            log.warning("fusionstitch: cannot write the performance library %s: %s", path, e)
            return
        except (sqlite3.DatabaseError, Untrusted) as e:
            if attempt == 0:
                _rebuild(path, f"{type(e).__name__}: {e}")
                continue
            log.warning("fusionstitch: cannot write the performance library %s: %s", path, e)
            return
        except OSError as e:
            log.warning("fusionstitch: cannot write the performance library %s: %s", path, e)
            return


def clear_memory_cache() -> None:
    """Forget the snapshots of this process (the file stays)."""
    _SNAPSHOTS.clear()
    _WARNED.clear()


register_memory_cache(clear_memory_cache)
