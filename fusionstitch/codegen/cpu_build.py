"""Compiling and loading the cpu target's libraries: the toolchain probe, one g++ run per
library, the disk cache (`cache_dir("cpu")`, `<digest>.so` beside its `<digest>.cpp`,
written to a temporary file and renamed into place) and the in-process table.
The compiler is `g++` or FUSIONSTITCH_CXX; `codegen/cpu.py` explains FLAGS.
"""
from __future__ import annotations

import ctypes
import os
import shlex
import subprocess
import tempfile
import threading

from ..runtime import counters
from ..runtime.cache import cache_dir, digest


class CompilerUnavailable(Exception):
    """No working C++ compiler (or the kernel could not be printed/compiled); fall back."""


FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17",
         "-ffp-contract=off", "-fno-trapping-math", "-fno-math-errno")


_LOCK = threading.Lock()
_LOADED: dict[str, ctypes.CDLL] = {}          # digest -> library (this process)
_TOOLCHAIN: dict[str, tuple[str, str] | str] = {}  # compiler command -> (version, arch) or error


def compiler() -> list[str]:
    """The C++ compiler command: FUSIONSTITCH_CXX, else g++."""
    return shlex.split(os.environ.get("FUSIONSTITCH_CXX") or "g++") or ["g++"]


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", timeout=timeout, check=False)


def _tail(text: str, n: int = 3000) -> str:
    text = (text or "").strip()
    return text if len(text) <= n else "..." + text[-n:]


def _cpu_flags() -> str:
    """This CPU's feature flags (Linux), for compilers that cannot say what -march=native
    means."""
    try:
        with open("/proc/cpuinfo") as f:
            return digest(next((line for line in f if line.startswith(("flags", "Features"))),
                               ""))
    except OSError:
        return ""


def toolchain(cxx: list[str]) -> tuple[str, str]:
    """(compiler version line, what -march=native means here), once per compiler."""
    key = "\0".join(cxx)
    got = _TOOLCHAIN.get(key)
    if got is None:
        try:
            p = _run([*cxx, "--version"], 60)
            if p.returncode != 0 or not p.stdout.strip():
                raise CompilerUnavailable(
                    f"C++ compiler {' '.join(cxx)!r} failed (exit {p.returncode}): "
                    f"{_tail(p.stderr or p.stdout)}")
            version = p.stdout.strip().splitlines()[0]
            arch = ""
            if "-march=native" in FLAGS:
                q = _run([*cxx, "-march=native", "-Q", "--help=target"], 60)
                arch = digest(q.stdout) if q.returncode == 0 else _cpu_flags()
            got = (version, arch)
        except (OSError, subprocess.SubprocessError) as e:
            got = f"C++ compiler {' '.join(cxx)!r} is not available: {e}"
        except CompilerUnavailable as e:
            got = str(e)
        _TOOLCHAIN[key] = got
    if isinstance(got, str):
        raise CompilerUnavailable(got)
    return got


def _build(cxx: list[str], source: str, folder: str, key: str, libs: tuple[str, ...]) -> str:
    """Compile `source` (linked with `libs`) into `<folder>/<key>.so` (atomically);
    returns the path."""
    target = os.path.join(folder, key + ".so")
    fd, src = tempfile.mkstemp(prefix=key + ".", suffix=".cpp", dir=folder)
    so = src[:-4] + ".so"
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        cmd = [*cxx, *FLAGS, "-o", so, src, *libs]
        try:
            p = _run(cmd, 600)
        except (OSError, subprocess.SubprocessError) as e:
            raise CompilerUnavailable(f"C++ compiler {' '.join(cxx)!r} failed to run: {e}") \
                from None
        if p.returncode != 0 or not os.path.exists(so):
            raise CompilerUnavailable(
                f"C++ compile failed (exit {p.returncode}): {' '.join(cmd)}\n"
                f"{_tail(p.stderr or p.stdout)}")
        os.chmod(src, 0o644)
        os.replace(so, target)
        os.replace(src, os.path.join(folder, key + ".cpp"))   # kept for reading
    finally:
        for leftover in (src, so):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
    return target


def load_library(n_kernels: int, source: str, libs: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The library of `source` (holding `n_kernels` kernels, linked with `libs`): from this
    process, from the disk cache, or compiled now; counts `cache_hits` /
    `kernels_compiled` per kernel."""
    cxx = compiler()
    version, arch = toolchain(cxx)
    key = digest(source, " ".join(FLAGS + libs), version, arch)
    with _LOCK:
        lib = _LOADED.get(key)
        if lib is not None:
            counters.bump("cache_hits", n_kernels)
            return lib
        folder = str(cache_dir("cpu"))
        path = os.path.join(folder, key + ".so")
        lib = None
        if os.path.exists(path):
            try:
                lib = ctypes.CDLL(path)
                counters.bump("cache_hits", n_kernels)
            except OSError:
                lib = None          # unreadable: build it again
        if lib is None:
            path = _build(cxx, source, folder, key, libs)
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise CompilerUnavailable(f"cannot load the compiled library {path}: {e}") \
                    from None
            counters.bump("kernels_compiled", n_kernels)
        _LOADED[key] = lib
        return lib


def clear_memory_cache() -> None:
    """Forget the libraries loaded by this process (tests; the disk cache stays)."""
    with _LOCK:
        _LOADED.clear()
