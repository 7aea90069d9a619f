"""Split reductions on the Triton target: a few long rows spread over many programs.

A reduce component gives each program XBLOCK rows. When there are few rows and they
are long (a loss summed to a scalar: one row of millions; a batch-norm statistic: 64
channels of 100k elements each), that is a handful of programs on a GPU with 132
multiprocessors, each looping over its rows alone. So such a launch is split (the
issue's "two-stage" column and scalar reductions, as Inductor's split reductions):

* stage 1: SPLIT programs per block of rows, program s looping over its chunk of r
  (chunk s of SPLIT, a multiple of RBLOCK) and storing its partial reductions into a
  workspace [SPLIT, xnumel] per reduction (allocated per launch by `TritonKernel`); the
  loop's per-element stores, if any, run here, each element once;
* stage 2: one program per block of rows, reducing the SPLIT partials of its rows and
  running the epilogue (what reads the reductions) as the unsplit kernel does.

Both stages are the same kernel source, launched twice with the constexpr STAGE at 1,
then 2 (no atomics, no inter-program ordering: the stream orders the launches), and
both launches are one kernel of the plan (`kernels_launched` counts it once;
torch.profiler sees two). Components packed beside a split one run in stage 2.

Only components with one loop of sum/max/min reductions split (sum reassociates: the
result is as close to float64 as the unsplit order; max/min propagate NaN through the
partials). The choice is per launch, from the sizes, like PERSISTENT: `split_factor`.
SPLIT is a constexpr power of two (a few compiled variants, whatever the sizes); the
chunk is worked out in the kernel from rnumel (a constexpr CHUNK in the interpreter,
whose loops need constant bounds).
"""
from __future__ import annotations

from ...codegen.kernel import Component, Reduce, identity

# Programs a split launch aims at: two per multiprocessor of an H100/H200 (132). The
# interpreter pays per program, so it splits into few, enough to run the code in CI.
TARGET_PROGRAMS = 256
TARGET_PROGRAMS_INTERPRET = 4
# A split program loops over at least this many blocks of r (fewer programs otherwise:
# a partial costs a store, and stage 2 a load per program).
MIN_BLOCKS_PER_PROGRAM = 4
MAX_SPLIT = 256
KINDS = ("sum", "max", "min")


def splittable(c: Component) -> bool:
    """Whether reduce component `c` has a split variant: one loop, whose reductions are
    all sum, max or min (a later loop would need the reductions of the whole row)."""
    if c.kind != "reduce" or len(c.loops) != 1:
        return False
    reduces = reductions(c)
    return bool(reduces) and all(r.kind in KINDS for r in reduces)


def reductions(c: Component) -> list[Reduce]:
    return [s for loop in c.loops for s in loop.body if isinstance(s, Reduce)]


def split_factor(xnumel: int, rnumel: int, xblock: int, rblock: int, persistent: bool,
                 interpret: bool) -> int:
    """How many programs share each block of rows (1: not split): enough for the launch
    to reach TARGET_PROGRAMS, each looping over at least MIN_BLOCKS_PER_PROGRAM blocks."""
    if persistent or xnumel <= 0 or rnumel <= 0:
        return 1
    programs = -(-xnumel // xblock)
    target = TARGET_PROGRAMS_INTERPRET if interpret else TARGET_PROGRAMS
    by_work = rnumel // (rblock * MIN_BLOCKS_PER_PROGRAM)
    split = min(-(-target // programs), by_work, MAX_SPLIT)
    return 1 << (split.bit_length() - 1) if split > 1 else 1   # a power of two


def chunk(rnumel: int, split: int, rblock: int) -> int:
    """Elements of r per split program: a multiple of RBLOCK, the last chunk shorter."""
    per = -(-rnumel // split)
    return -(-per // rblock) * rblock


def workspace_names(c: Component, tag: str) -> list[str]:
    return [f"ws{tag}_{red.var}" for red in reductions(c)]


def emit(p, c: Component, tag: str, pid: str, depth: int) -> None:
    """Printer `p`'s reduce component `c` with its split variant: under SPLIT > 1 stage 1
    or 2 (both constexpr), else the unsplit variants."""
    xb = f"XBLOCK{tag}"
    p.emit(f"if SPLIT{tag} > 1:  # few long rows: SPLIT programs per block of rows", depth)
    p.emit("if STAGE == 1:  # partial reductions over this program's chunk of r", depth + 1)
    p.emit(f"x = ({pid} // SPLIT{tag} * {xb} + tl.arange(0, {xb}))[:, None]", depth + 2)
    p.emit(f"s = {pid} % SPLIT{tag}", depth + 2)
    _partial(p, c, tag, depth + 2)
    p.emit("else:  # the partials of this program's rows, then the epilogue", depth + 1)
    p.emit(f"x = ({pid} * {xb} + tl.arange(0, {xb}))[:, None]", depth + 2)
    _combine(p, c, tag, depth + 2)
    p.emit("else:", depth)
    p.emit(f"x = ({pid} * {xb} + tl.arange(0, {xb}))[:, None]", depth + 1)
    p.reduce_body(c, tag, depth + 1)


def _partial(p, c: Component, tag: str, depth: int) -> None:
    from .printer import COMBINE, TL_DTYPE
    xb, rb = f"XBLOCK{tag}", f"RBLOCK{tag}"
    p.emit("xmask = x < xnumel", depth)
    p.emit(f"rbase = tl.arange(0, {rb})[None, :]", depth)
    p.emit(f"zx = tl.full([{xb}, 1], 0, {p.it})", depth)
    p.emit(f"zxr = tl.full([{xb}, {rb}], 0, {p.it})", depth)
    reduces = reductions(c)
    for red in reduces:
        p.emit(f"acc_{red.var} = tl.full([{xb}, {rb}], {_literal(red)}, "
               f"{TL_DTYPE[red.dtype]})", depth)
    if p.interpret:
        size = f"CHUNK{tag}"
    else:
        size = "chunk"
        p.emit(f"chunk = tl.cdiv(tl.cdiv(rnumel, SPLIT{tag}), {rb}) * {rb}", depth)
    p.emit(f"for roffset in range(0, {size}, {rb}):", depth)
    p.emit(f"r = s * {size} + roffset + rbase", depth + 1)
    p.emit("rmask = r < rnumel", depth + 1)
    for s in c.loops[0].body:
        if isinstance(s, Reduce):
            p.accumulate(s, depth + 1)
        else:
            p.stmt(s, depth + 1, f"[{xb}, {rb}]", "zxr")
    for red, ws in zip(reduces, workspace_names(c, tag)):
        acc = f"acc_{red.var}"
        p.emit(f"{red.var} = tl.reduce({acc}, 1, {COMBINE[red.kind]}, keep_dims=True)", depth)
        p.nan_check(red, acc, depth)
        p.emit(f"tl.store({ws} + s * xnumel + x + zx, {red.var}, mask=xmask)", depth)


def _combine(p, c: Component, tag: str, depth: int) -> None:
    from .printer import COMBINE
    xb = f"XBLOCK{tag}"
    p.emit("xmask = x < xnumel", depth)
    p.emit(f"zx = tl.full([{xb}, 1], 0, {p.it})", depth)
    p.emit(f"sidx = tl.arange(0, SPLIT{tag})[None, :]", depth)
    for red, ws in zip(reductions(c), workspace_names(c, tag)):
        part = f"part_{red.var}"
        p.emit(f"{part} = tl.load({ws} + sidx * xnumel + x + zx, mask=xmask, "
               f"other={_literal(red)})", depth)
        p.emit(f"{red.var} = tl.reduce({part}, 1, {COMBINE[red.kind]}, keep_dims=True)",
               depth)
        p.nan_check(red, part, depth)
    for s in c.body:
        p.stmt(s, depth, f"[{xb}, 1]", "zx")


def _literal(red: Reduce) -> str:
    ident = identity(red.kind, red.dtype)
    return f"float('{ident}')" if isinstance(ident, float) else str(ident)
