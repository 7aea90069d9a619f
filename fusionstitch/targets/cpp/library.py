"""One shared library per graph on the cpu target: `compile_cpu` prints every kernel
(printer.cpp_source), builds the library (build.py: compile, disk cache, load; a kernel
the compiler rejects costs only itself: `build.load_parts`) and returns one callable
per kernel (build.runner).
"""
from __future__ import annotations

import ctypes
import math
from collections.abc import Callable

import torch

from ...codegen.kernel import Kernel
from ...runtime.cache import digest
from . import printer, pyentry, vecmath
from .build import ERROR_ARG, CannotPrint, KernelBuildError, load_parts, runner
from .flat import PARALLEL_GRAIN
from .preamble import PREAMBLE


def _translation_unit(bodies: list[str]) -> str:
    """The source of one library holding the kernel functions `bodies`."""
    return "\n".join([PREAMBLE, vecmath.declarations("\n".join(bodies))] + bodies)


def compile_cpu(kernels: list[Kernel]) -> list[Callable[[list[torch.Tensor], list[int]], None]]:
    """Compile the kernels of one graph into one shared library (cached on disk).

    Kernels with the same source (an unrolled RNN repeats its step's kernels hundreds
    of times) share one function: the library holds each distinct kernel once, named
    by the digest of its source. Returns one `run(buffers, syms)` per kernel, in order;
    in the place of a kernel that alone cannot be printed or compiled, its
    `KernelBuildError` (the library is built without it: `build.load_parts`; the caller
    runs that group through torch). Raises a `KernelBuildError` (see the module
    docstring) when no kernel can be built.
    """
    kernels = list(kernels)
    if not kernels:
        return []
    unique: dict[str, tuple[Kernel, str]] = {}
    symbols: list = []            # per kernel: its function's name, or why it has none
    for k in kernels:
        try:
            body = printer.cpp_source(k, "FS_KERNEL_NAME")
        except CannotPrint as e:
            symbols.append(e)
            continue
        sym = "fs_" + digest(body)[:20]
        if sym not in unique:
            unique[sym] = (k, body.replace("FS_KERNEL_NAME", sym, 1) +
                           f'\nextern "C" void {sym}_packed(const int64_t* a) '
                           f'{{ fs::call_packed({sym}, a); }}\n')
        symbols.append(sym)
    if not unique:
        raise symbols[0]
    pyentry.warm()                # (its first build overlaps this one)
    libs = load_parts({sym: src for sym, (_, src) in unique.items()}, _translation_unit,
                      vecmath.link_flags())
    funcs = {}
    for sym, (k, src) in unique.items():
        lib = libs[sym]
        if isinstance(lib, KernelBuildError):
            continue
        cfunc = getattr(lib, sym + "_packed")
        # the address of the argument array travels as an int64 (converting to c_int64
        # is a little cheaper than to c_void_p; x86-64 and aarch64 pass both alike)
        cfunc.argtypes = [ctypes.c_int64]
        cfunc.restype = None
        funcs[sym] = cfunc, f"int64_t* __restrict__ {ERROR_ARG})" in src
    if not funcs:                 # nothing built: the graph's groups all run through torch
        raise next(iter(libs.values()))
    # one runner per kernel: kernels of one source may check indices of different ops
    runs: list = []
    for k, sym in zip(kernels, symbols):
        if not isinstance(sym, str) or sym not in funcs:
            runs.append(sym if not isinstance(sym, str) else libs[sym])
            continue
        # large kernels release the GIL while they run (as a ctypes call did)
        release = max((math.prod(b.shape) for b in k.buffers), default=0) >= PARALLEL_GRAIN
        run = runner(funcs[sym][0], sym, funcs[sym][1], k.checks, release)
        run.buffers = len(k.buffers)      # (build.chain: the pointers it takes)
        run.library = libs[sym]
        runs.append(run)
    return runs
