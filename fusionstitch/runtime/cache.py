"""Where compiled kernels, fusion plans and AOTAutograd graphs live on disk: FUSIONSTITCH_CACHE_DIR, else
~/.cache/fusionstitch.

Every entry is written whole or not at all (`write_atomic`: a temporary file renamed
into place) and checked before it is used: plans and graphs carry a checksum and their
key (fusion/plan_cache.py, frontend/graph_cache.py), libraries end in a seal, the
SHA-256 of their key and bytes (`seal` / `unseal`: targets/cpp/build.py), and Triton
sources are compared with the source they must hold (targets/triton/printer.py). A damaged,
truncated or swapped entry is rebuilt, never loaded.

A cache folder that cannot be written (no permission, a read-only file system, a file
where the folder should be) gives one warning per folder, and this process then keeps
its entries in a private temporary folder, removed at exit: compilation goes on
without the disk cache.
"""
from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger("fusionstitch.runtime")

# configured root that cannot be written -> this process's private folder instead
_PRIVATE: dict[str, Path] = {}


def cache_root() -> str:
    """The configured cache folder: FUSIONSTITCH_CACHE_DIR, else ~/.cache/fusionstitch."""
    return os.environ.get("FUSIONSTITCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fusionstitch")


def _usable(path: Path) -> None:
    """Make `path` and check that this process may create files in it (raises OSError)."""
    path.mkdir(parents=True, exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(f"no permission to write in {path}")


def _private(root: str, why: OSError) -> Path:
    folder = _PRIVATE.get(root)
    if folder is None:
        folder = _PRIVATE[root] = Path(tempfile.mkdtemp(prefix="fusionstitch-cache-"))
        atexit.register(shutil.rmtree, folder, True)
        log.warning("fusionstitch: the cache folder %s cannot be written (%s); compiling "
                    "without the disk cache (this process uses %s, removed at exit)",
                    root, why, folder)
    return folder


def cache_dir(kind: str) -> Path:
    """The on-disk cache folder for one kind of artefact (e.g. "triton", "cpu"), made if
    missing; a private temporary one when the configured folder cannot be written."""
    root = cache_root()
    path = Path(root) / kind
    if root not in _PRIVATE:
        try:
            _usable(path)
            return path
        except OSError as e:
            why = e
    else:
        why = None
    path = _private(root, why) / kind
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
        os.chmod(tmp, 0o644)   # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# A sealed entry is its bytes, then SEAL_MAGIC, then the SHA-256 of the key and the bytes.
# ELF loaders read what the program headers point at, so a sealed shared library loads as
# it is (the seal is trailing data no segment covers).
SEAL_MAGIC = b"\n#fusionstitch-seal-1\n"
_SEAL_LEN = len(SEAL_MAGIC) + 32


def _seal_hash(key: str, data: bytes) -> bytes:
    h = hashlib.sha256(key.encode())
    h.update(b"\0")
    h.update(data)
    return h.digest()


def seal(key: str, data: bytes) -> bytes:
    """`data` with its seal for cache entry `key` (what `unseal` checks)."""
    return data + SEAL_MAGIC + _seal_hash(key, data)


def unseal(key: str, blob: bytes) -> bytes | None:
    """The bytes of a sealed entry of `key`, or None: truncated, altered, or another
    key's entry."""
    if len(blob) < _SEAL_LEN or blob[-_SEAL_LEN:-32] != SEAL_MAGIC:
        return None
    data = blob[:-_SEAL_LEN]
    return data if _seal_hash(key, data) == blob[-32:] else None


# the in-memory caches of every layer: each module that keeps one registers its clearing
# function at import (a module never imported has nothing to clear), so this low-level
# module imports none of them
_MEMORY_CACHES: list = []


def register_memory_cache(clear) -> None:
    """`clear()` empties one in-memory cache; clear_memory_caches() calls it."""
    if clear not in _MEMORY_CACHES:
        _MEMORY_CACHES.append(clear)


def clear_memory_caches() -> None:
    """Forget what this process compiled or lowered (not the disk cache): the next compile
    starts as a new process with a warm disk cache would (the bench's warm start)."""
    for clear in _MEMORY_CACHES:
        clear()
