"""Where compiled kernels, fusion plans and AOTAutograd graphs live on disk: FUSIONSTITCH_CACHE_DIR, else
~/.cache/fusionstitch."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """The on-disk cache folder for one kind of artefact (e.g. "triton", "cpu")."""
    root = os.environ.get("FUSIONSTITCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fusionstitch")
    path = Path(root) / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def digest(*parts: str) -> str:
    """A short stable key for source text (and whatever else decides the binary)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file renamed into place: a reader sees the
    old file or the whole new one, never a part (raises OSError)."""
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def clear_memory_caches() -> None:
    """Forget what this process compiled or lowered (not the disk cache): the next compile
    starts as a new process with a warm disk cache would (the bench's warm start)."""
    from ..codegen import cpu_build, lower, triton
    from ..frontend import graph_cache
    from ..fusion import plan_cache
    lower._CACHE.clear()
    plan_cache.clear_memory_cache()
    graph_cache.clear_memory_cache()
    cpu_build.clear_memory_cache()
    triton._LOADED.clear()
