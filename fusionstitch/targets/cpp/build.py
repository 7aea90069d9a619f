"""Compiling and loading the cpu target's libraries: the toolchain probe, one g++ run per
library, the disk cache (`cache_dir("cpu")`, `<digest>.so` beside its `<digest>.cpp`,
written to a temporary file and renamed into place), the in-process table, and the
runner that calls a loaded kernel. The compiler is `g++` or FUSIONSTITCH_CXX;
`targets/cpp/printer.py` explains FLAGS.

A cached library is sealed (`runtime/cache.seal`: the SHA-256 of its key and bytes
appended) and loaded only when its seal holds: a truncated library would kill the
process with SIGBUS when the loader touches a page past its end, and altered bytes
with SIGILL or an endless loop, so a damaged, truncated or swapped file (another key's
library under this key's name) is built again, with one warning, and replaced.
"""
from __future__ import annotations

import ctypes
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import threading
from array import array
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import torch

from ...runtime import counters
from ...runtime.cache import (cache_dir, digest, register_memory_cache, seal, unseal,
                             write_atomic)
from .pyentry import FLAG_ERRORS, FLAG_RELEASE, entries

log = logging.getLogger("fusionstitch.codegen")


class KernelBuildError(Exception):
    """The cpu target could not build a graph's kernels: its kernel groups run through
    torch (counted in `stats()["fallbacks"]`; raised under FUSIONSTITCH_STRICT=1).
    `cause` says which of the subclasses' reasons it is, in words."""

    cause = "the kernels could not be built"


class CompilerUnavailable(KernelBuildError):
    """No working C++ compiler (missing, or it does not run)."""

    cause = "no working C++ compiler"


class CompileFailed(KernelBuildError):
    """The compiler ran and rejected the generated source, or its library does not load."""

    cause = "the C++ compiler rejected the generated source"


class CannotPrint(KernelBuildError):
    """The C++ printer has no form for something in a kernel (a dtype, an op)."""

    cause = "the C++ printer cannot print a kernel"


FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17",
         "-ffp-contract=off", "-fno-trapping-math", "-fno-math-errno")


_LOCK = threading.Lock()
_LOADED: dict[tuple, ctypes.CDLL] = {}        # (digest, loader) -> library (this process)
_BUILDING: dict[str, threading.Lock] = {}     # digest -> the lock of its build
_TOOLCHAIN: dict[str, tuple[str, str] | str] = {}  # compiler command -> (version, arch) or error


def compiler() -> list[str]:
    """The C++ compiler command: FUSIONSTITCH_CXX, else g++."""
    return shlex.split(os.environ.get("FUSIONSTITCH_CXX") or "g++") or ["g++"]


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", timeout=timeout, check=False)


@lru_cache(maxsize=8)
def native_options(cxx: tuple[str, ...]) -> str | None:
    """What `-march=native` turns on for the compiler `cxx` (its `-Q --help=target`
    report; None when it cannot say), asked once per compiler: the cache key's machine
    part (`toolchain`) and libmvec's vector width (vecmath.py) read it. OSError or
    SubprocessError when the compiler does not run."""
    q = _run([*cxx, "-march=native", "-Q", "--help=target"], 60)
    return q.stdout if q.returncode == 0 else None


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
                q = native_options(tuple(cxx))
                arch = digest(q) if q is not None else _cpu_flags()
            got = (version, arch)
        except (OSError, subprocess.SubprocessError) as e:
            got = f"C++ compiler {' '.join(cxx)!r} is not available: {e}"
        except CompilerUnavailable as e:
            got = str(e)
        _TOOLCHAIN[key] = got
    if isinstance(got, str):
        raise CompilerUnavailable(got)
    return got


def _build(cxx: list[str], source: str, folder: str, key: str, libs: tuple[str, ...],
           include: str = "") -> str:
    """Compile `source` (linked with `libs`, with headers from `include` when given) into
    `<folder>/<key>.so`, sealed and written atomically; returns the path."""
    target = os.path.join(folder, key + ".so")
    fd, src = tempfile.mkstemp(prefix=key + ".", suffix=".cpp", dir=folder)
    so = src[:-4] + ".so"
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        cmd = [*cxx, *FLAGS, *(["-I", include] if include else []), "-o", so, src, *libs]
        try:
            p = _run(cmd, 600)
        except (OSError, subprocess.SubprocessError) as e:
            raise CompilerUnavailable(f"C++ compiler {' '.join(cxx)!r} failed to run: {e}") \
                from None
        if p.returncode != 0 or not os.path.exists(so):
            # the rejected source stays for reading (a bug report's attachment)
            kept = os.path.join(folder, key + ".failed.cpp")
            os.replace(src, kept)
            raise CompileFailed(
                f"C++ compile failed (exit {p.returncode}; the source: {kept}): "
                f"{' '.join(cmd)}\n{_tail(p.stderr or p.stdout)}")
        os.chmod(src, 0o644)
        with open(so, "rb") as f:
            write_atomic(Path(target), seal(key, f.read()))
        os.replace(src, os.path.join(folder, key + ".cpp"))   # kept for reading
    finally:
        for leftover in (src, so):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
    return target


def _verified(path: str, key: str) -> bool | None:
    """Whether the library at `path` holds its seal for `key` (None: there is none)."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("fusionstitch: cannot read the cached library %s (%s); building it again",
                    path, e)
        return False
    if unseal(key, blob) is None:
        log.warning("fusionstitch: the cached library %s is damaged (truncated, altered or "
                    "another entry's); building it again", path)
        return False
    return True


def load_library(n_kernels: int, source: str, libs: tuple[str, ...] = (), include: str = "",
                 loader: type = ctypes.CDLL) -> ctypes.CDLL:
    """The library of `source` (holding `n_kernels` kernels, linked with `libs`, compiled
    with the headers of `include` when given: pyentry.py's, Python's): from this process,
    from the disk cache (when its seal holds), or compiled now, loaded by `loader`;
    counts `cache_hits` / `kernels_compiled` per kernel."""
    cxx = compiler()
    version, arch = toolchain(cxx)
    key = digest(source, " ".join(FLAGS + libs), version, arch,
                 *([include, sys.version] if include else []))
    # one lock per library: two different libraries build at once (pyentry.warm's beside
    # a graph's kernels), one library once
    with _LOCK:
        lock = _BUILDING.setdefault(key, threading.Lock())
    with lock:
        lib = _LOADED.get((key, loader))
        if lib is not None:
            counters.bump("cache_hits", n_kernels)
            return lib
        folder = str(cache_dir("cpu"))
        path = os.path.join(folder, key + ".so")
        lib = None
        if _verified(path, key):
            try:
                lib = loader(path)
                counters.bump("cache_hits", n_kernels)
            except OSError:
                lib = None          # sealed but does not load here: build it again
        if lib is None:
            path = _build(cxx, source, folder, key, libs, include)
            try:
                lib = loader(path)
            except OSError as e:
                raise CompileFailed(f"cannot load the compiled library {path}: {e}") from None
            counters.bump("kernels_compiled", n_kernels)
        _LOADED[(key, loader)] = lib
        return lib


# At most this many compiles look for the parts of a library the compiler rejects
# (`load_parts`): one bad kernel among n costs about 2 log2(n) of them (14 for 100)
MAX_PART_BUILDS = 24


def load_parts(parts: dict[str, str], assemble: Callable[[list[str]], str],
               libs: tuple[str, ...] = ()) -> dict[str, ctypes.CDLL | CompileFailed]:
    """Libraries holding `parts` (name -> the source of one kernel function), one per
    name: the library of all of them (`assemble` makes one translation unit of a list of
    parts' sources; load_library), or, when the compiler rejects it, the libraries of its
    halves, and so on, so that a kernel the compiler rejects costs only itself (its
    CompileFailed in its place), not every kernel of the graph. After MAX_PART_BUILDS
    compiles, what is left unsplit takes the error of its last attempt. No compiler at
    all (CompilerUnavailable) is raised."""
    budget = MAX_PART_BUILDS

    def build(names: list[str]) -> dict:
        nonlocal budget
        source = assemble([parts[n] for n in names])
        try:
            lib = load_library(len(names), source, libs)
        except CompileFailed as e:
            budget -= 1
            if len(names) == 1 or budget <= 0:
                return dict.fromkeys(names, e)
            half = len(names) // 2
            return {**build(names[:half]), **build(names[half:])}
        return dict.fromkeys(names, lib)
    return build(list(parts))


# The last argument of a kernel that divides integers: where it records a zero divisor.
ERROR_ARG = "fs_error"


def runner(cfunc, name: str, checks_errors: bool = False, checks: tuple[str, ...] = (),
           release: bool = False) -> Callable[[list[torch.Tensor], list[int]], None]:
    """`run(buffers, syms)`: calls `<name>_packed` with one array of the data pointers
    then the syms (see PREAMBLE's `call_packed`): through pyentry's `launch` (a built-in
    function: 0.1-0.2 us of host time) where it is available, else through ctypes. A
    kernel that divides integers or checks indices (`checks_errors`) also gets the
    address of an error cell, the array's last slot (one per call, so concurrent calls
    never see each other's): a zero divisor (code 1) raises what eager raises,
    RuntimeError("ZeroDivisionError"), and an index out of range (code 2) IndexError
    naming `checks` (the kernel's), after the launch. `release`: the GIL is released
    while the kernel runs (large kernels; ctypes always releases it).

    `run.direct` is `(launch, (address, flags), raiser)` when the entry points serve it
    (raiser: None, or code -> the exception, for a kernel with an error cell): the
    wrapper's generated code calls `launch(address, flags, *buffers, *syms)` itself."""
    data_ptr = torch.Tensor.data_ptr
    got = entries()
    direct = None
    if got is not None:
        launch = got[0]
        address = ctypes.cast(cfunc, ctypes.c_void_p).value
        flags = (FLAG_ERRORS if checks_errors else 0) | (FLAG_RELEASE if release else 0)
        direct = (launch, (address, flags),
                  (lambda code: kernel_error(code, checks)) if checks_errors else None)

        if not checks_errors:
            def run(buffers: list[torch.Tensor], syms: list[int]) -> None:
                launch(address, flags, *buffers, *syms)
        else:
            def run(buffers: list[torch.Tensor], syms: list[int]) -> None:
                code = launch(address, flags, *buffers, *syms)
                if code:
                    raise kernel_error(code, checks)
    elif not checks_errors:
        def run(buffers: list[torch.Tensor], syms: list[int]) -> None:
            args = array("q", map(data_ptr, buffers))
            args.extend(syms)
            cfunc(args.buffer_info()[0])
    else:
        def run(buffers: list[torch.Tensor], syms: list[int]) -> None:
            args = array("q", map(data_ptr, buffers))
            args.extend(syms)
            args.extend((0, 0))
            base = args.buffer_info()[0]
            args[-2] = base + args.itemsize * (len(args) - 1)   # -> the error cell
            cfunc(base)
            if args[-1]:
                raise kernel_error(args[-1], checks)

    run.__name__ = name
    run.chain = chain                                   # (see `chain`)
    run.native = (cfunc, checks_errors, checks)
    run.direct = direct
    return run


# arguments of one kernel of a chain, at most (PREAMBLE's FS_CHAIN_ARGS)
CHAIN_ARGS = 1024
# scratch bytes of one chain, at most (runtime/wrapper.py's chains stay under 1 MiB of
# outputs; a table asking for more is refused)
CHAIN_SCRATCH = 1 << 21


def chain(runs: list, syms: list, scratch=()) -> Callable[[list[torch.Tensor]], None] | None:
    """One native call running the kernels of `runs` (runners of this module, made by
    `compile_cpu`) in order, each with its fixed `syms` (PREAMBLE's `fs_chain`):
    `call(buffers)` takes every kernel's buffers, one kernel's after another, and raises
    what the kernels' runners would. A program's consecutive static kernels
    (runtime/wrapper.py) then pay one call together (through pyentry's `chain`, else one
    ctypes call and one argument array): a launch alone costs 0.3-0.7 us of host time in
    a step through pyentry, 2-8 us through ctypes, and a small step has dozens. None when a
    kernel takes more arguments than a chain passes, or more scratch than CHAIN_SCRATCH.

    `scratch`: buffers that live in the calling thread's scratch instead (values the
    chain makes and uses up: PREAMBLE's `fs_chain`), each (bytes, the (kernel, buffer
    position) pairs that take it); `call` takes the other buffers only."""
    offsets, scratch_bytes = scratch_layout([n for n, _ in scratch])
    if scratch_bytes > CHAIN_SCRATCH:
        return None
    where: list[dict] = [{} for _ in runs]
    for (_, users), at in zip(scratch, offsets):
        for k, position in users:
            where[k][position] = at
    table: list[int] = [len(runs), scratch_bytes]
    checks: list[str] = []
    offset = 1                  # p[0] is the error cell, the buffers' pointers follow
    for run, ys, placed in zip(runs, syms, where):
        cfunc, errors, kchecks = run.native
        n = run.buffers
        if n + len(ys) + 1 > CHAIN_ARGS:
            return None
        table += [ctypes.cast(cfunc, ctypes.c_void_p).value, n, len(ys), int(errors)]
        for i in range(n):
            if i in placed:
                table.append(-placed[i] - 1)
            else:
                table.append(offset)
                offset += 1
        table += ys
        checks += [c for c in kchecks if c not in checks]
    table_array = array("q", table)
    address = table_array.buffer_info()[0]
    fs_chain = runs[0].library.fs_chain
    fs_chain.argtypes = [ctypes.c_int64, ctypes.c_int64]
    fs_chain.restype = None
    data_ptr = torch.Tensor.data_ptr
    checks_t = tuple(checks)
    got = entries()
    if got is not None:
        entry, function = got[1], ctypes.cast(fs_chain, ctypes.c_void_p).value

        def call(buffers: list[torch.Tensor]) -> None:
            code = entry(function, address, *buffers)
            if code:
                raise kernel_error(code, checks_t)
        call.direct = (entry, (function, address), lambda code: kernel_error(code, checks_t))
    else:
        def call(buffers: list[torch.Tensor]) -> None:
            p = array("q", (0,))
            p.extend(map(data_ptr, buffers))
            fs_chain(address, p.buffer_info()[0])
            if p[0]:
                raise kernel_error(p[0], checks_t)
        call.direct = None

    call.table = table_array          # (alive as long as the function)
    return call


def kernel_error(code: int, checks: tuple[str, ...] = ()) -> Exception:
    """The exception for error code `code` of a kernel's error cell (1: an integer
    division by zero, 2: an index out of range, `checks` saying what was checked, 3: a
    chain's scratch could not be allocated)."""
    if code == 2:
        what = "; ".join(checks) or "an index read from a tensor"
        return IndexError(f"index out of range: {what}")
    if code == 3:
        return MemoryError("fusionstitch: no memory for a kernel chain's scratch")
    return RuntimeError("ZeroDivisionError")


def scratch_layout(sizes: list[int]) -> tuple[list[int], int]:
    """Byte offsets for buffers of `sizes` bytes placed one after another in a chain's
    scratch, each at a multiple of 64 (as torch's CPU allocator aligns), and the bytes
    they take in all."""
    offsets, at = [], 0
    for n in sizes:
        offsets.append(at)
        at += (max(n, 1) + 63) // 64 * 64
    return offsets, at


def clear_memory_cache() -> None:
    """Forget the libraries loaded by this process (tests; the disk cache stays)."""
    with _LOCK:
        _LOADED.clear()


register_memory_cache(clear_memory_cache)
