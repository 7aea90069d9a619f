"""Damaged cache entries between runs: every kind of entry (plans, graphs, cpu libraries,
Triton kernel sources) truncated, altered or swapped with another entry of its kind, then
a new process compiles the same graphs from that cache folder. It must stay alive (no
SIGBUS from a truncated library, no SIGILL or endless loop from altered code: each run is
a subprocess with a timeout), give eager's numbers, fall back nowhere, and leave the
damaged entries rebuilt. Two processes compiling the same graphs at once into one empty
cache folder both succeed.

Size knob: FUSIONSTITCH_FAULT_MODES=all runs every damage mode (`MODES`); the default CI
share is `CI_MODES`. (torch's caching-precompile artifacts carry a checksum too:
tests/frontend/test_precompile.py::test_the_artifact_is_checked_when_unpickled.)
"""
from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("cache_worker.py")
TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])
TIMEOUT = 300   # a run takes 10-20 s; a hang (altered code looping) hits this


def _truncate(frac):
    return lambda data, other, rng: data[:int(len(data) * frac)]


def _flip(where):
    def damage(data, other, rng):
        if not data:
            return b"\x01"
        out = bytearray(data)
        at = {"head": min(16, len(out) - 1), "middle": len(out) // 2,
              "tail": len(out) - 1}[where]
        out[at] ^= 0x5A
        return bytes(out)
    return damage


def _flip_many(data, other, rng):
    out = bytearray(data)
    for i in range(rng.randrange(50), len(out), 997):
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _garbage(data, other, rng):
    return bytes(rng.randrange(256) for _ in range(len(data)))


def _swap(data, other, rng):
    return other


def _append(data, other, rng):
    return data + b"\0junk"


MODES = {"empty": _truncate(0.0), "half": _truncate(0.5), "one_short": lambda d, o, r: d[:-1],
         "flip_head": _flip("head"), "flip_middle": _flip("middle"), "flip_tail": _flip("tail"),
         "flip_many": _flip_many, "garbage": _garbage, "swap": _swap, "append": _append}
CI_MODES = ("half", "flip_middle", "swap")
KINDS = {"plans": "*.json", "graphs": "*.pkl", "cpu": "*.so", "triton": "*.py"}


def _modes() -> list[str]:
    if os.environ.get("FUSIONSTITCH_FAULT_MODES", "").strip().lower() == "all":
        return list(MODES)
    return list(CI_MODES)


def _run(cache: Path, targets: list[str]) -> dict:
    env = dict(os.environ, FUSIONSTITCH_CACHE_DIR=str(cache),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("FUSIONSTITCH_STRICT", None)   # a fallback is seen in the stats, not raised
    p = subprocess.run([sys.executable, str(WORKER), ",".join(targets)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, f"worker died (rc {p.returncode}):\n{p.stderr[-4000:]}"
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("OK "))
    return json.loads(line[3:]), p.stderr


def _entries(cache: Path) -> dict[str, list[Path]]:
    return {kind: sorted((cache / kind).glob(pattern)) for kind, pattern in KINDS.items()}


def _valid(kind: str, path: Path, pristine: dict[Path, bytes]) -> bool:
    """Whether the entry at `path` is whole and its own (read as each cache reads it)."""
    from fusionstitch.runtime.cache import unseal
    data = path.read_bytes()
    if kind == "cpu":
        return unseal(path.stem, data) is not None
    if kind == "triton":   # sources are deterministic: the same text as the first run's
        return data == pristine[path]
    if kind == "plans":
        entry = json.loads(data)
        return entry["key"] == path.stem
    record = pickle.loads(data)   # graphs: our own file, read back here
    return record["key"] == path.stem


@pytest.fixture(scope="module")
def pristine_cache(tmp_path_factory):
    """A cache folder filled by one run; its entries' bytes."""
    cache = tmp_path_factory.mktemp("pristine")
    stats, _ = _run(cache, TARGETS)
    for target in TARGETS:
        assert stats[target]["fallbacks"] == 0
    entries = _entries(cache)
    for kind in KINDS:
        if kind == "cpu" and "cpu" not in TARGETS:
            continue
        assert len(entries[kind]) >= 2, (kind, entries[kind])   # swaps need two
    return cache, {p: p.read_bytes() for paths in entries.values() for p in paths}


@pytest.mark.parametrize("mode", _modes())
def test_damaged_entries_are_rebuilt_and_the_run_is_correct(mode, pristine_cache, tmp_path):
    source, pristine = pristine_cache
    cache = tmp_path / "cache"
    shutil.copytree(source, cache)
    rng = random.Random(mode)
    damaged = []
    for kind, paths in _entries(cache).items():
        for i, path in enumerate(paths):
            data = pristine[source / kind / path.name]
            other = pristine[source / kind / paths[(i + 1) % len(paths)].name]
            bad = MODES[mode](data, other, rng)
            assert bad != data
            path.write_bytes(bad)
            damaged.append((kind, path))
    stats, log = _run(cache, TARGETS)
    for target in TARGETS:
        s = stats[target]
        assert s["fallbacks"] == 0, (target, s)
        assert s["plan_cache_hits"] == 0 and s["graph_cache_hits"] == 0, (target, s)
    if "cpu" in TARGETS:
        assert stats["cpu"]["kernels_compiled"] > 0 and "building it again" in log
    pristine_here = {cache / p.relative_to(source): data for p, data in pristine.items()}
    for kind, path in damaged:   # rebuilt: a warm start would load it
        assert _valid(kind, path, pristine_here), (kind, path.name)


def test_two_processes_compile_into_one_cache_at_once(tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, FUSIONSTITCH_CACHE_DIR=str(cache),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, str(WORKER), ",".join(TARGETS)], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 0, err[-4000:]
        line = next(ln for ln in out.splitlines() if ln.startswith("OK "))
        for s in json.loads(line[3:]).values():
            assert s["fallbacks"] == 0, s
    # every entry either process left is whole
    for kind, paths in _entries(cache).items():
        for path in paths:
            if kind == "cpu":
                from fusionstitch.runtime.cache import unseal
                assert unseal(path.stem, path.read_bytes()) is not None, path
            elif kind == "plans":
                assert json.loads(path.read_bytes())["key"] == path.stem
    assert not list(cache.rglob("*.tmp")), "temporary files left behind"
