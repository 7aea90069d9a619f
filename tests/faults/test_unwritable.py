"""A cache or debug folder that cannot be written: one warning, and compilation goes on
without the disk cache (a private temporary folder) or without the dump; nothing falls
back to torch."""
import logging
import os
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.runtime import cache

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    monkeypatch.setattr(cache, "_PRIVATE", {})
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    yield
    torch._dynamo.reset()


def _blocked(tmp_path, how: str):
    """A folder path that cannot be written: a file where the folder should be, or a
    read-only folder (only for a user the permissions apply to)."""
    if how == "file":
        path = tmp_path / "not-a-folder"
        path.write_text("a file")
        return path / "cache"
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o500)
    return path


def _compile_twice(target):
    def f(x):
        return torch.softmax(x * 2, -1).sum(0)

    def g(x):
        return torch.tanh(x) + x.exp()

    for fn in (f, g):
        x = torch.randn(8, 16)
        torch.testing.assert_close(torch.compile(fn, backend=fusionstitch.backend(
            target=target))(x), fn(x))


@pytest.mark.parametrize("how", ["file", "read_only"])
@pytest.mark.parametrize("target", TARGETS)
def test_unwritable_cache_folder_warns_once_and_compiles(target, how, tmp_path, monkeypatch,
                                                         caplog):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(_blocked(tmp_path, how)))
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        _compile_twice(target)
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0 and s["kernels_launched"] >= 2 and s["kernels_compiled"] >= 2
    warnings = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert "without the disk cache" in warnings[0].getMessage()
    private = next(iter(cache._PRIVATE.values()))
    assert private.is_dir() and list(private.rglob("*"))   # the entries went there


@pytest.mark.parametrize("how", ["file", "read_only"])
def test_unwritable_debug_folder_warns_once_and_compiles(how, tmp_path, monkeypatch, caplog):
    from fusionstitch import debug
    monkeypatch.setattr(debug, "_WARNED", set())
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSIONSTITCH_DEBUG_DIR", str(_blocked(tmp_path, how)))
    with caplog.at_level(logging.WARNING, logger="fusionstitch"):
        _compile_twice("interpret")
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0 and s["kernels_launched"] >= 2
    warnings = [r for r in caplog.records if "debug folder" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert "without the dump" in warnings[0].getMessage()


def test_debug_folder_still_written_when_it_can_be(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSIONSTITCH_DEBUG_DIR", str(tmp_path / "debug"))
    _compile_twice("interpret")
    folders = [p for p in (tmp_path / "debug").iterdir() if p.is_dir()]
    assert len(folders) == 2
    assert all((p / "repro.py").exists() and (p / "01_frontend.txt").exists() for p in folders)
