"""Triton target: a `Kernel` printed as one @triton.jit function, compiled and launched.

One launch runs every component: programs [start_c, end_c) of the 1-D grid run
component c (kernel packing). A flat component maps XBLOCK consecutive x to a
program; a reduce component gives a program XBLOCK rows, in one of two variants
chosen per launch by the constexpr PERSISTENT: rows that fit one block (up to
PERSISTENT_RNUMEL) are loaded once and kept in registers while every loop's
reductions and the stores run on them (a persistent reduction: `codegen/persist.py`
drops what an earlier loop computed); longer rows are looped over RBLOCK elements
at a time, each loop re-reading them (the paper's block composition with size
shrinking: rows longer than RBLOCK are never kept on chip whole). Block sizes and
the variant are `tl.constexpr` chosen per launch, sizes and strides are run-time
ints, so one source serves every shape (MXNet's cache keyed by structure and
dtypes); Triton compiles only the variant a launch takes.

A reduce component with few long rows (a loss summed to a scalar, a batch-norm
statistic over 100k elements a channel) is split per launch (`targets/triton/split.py`):
SPLIT programs per block of rows store partials, and a second launch of the same
kernel (constexpr STAGE) combines them and runs the epilogue.

A batch component (block composition around small GEMMs, `codegen/batch.py`) gives
one program per batch entry; the program runs the stages in order, each a loop over
the entry's elements (XBLOCK at a time), with `tl.debug_barrier()` between stages so
that a stage reads the scratch the earlier ones stored. A dot stage computes its
operand tiles by index and sums them with `tl.dot` (fp32 accumulation,
input_precision="ieee": no TF32, so fp32 GEMMs match eager to ~1e-6).

`interpret=True` wraps the same source in Triton's interpreter, which runs it
on CPU tensors: that is how CI checks this code path. The interpreter lacks
libdevice and cannot call @triton.jit library functions unless TRITON_INTERPRET
was set before triton was imported, so the source uses tl builtins only there,
with exact formulas for tanh, log1p, expm1, rounding (`elementwise.MATH_INTERPRET`).

Sources live in the disk cache (`runtime/cache.py`, folder "triton"), named by
the digest of their text, written atomically; a file is imported only when it holds
exactly the source generated now (a damaged or swapped one is written again). Triton
keeps its compiled binaries (target `cuda`) in its own cache (TRITON_CACHE_DIR,
default ~/.triton/cache), which Triton writes atomically but does not checksum; the
interpreter compiles nothing.
"""
from __future__ import annotations

import importlib.util
import logging
import sys
from typing import Callable

import torch

from ...ir.graph import DTYPES
from ...runtime import counters as _stats
from ...runtime.cache import cache_dir, digest, register_memory_cache, write_atomic
from ...codegen import expr as E
from ...codegen.kernel import (COMPARISONS, Component, Constant, Dot, Index, Kernel, Load, Op, Reduce,
                     Store, hinted_value, identity)
from . import split as S
from .elementwise import TL_DTYPE, ElementwiseOps
from ...codegen.persist import persistent_loops

# tl.sum / tl.max are @triton.jit library functions, which Triton's interpreter cannot call
# unless TRITON_INTERPRET was set when triton was imported; tl.reduce with these combine
# functions is what they expand to, and the interpreter runs it natively.
COMBINE = {"sum": "tl.standard._sum_combine", "max": "tl.standard._elementwise_max",
            "min": "tl.standard._elementwise_min"}


class _Printer(ElementwiseOps):
    def __init__(self, kernel: Kernel, interpret: bool):
        self.k = kernel
        self.interpret = interpret
        self.dtype: dict[str, str] = {"xmask": "b8", "rmask": "b8"}
        self.lines: list[str] = []
        self.it = "tl.int64" if kernel.index_dtype == "i64" else "tl.int32"
        self.temporaries: list[tuple[str, str]] = []    # (name, text) an op's text reads
        self.temporary_count = 0

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("    " * depth + line)

    def expr(self, e: E.Expr) -> str:
        return E.to_source(e, "//")

    def stmt(self, s, depth: int, shape: str, zero: str) -> None:
        if isinstance(s, Load):
            mask = f", mask={s.mask}, other=0" if s.mask else ""
            self.emit(f"{s.var} = tl.load({s.buffer} + ({self.expr(s.index)}) + {zero}{mask})",
                      depth)
            self.dtype[s.var] = s.dtype
        elif isinstance(s, Index):
            self.emit(f"{s.var} = ({self.expr(s.index)}) + {zero}", depth)
        elif isinstance(s, Constant):
            v = s.value
            if isinstance(v, float) and v != v:
                text = "float('nan')"
            elif isinstance(v, float) and v in (float("inf"), float("-inf")):
                text = "float('inf')" if v > 0 else "float('-inf')"
            else:
                text = repr(v)
            self.emit(f"{s.var} = tl.full({shape}, {text}, {TL_DTYPE[s.dtype]})", depth)
        elif isinstance(s, Op):
            text = self.op(s)
            for name, value in self.temporaries:
                self.emit(f"{name} = {value}", depth)
            self.temporaries.clear()
            if s.op not in COMPARISONS and s.op not in ("cast", "not", "isnan", "isinf") \
                    and s.dtype != "b8":
                text = f"({text}).to({TL_DTYPE[s.dtype]})"
            self.emit(f"{s.var} = {text}", depth)
            self.dtype[s.var] = s.dtype
        elif isinstance(s, Store):
            mask = f", mask={s.mask}" if s.mask else ""
            self.emit(f"tl.store({s.buffer} + ({self.expr(s.index)}) + {zero}, {s.value}{mask})",
                      depth)
        else:
            raise TypeError(s)

    def component(self, c: Component, i: int, depth: int) -> None:
        pid = f"(pid - pstart{i})" if len(self.k.components) > 1 else "pid"
        if self.k.index_dtype == "i64":
            pid = f"{pid}.to(tl.int64)"
        if c.kind == "batch":
            self.batch(c, i, pid, depth)
            return
        if c.kind == "scatter":   # the target refuses these kernels (scatter_kernels)
            raise ValueError("triton target: no stores at data-dependent positions "
                             "(scatter components)")
        xb = f"XBLOCK{i}"
        self.emit(f"xnumel = {self.expr(c.xnumel)}", depth)
        if c.kind == "flat":
            self.emit(f"x = {pid} * {xb} + tl.arange(0, {xb})", depth)
            self.flat_body(c, xb, depth)
            return
        self.emit(f"rnumel = {self.expr(c.rnumel)}", depth)
        if S.splittable(c):     # few long rows: targets/triton/split.py
            S.emit(self, c, f"{i}", pid, depth)
            return
        self.emit(f"x = ({pid} * {xb} + tl.arange(0, {xb}))[:, None]", depth)
        self.reduce_body(c, f"{i}", depth)

    def flat_body(self, c: Component, xb: str, depth: int) -> None:
        self.emit("xmask = x < xnumel", depth)
        self.emit(f"zx = tl.full([{xb}], 0, {self.it})", depth)
        for s in c.body:
            self.stmt(s, depth, f"[{xb}]", "zx")

    def reduce_body(self, c: Component, tag: str, depth: int) -> None:
        """Both variants of a reduce component, chosen per launch by the constexpr
        PERSISTENT (Triton compiles only the branch taken), then the per-x epilogue;
        x ([XBLOCK, 1]) and the sizes are set."""
        xb, rb = f"XBLOCK{tag}", f"RBLOCK{tag}"
        self.emit("xmask = x < xnumel", depth)
        self.emit(f"rbase = tl.arange(0, {rb})[None, :]", depth)
        self.emit(f"zx = tl.full([{xb}, 1], 0, {self.it})", depth)
        self.emit(f"zxr = tl.full([{xb}, {rb}], 0, {self.it})", depth)
        if c.loops:
            self.emit(f"if PERSISTENT{tag}:  # the row fits one block: loaded once, kept "
                      "in registers", depth)
            self.persistent(c, tag, depth + 1)
            self.emit(f"else:  # the row is looped over, {rb} elements at a time", depth)
            self.looped(c, tag, depth + 1)
        for s in c.body:
            self.stmt(s, depth, f"[{xb}, 1]", "zx")

    def persistent(self, c: Component, tag: str, depth: int) -> None:
        """One tile [XBLOCK, RBLOCK] covers the rows (rnumel <= RBLOCK): no loop over r;
        each loop's reductions run on the tile, and a value an earlier loop computed is
        reused (codegen/persist.py), not reloaded or recomputed."""
        xb, rb = f"XBLOCK{tag}", f"RBLOCK{tag}"
        self.emit("r = rbase", depth)
        self.emit("rmask = r < rnumel", depth)
        for j, body in enumerate(persistent_loops(c, self.k.may_alias)):
            self.emit(f"# loop {j}, on the row in registers", depth)
            for s in body:
                if isinstance(s, Reduce):
                    self.emit(f"{s.var} = tl.reduce({s.value}, 1, {COMBINE[s.kind]}, "
                              "keep_dims=True)", depth)
                    self.nan_check(s, s.value, depth)
                else:
                    self.stmt(s, depth, f"[{xb}, {rb}]", "zxr")

    def looped(self, c: Component, tag: str, depth: int) -> None:
        """Each loop runs r over the row RBLOCK at a time, accumulating its reductions
        lane-wise in [XBLOCK, RBLOCK] accumulators reduced after the loop. A float sum's
        lane adds ceil(rnumel / RBLOCK) terms in order (a split launch's: its chunk's),
        then the lanes add as a tree: the error grows with rnumel / RBLOCK, not with
        rnumel, as in Inductor's looped reductions (tests/codegen/test_reduction_numerics.py)."""
        xb, rb = f"XBLOCK{tag}", f"RBLOCK{tag}"
        for j, loop in enumerate(c.loops):
            reduces = [s for s in loop.body if isinstance(s, Reduce)]
            self.emit(f"# loop {j} over r", depth)
            for red in reduces:
                ident = identity(red.kind, red.dtype)
                ident = f"float('{ident}')" if isinstance(ident, float) else str(ident)
                self.emit(f"acc_{red.var} = tl.full([{xb}, {rb}], {ident}, "
                          f"{TL_DTYPE[red.dtype]})", depth)
            self.emit(f"for roffset in range(0, {self.bound('R', tag, 'rnumel')}, {rb}):",
                      depth)
            self.emit("r = roffset + rbase", depth + 1)
            self.emit("rmask = r < rnumel", depth + 1)
            for s in loop.body:
                if isinstance(s, Reduce):
                    self.accumulate(s, depth + 1)
                else:
                    self.stmt(s, depth + 1, f"[{xb}, {rb}]", "zxr")
            for red in reduces:
                acc = f"acc_{red.var}"
                self.emit(f"{red.var} = tl.reduce({acc}, 1, {COMBINE[red.kind]}, "
                          "keep_dims=True)", depth)
                self.nan_check(red, acc, depth)

    def accumulate(self, s: Reduce, depth: int) -> None:
        """Reduction `s`'s lane-wise accumulator `acc_<var>` takes in this block."""
        acc = f"acc_{s.var}"
        if s.kind == "sum":
            self.emit(f"{acc} = {acc} + {s.value}", depth)
            return
        fn = "tl.maximum" if s.kind == "max" else "tl.minimum"
        nan = ", propagate_nan=tl.PropagateNan.ALL" if s.dtype.startswith(("f", "bf")) else ""
        self.emit(f"{acc} = {fn}({acc}, {s.value}{nan})", depth)

    def nan_check(self, red: Reduce, tile: str, depth: int) -> None:
        """A float max/min is NaN where its row has a NaN (torch propagates it); the
        combine functions skip NaN (tl.maximum's default, and so does the interpreter)."""
        if red.kind != "sum" and red.dtype.startswith(("f", "bf")):
            self.emit(f"{red.var} = tl.where(tl.reduce(({tile} != {tile}).to(tl.int32), 1, "
                      f"{COMBINE['max']}, keep_dims=True) > 0, float('nan'), {red.var})",
                      depth)

    def bound(self, dim: str, tag: str, numel: str) -> str:
        """A loop's upper bound: the interpreter cannot take a run-time int as a loop bound
        (numpy >= 2.3 refuses int() of its 1-element arrays), so it gets a constexpr."""
        return f"{dim}LOOP{tag}" if self.interpret else numel

    def batch(self, c: Component, i: int, pid: str, depth: int) -> None:
        """Block composition: this program is batch entry b; its stages run in order, each
        looping over the entry's elements, with a barrier before a stage reads the scratch
        an earlier one stored. Everything a stage defines lives inside its loops."""
        self.emit(f"b = {pid}", depth)
        for j, st in enumerate(c.stages):
            tag = f"{i}_{j}"
            if j:
                self.emit("tl.debug_barrier()", depth)
            self.emit(f"# stage {j}: {st.kind}", depth)
            self.emit(f"xnumel = {self.expr(st.xnumel)}", depth)
            if st.kind == "dot":
                self.dot_stage(st, tag, depth)
                continue
            xb = f"XBLOCK{tag}"
            if st.kind == "reduce":
                self.emit(f"rnumel = {self.expr(st.rnumel)}", depth)
            self.emit(f"for xoffset in range(0, {self.bound('X', tag, 'xnumel')}, {xb}):", depth)
            if st.kind == "flat":
                self.emit(f"x = xoffset + tl.arange(0, {xb})", depth + 1)
                self.flat_body(st, xb, depth + 1)
            else:
                self.emit(f"x = (xoffset + tl.arange(0, {xb}))[:, None]", depth + 1)
                self.reduce_body(st, tag, depth + 1)

    def tile(self, loop, name: str, var: str, shape: list[str], depth: int, defs) -> None:
        """One operand tile of a dot stage: its index variables (`defs`, which define the
        masks), its statements, and the tile `name` with 0 outside the masks."""
        for line in defs:
            self.emit(line, depth)
        masks = " & ".join(line.split(" = ")[0] for line in defs if "mask" in line)
        self.emit(f"zt = tl.full([{', '.join(shape)}], 0, {self.it})", depth)
        for s in loop.body:
            self.stmt(s, depth, f"[{', '.join(shape)}]", "zt")
        self.emit(f"{name} = tl.where({masks}, {var}, 0.0)", depth)

    def dot_operands(self, c: Component, dot: Dot) -> tuple[str, str, str]:
        """The tl.dot operands and precision argument. Operands are fp32 values in the IR;
        on the GPU, when both are f16 (or both bf16) loads cast up, the loads themselves go
        to tl.dot (tensor cores; products of halves are exact in the fp32 accumulator, as
        in cuBLAS). The interpreter keeps fp32 (numpy has no bf16 matmul)."""
        ieee = ', input_precision="ieee"'
        if self.interpret:
            return dot.lhs, dot.rhs, ieee
        halves = []
        for loop, var in zip(c.loops, (dot.lhs, dot.rhs)):
            defs = {s.var: s for s in loop.body if isinstance(s, (Op, Load))}
            up = defs.get(var)
            src = defs.get(up.args[0]) if isinstance(up, Op) and up.op == "cast" else None
            halves.append((src.var, src.dtype) if isinstance(src, Load) and
                          src.dtype in ("f16", "bf16") else None)
        if halves[0] and halves[1] and halves[0][1] == halves[1][1]:
            return halves[0][0], halves[1][0], ""
        return dot.lhs, dot.rhs, ieee

    def dot_stage(self, c: Component, tag: str, depth: int) -> None:
        """A GEMM tile per (x, y) block: operand tiles computed by index, masked to 0 outside
        the sizes (tl.dot needs power-of-two blocks of at least 16), summed over r by
        tl.dot in fp32 ("ieee": no TF32, so fp32 GEMMs match eager)."""
        xb, yb, rb = f"XBLOCK{tag}", f"YBLOCK{tag}", f"RBLOCK{tag}"
        dot, epilogue = c.body[0], c.body[1:]
        assert isinstance(dot, Dot), dot
        self.emit(f"ynumel = {self.expr(c.ynumel)}", depth)
        self.emit(f"rnumel = {self.expr(c.rnumel)}", depth)
        d = depth
        if c.znumel != E.ONE:       # the GEMM entries this program runs, in turn
            self.emit(f"znumel = {self.expr(c.znumel)}", depth)
            self.emit(f"for z in range(0, {self.bound('Z', tag, 'znumel')}):", d)
            d += 1
        self.emit(f"for xoffset in range(0, {self.bound('X', tag, 'xnumel')}, {xb}):", d)
        d += 1
        self.emit(f"for yoffset in range(0, {self.bound('Y', tag, 'ynumel')}, {yb}):", d)
        d += 1
        acc = f"acc_{dot.var}"
        self.emit(f"{acc} = tl.full([{xb}, {yb}], 0, tl.float32)", d)
        self.emit(f"for roffset in range(0, {self.bound('R', tag, 'rnumel')}, {rb}):", d)
        lhs, rhs, precision = self.dot_operands(c, dot)
        self.tile(c.loops[0], f"lhs_{dot.var}", lhs, [xb, rb], d + 1,
                  [f"x = xoffset + tl.arange(0, {xb})[:, None]", "xmask = x < xnumel",
                   f"r = roffset + tl.arange(0, {rb})[None, :]", "rmask = r < rnumel"])
        self.tile(c.loops[1], f"rhs_{dot.var}", rhs, [rb, yb], d + 1,
                  [f"r = roffset + tl.arange(0, {rb})[:, None]", "rmask = r < rnumel",
                   f"y = yoffset + tl.arange(0, {yb})[None, :]", "ymask = y < ynumel"])
        self.emit(f"{acc} = tl.dot(lhs_{dot.var}, rhs_{dot.var}, {acc}{precision})", d + 1)
        self.emit(f"x = xoffset + tl.arange(0, {xb})[:, None]", d)
        self.emit("xmask = x < xnumel", d)
        self.emit(f"y = yoffset + tl.arange(0, {yb})[None, :]", d)
        self.emit("ymask = y < ynumel", d)
        self.emit(f"zxy = tl.full([{xb}, {yb}], 0, {self.it})", d)
        self.emit(f"{dot.var} = {acc}", d)
        for s in epilogue:
            self.stmt(s, d, f"[{xb}, {yb}]", "zxy")

    def source(self, name: str) -> str:
        k = self.k
        params = [b.name for b in k.buffers] + [s.name for s in k.syms] + workspaces(k)
        n = len(k.components)
        if n > 1:
            params += [f"pstart{i}" for i in range(n)]
        for i, c in enumerate(k.components):
            params += [f"{p}: tl.constexpr" for p in _constexprs(c, f"{i}", self.interpret)]
        if any(map(S.splittable, k.components)):
            params.append("STAGE: tl.constexpr")
        self.lines = []
        self.emit(f"def {name}({', '.join(params)}):", 0)
        self.emit("pid = tl.program_id(0)", 1)
        for i, c in enumerate(k.components):
            depth = 1
            if n > 1:
                cond = f"pid < pstart{i + 1}" if i + 1 < n else "pid >= 0"
                self.emit(f"{'if' if i == 0 else 'elif'} {cond}:", 1)
                depth = 2
            self.emit(f"# component {i}: {c.kind}", depth)
            self.component(c, i, depth)
        return "\n".join(self.lines) + "\n"


def workspaces(k: Kernel) -> list[str]:
    """The workspace parameters of split reductions (targets/triton/split.py), in order."""
    return [name for i, c in enumerate(k.components) if S.splittable(c)
            for name in S.workspace_names(c, f"{i}")]


HEADER = ("import triton\nimport triton.language as tl\n"
          "from triton.language.extra import libdevice\n\n\n")


def triton_source(kernel: Kernel, interpret: bool = False) -> tuple[str, str]:
    """(function name, module source) of a kernel; the name is the digest of the body."""
    body = _Printer(kernel, interpret).source("KERNEL_NAME")
    name = "fs_" + digest(body, "interpret" if interpret else "gpu")[:16]
    return name, HEADER + body.replace("KERNEL_NAME", name, 1)


_LOADED: dict[str, Callable] = {}
register_memory_cache(_LOADED.clear)
log = logging.getLogger("fusionstitch.codegen")


def _load(name: str, source: str, interpret: bool):
    fn = _LOADED.get(name)
    if fn is not None:
        _stats.bump("cache_hits")
        return fn
    # the file is the module Triton runs (and reads back for the kernel's source): it
    # must hold exactly `source`; a missing, truncated, altered or swapped file (another
    # kernel's) is written again, atomically, before it is imported
    path = cache_dir("triton") / f"{name}.py"
    try:
        held = path.read_bytes()
    except OSError:
        held = None
    if held != source.encode():
        if held is not None:
            log.warning("fusionstitch: the cached Triton kernel %s does not hold its source "
                        "(truncated, altered or another kernel's); writing it again", path)
        write_atomic(path, source.encode())
        _stats.bump("kernels_compiled")
    else:
        _stats.bump("cache_hits")
    spec = importlib.util.spec_from_file_location(f"fusionstitch_kernels.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    raw = getattr(module, name)
    if interpret:
        from triton.runtime.interpreter import InterpretedFunction
        fn = InterpretedFunction(raw)
    else:
        from triton.runtime.jit import JITFunction
        fn = JITFunction(raw)
    _LOADED[name] = fn
    return fn


# Block shapes of the template: one per loop dimension (X, R; Y in dot stages), and in
# the interpreter the loop bounds too (see `_Printer.bound`).
_DIMS = {"flat": "X", "reduce": "XR", "dot": "XYR"}


def _constexprs(c: Component, tag: str, interpret: bool, top: bool = True) -> list[str]:
    """The constexpr parameters of a component (a batch component's: its stages')."""
    if c.kind == "batch":
        return [p for j, st in enumerate(c.stages)
                for p in _constexprs(st, f"{tag}_{j}", interpret, top=False)]
    dims = _DIMS[c.kind]
    names = [f"{d}BLOCK{tag}" for d in dims]
    if c.kind == "reduce" and c.loops:
        names.append(f"PERSISTENT{tag}")
    if top and S.splittable(c):
        names += [f"SPLIT{tag}"] + ([f"CHUNK{tag}"] if interpret else [])
    if interpret:   # a top-level component's x is the grid, a stage's is a loop
        names += [f"{d}LOOP{tag}" for d in (dims[1:] if top else dims)]
        if c.znumel != E.ONE:
            names.append(f"ZLOOP{tag}")
    return names


def _meta(c: Component, tag: str, env: dict, interpret: bool, top: bool = True,
          shrink: int = 0) -> dict:
    """Values of `_constexprs` for one launch; `shrink` halves the blocks that many times
    (a launch that ran out of on-chip memory, `TritonKernel.__call__`)."""
    if c.kind == "batch":
        out = {}
        for j, st in enumerate(c.stages):
            out.update(_meta(st, f"{tag}_{j}", env, interpret, top=False, shrink=shrink))
        return out
    n = {"X": _eval(c.xnumel, env), "R": _eval(c.rnumel, env), "Y": _eval(c.ynumel, env)}
    if c.kind == "dot":
        block = {d: max(16, dot_block(n[d], d, interpret) >> shrink) for d in "XYR"}
    else:
        xb, rb = block_sizes(c, n["X"], n["R"], interpret)
        for _ in range(shrink):   # the row block first (a persistent row may turn
            if rb > 1:            # looped), then the rows
                rb //= 2
            else:
                xb = max(1, xb // 2)
        block = {"X": xb, "R": rb}
    dims = _DIMS[c.kind]
    out = {f"{d}BLOCK{tag}": block[d] for d in dims}
    if c.kind == "reduce" and c.loops:
        out[f"PERSISTENT{tag}"] = persistent(n["R"], block["R"])
    if top and S.splittable(c):
        split = S.split_factor(n["X"], n["R"], block["X"], block["R"],
                               out[f"PERSISTENT{tag}"], interpret)
        out[f"SPLIT{tag}"] = split
        if interpret:   # unused unless split; one value then, not one compile per size
            out[f"CHUNK{tag}"] = S.chunk(n["R"], split, block["R"]) if split > 1 else 0
    if interpret:
        out.update({f"{d}LOOP{tag}": n[d] for d in (dims[1:] if top else dims)})
        if c.znumel != E.ONE:
            out[f"ZLOOP{tag}"] = _eval(c.znumel, env)
    return out


def dot_block(numel: int, dim: str, interpret: bool) -> int:
    """A dot stage's block along m (X), n (Y) or k (R): a power of two, at least 16 (tl.dot's
    smallest tile); on the GPU at most 64 x 64 outputs and 32-deep k slices per step (small
    GEMMs: the whole tile at once), in the interpreter the whole extent."""
    b = max(16, _pow2(numel))
    if interpret:
        return b
    return min(b, 32 if dim == "R" else 64)


def _pow2(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def block_sizes(c: Component, xnumel: int, rnumel: int, interpret: bool) -> tuple[int, int]:
    """(XBLOCK, RBLOCK): the template's block of one program."""
    if interpret:   # fewer, larger programs: the interpreter's cost is per program
        tile = 1 << 16
        if c.kind == "flat":
            return min(_pow2(xnumel), tile), 1
        rb = min(_pow2(rnumel), 4096)
        return min(_pow2(xnumel), max(1, tile // rb)), rb
    if c.kind == "flat":
        return 1024, 1
    rb = min(_pow2(rnumel), 2048)
    return min(_pow2(xnumel), max(1, 4096 // rb)), rb


# Longest row a persistent program keeps in registers. Register pressure is what limits
# it: a persistent program keeps every value a later loop reads (the loaded row,
# exp(x - max), ...) live across all its loops. But block_sizes caps a program's tile
# [XBLOCK, RBLOCK] at 4096 elements (32 fp32 registers per thread per live tile with
# Triton's 4 warps) whatever the row, and the looped variant holds an accumulator tile per
# reduction besides; compiled for sm_90 (ptxas -v, 2026-11), persistent softmax, layer norm
# and a cross-entropy-like row use 80-142 registers where looped ones use 124-211, neither
# spilling, at rows of 256, 1024 and 2048 (fp32 and fp16 inputs), and a layer-norm backward
# row kernel that spills 324-412 bytes looped spills none persistent. So every row that
# fits the GPU's largest block (2048) runs persistent; the same cap bounds the interpreter
# (whose blocks reach 4096), so both targets pick the same variant for a shape and the CPU
# tests check the GPU's choice.
PERSISTENT_RNUMEL = 2048


def persistent(rnumel: int, rblock: int) -> bool:
    """Whether a reduce component runs its persistent variant: the whole row fits one
    block, and it is no longer than PERSISTENT_RNUMEL (register pressure). Both targets
    (GPU and interpreter) use the same rule, so the interpreter tests check both variants."""
    return rnumel <= min(rblock, PERSISTENT_RNUMEL)


def runs_persistent(c: Component, interpret: bool) -> bool:
    """Whether reduce component `c` runs persistent at its lowering-time sizes (the
    template that explain() prints; a launch decides from its own sizes)."""
    if c.kind != "reduce" or not c.loops:
        return False
    xnumel, rnumel = hinted_value(c.xnumel), hinted_value(c.rnumel)
    return persistent(rnumel, block_sizes(c, xnumel, rnumel, interpret)[1])


def reduce_schedule(c: Component, interpret: bool) -> str | bool:
    """How reduce component `c` runs at its lowering-time sizes, for the template that
    explain() prints (a launch decides from its own sizes): "persistent", "split N loop"
    (targets/triton/split.py: N programs a block of rows), or False (looped)."""
    if c.kind != "reduce" or not c.loops:
        return False
    xnumel, rnumel = hinted_value(c.xnumel), hinted_value(c.rnumel)
    xblock, rblock = block_sizes(c, xnumel, rnumel, interpret)
    if persistent(rnumel, rblock):
        return "persistent"
    split = S.split_factor(xnumel, rnumel, xblock, rblock, False, interpret) \
        if S.splittable(c) else 1
    return f"split {split} loop" if split > 1 else False


class TritonKernel:
    """A loaded kernel and how to launch it: `run(buffers, syms)`."""

    def __init__(self, kernel: Kernel, interpret: bool):
        self.kernel = kernel
        self.interpret = interpret
        self.name, self.source = triton_source(kernel, interpret)
        self.fn = _load(self.name, self.source, interpret)
        self.sym_names = [s.name for s in kernel.syms]
        # syms -> (launches, workspaces): a launch's configuration depends on the syms
        # alone, and working it out (size expressions, block sizes) costs more host time
        # than a small kernel runs; a new shape adds an entry
        self._launches: dict[tuple, tuple | None] = {}
        self._staged = any(map(S.splittable, kernel.components))
        self._dummies: dict = {}    # (dtype, device) -> the workspace of an unsplit launch
        self.options = launch_options(kernel)

    def __call__(self, buffers: list[torch.Tensor], syms: list[int]) -> None:
        key = tuple(syms)
        try:
            launch = self._launches[key]
        except KeyError:
            if len(self._launches) >= LAUNCH_CONFIGS:   # dynamic shapes: keep it bounded
                self._launches.clear()
            self._launches[key] = self.first_launch(buffers, syms)
            return
        if launch is None:
            return
        self.launch(launch, buffers, syms)

    def launch(self, launch: tuple, buffers: list[torch.Tensor], syms: list[int]) -> None:
        launches, ws = launch
        if ws:
            device = buffers[0].device
            ws = [torch.empty(n, dtype=dt, device=device) if n else self._dummy(dt, device)
                  for n, dt in ws]
        for grid, extra, meta in launches:
            self.fn[grid](*buffers, *syms, *ws, *extra, **meta)

    def first_launch(self, buffers: list[torch.Tensor], syms: list[int]) -> tuple | None:
        """Configure and run the first launch with these syms; return its configuration.
        Triton compiles a configuration at its first launch and checks the binary's
        shared memory against the device's before anything runs (`OutOfResources`), so
        a configuration that does not fit is configured again with halved blocks
        (SHRINK_LIMIT times at most) and launched again: a first stage that ran before
        its second failed wrote only its workspace, which the next try writes anew."""
        from triton.runtime.errors import OutOfResources
        for shrink in range(SHRINK_LIMIT + 1):
            launch = self.configure(syms, shrink)
            if launch is None:
                return None
            try:
                self.launch(launch, buffers, syms)
                return launch
            except OutOfResources as e:
                if shrink == SHRINK_LIMIT:
                    raise RuntimeError(
                        f"fusionstitch: Triton kernel {self.name} does not fit the device "
                        f"with blocks halved {shrink} times ({e}); its source is "
                        f"{cache_dir('triton') / (self.name + '.py')}") from e
                log.warning("fusionstitch: Triton kernel %s does not fit the device (%s); "
                            "halving its blocks", self.name, e)
                _stats.bump("triton_blocks_shrunk")
        return None

    def _dummy(self, dtype: torch.dtype, device) -> torch.Tensor:
        t = self._dummies.get((dtype, device))
        if t is None:
            t = self._dummies[(dtype, device)] = torch.empty(1, dtype=dtype, device=device)
        return t

    def configure(self, syms, shrink: int = 0) -> tuple | None:
        """The launches with these syms, each (grid, the components' first programs when
        there are several, constexprs), and the workspaces they share, each (elements,
        dtype), 0 elements for an unsplit component's; None when no program would run.
        A launch that splits a reduction (targets/triton/split.py) is two: STAGE 1 runs the
        split components' partials, STAGE 2 everything else."""
        env = dict(zip(self.sym_names, syms))
        metas, meta, ws = [], {}, []
        for i, c in enumerate(self.kernel.components):
            m = _meta(c, f"{i}", env, self.interpret, shrink=shrink)
            meta.update(m)
            xn = _eval(c.xnumel, env)
            # one program per XBLOCK x (a batch component: one per batch entry)
            programs = xn if c.kind == "batch" else -(-xn // m[f"XBLOCK{i}"])
            split = m.get(f"SPLIT{i}", 0)
            metas.append((programs, split))
            if S.splittable(c):
                ws += [(split * xn if split > 1 else 0, DTYPES[r.dtype])
                       for r in S.reductions(c)]
        stages = [2]
        if any(split > 1 for _, split in metas):
            stages = [1, 2]
        meta.update(self.options)
        launches = []
        for stage in stages:
            starts, total = [], 0
            for programs, split in metas:
                starts.append(total)
                if stage == 1:   # only the split components run, SPLIT programs a block
                    total += programs * split if split > 1 else 0
                else:
                    total += programs
            if total:
                m = dict(meta, STAGE=stage) if self._staged else meta
                launches.append(((total,), tuple(starts) if len(starts) > 1 else (), m))
        return (launches, ws) if launches else None


# Halvings of a configuration's blocks before a launch that does not fit the device's
# on-chip memory is an error (each halves the dot tiles, or the row block, then the rows).
SHRINK_LIMIT = 3


def has_dot(kernel: Kernel) -> bool:
    """Whether some component of the kernel has a dot stage (`tl.dot`)."""
    return any(st.kind == "dot" for c in kernel.components
               for st in (c.stages if c.kind == "batch" else (c,)))


def launch_options(kernel: Kernel) -> dict:
    """Triton compile options of a kernel's launches. A kernel with dot stages compiles
    with num_stages=1: Triton's software pipelining (3 stages by default on sm_80+)
    keeps stage copies of every tile a loop loads in shared memory, and a batch component
    of several dot stages then needs more than the device has (ViT's attention backward,
    one program: 299008 bytes for sm_90's 232448 at 3 stages, 16384 at one); a small
    GEMM's k loop runs a step or two, with nothing to overlap. Other kernels keep Triton's
    default."""
    return {"num_stages": 1} if has_dot(kernel) else {}


# Launch configurations a TritonKernel remembers (one per distinct syms) before it forgets
# them all: a few shapes per graph is the common case, a stream of new ones is not.
LAUNCH_CONFIGS = 64


_COMPILED_EXPR: dict[E.Expr, object] = {}


def _eval(e: E.Expr, env: dict[str, int]) -> int:
    code = _COMPILED_EXPR.get(e)
    if code is None:
        code = _COMPILED_EXPR[e] = compile(E.to_source(e, "//"), "<size>", "eval")
    return eval(code, {}, env)  # noqa: S307 - our own integer expression
