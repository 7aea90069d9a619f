"""torch's OpInfo database through the backend: which samples a case runs, how one sample
runs (eager, compiled, float64), and when the compiled result is right.

A case is one OpInfo entry (`op_db`), one dtype and one mode: `fwd` (outputs) or `grad`
(outputs and the gradients of every input that requires one, for a fixed random
cotangent). Each sample of a case is compiled afresh (`torch._dynamo.reset()`,
`dynamic=False`) with `fusionstitch.backend(target=...)`, and its outputs, gradients and
inputs after the call (ops that update an input: batch-norm's running statistics) are
compared with eager's. A tensor is right when it is within the dtype's tolerance of
eager, or no further from a float64 run of the same sample than eager itself is, plus one
rounding of the dtype (we round once where eager rounds after each op).

Used by test_opinfo.py; `python tests/opinfo/opinfo_sweep.py` runs the sweep outside
pytest and sorts each failure into ours or torch's (the same error with
`backend="aot_eager"`), for writing the skip list.
"""
from __future__ import annotations

import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

if __name__ == "__main__":
    # run as a script: this checkout's fusionstitch, not the one pip installed (an
    # editable install of another checkout would be tested instead)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch._dynamo
from torch.utils._pytree import tree_flatten, tree_map

import fusionstitch

DTYPES = ("float32", "bfloat16", "float16")
# the dtype of an op that has none of DTYPES: the first of these it supports
OTHER_DTYPES = (torch.int64, torch.int32, torch.bool, torch.uint8, torch.complex64,
                torch.float8_e4m3fn)
MODES = ("fwd", "grad")

# (rtol, atol) against eager in the same dtype: torch.testing's defaults for the dtype
# (which assume one rounding of the result) made looser where a value goes through
# several ops in the dtype, as an op's samples do (a reduction, a decomposed norm).
TOLERANCE = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.complex64: (1e-5, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}

# How much further from float64 than eager a result may be. Where a result is the small
# difference of large terms (a gradient that is zero in exact arithmetic), both sides are
# rounding noise of the terms: rounding once in fp32 from fp16 inputs saved by the forward
# gave 4.5x eager's noise (cosine_similarity's fp16 gradient) though nearer to float64 on
# every term. A wrong value is off by the value's own scale, far beyond this.
SLACK = 8.0

# The samples of a case in CI: FUSIONSTITCH_OPINFO=ci (the default) runs SAMPLES_CI per
# case, `all` every sample, a number that many per case.
SAMPLES_CI = 1


def samples_per_case() -> int | None:
    """FUSIONSTITCH_OPINFO: `ci` (default) -> SAMPLES_CI, `all` -> None (every sample), N."""
    value = os.environ.get("FUSIONSTITCH_OPINFO", "ci").strip().lower() or "ci"
    if value == "ci":
        return SAMPLES_CI
    if value == "all":
        return None
    try:
        return max(1, int(value))
    except ValueError:
        raise ValueError(f"FUSIONSTITCH_OPINFO={value!r}: expected ci, all or a number") \
            from None


def op_id(op) -> str:
    """`name` or `name.variant`: the id of an OpInfo entry in test ids and the skip list."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def case_dtypes(op, mode: str) -> list[str]:
    """The sweep's dtypes the op supports in `mode` (`grad`: those autograd supports); an op
    with none of them (bitwise ops, gcd, view_as_real) runs in the first other dtype it has
    of OTHER_DTYPES, `fwd`."""
    supported = op.supported_backward_dtypes("cpu") if mode == "grad" else \
        op.supported_dtypes("cpu")
    if mode == "grad" and not op.supports_autograd:
        return []
    names = [d for d in DTYPES if getattr(torch, d) in supported]
    if not names and mode == "fwd":
        other = [d for d in OTHER_DTYPES if d in supported]
        names = [str(other[0]).removeprefix("torch.")] if other else []
    return names


def seed_of(*parts: Any) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def pick_samples(op, dtype: str, mode: str, count: int | None) -> list[tuple[int, Any]]:
    """(index, SampleInput) pairs: every sample when `count` is None, else `count` of them,
    starting at an offset that differs per dtype and mode, so that the cases of one op
    together cover different samples. Generated under a fixed seed: deterministic."""
    torch.manual_seed(seed_of(op_id(op), dtype, mode))
    gen = op.sample_inputs("cpu", getattr(torch, dtype), requires_grad=mode == "grad")
    if count is None:
        return list(enumerate(gen))
    offset = (DTYPES.index(dtype) if dtype in DTYPES else 0) + len(DTYPES) * MODES.index(mode)
    wanted = [offset + j for j in range(count)]
    got = []
    for i, s in enumerate(gen):
        got.append(s)
        if i >= wanted[-1]:
            break
    if not got:
        return []
    idx = sorted({w % len(got) for w in wanted})
    return [(i, got[i]) for i in idx]


# --- running one sample --------------------------------------------------------------------


def _clone_tree(tree, convert: Callable[[torch.Tensor], torch.Tensor] | None = None):
    """A deep copy of a sample's arguments: fresh leaves with the same requires_grad (one
    copy per tensor object, so arguments that alias stay aliased); `convert` maps each
    tensor first (float64)."""
    memo: dict[int, torch.Tensor] = {}

    def copy(t):
        c = t.detach()
        c = convert(c) if convert is not None else c.clone()
        return c.clone() if convert is not None and c is t.detach() else c

    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in memo:
            base = t._base
            if base is not None and t.layout == torch.strided and \
                    base.is_contiguous() and base.storage_offset() == 0:
                # a view keeps its base's memory around it (as_strided.partial_views
                # reads past the view, within the storage): the copy is the same view of a
                # copy of the base
                c = copy(base).as_strided(t.shape, t.stride(), t.storage_offset())
            else:
                c = copy(t)
            memo[id(t)] = c.requires_grad_(t.requires_grad and
                                           (c.is_floating_point() or c.is_complex()))
        return memo[id(t)]
    return tree_map(one, tree)


def to_float64(t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        return t.to(torch.complex128)
    return t.to(torch.float64) if t.is_floating_point() else t


@dataclass
class Result:
    outputs: list          # flat outputs (tensors and other values)
    grads: list            # flat gradients (None where an input gets none)
    inputs: list           # flat inputs after the call (in-place updates)


def cotangents(outs: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) if
            not o.is_complex() else
            torch.randn(o.shape, generator=g, dtype=torch.complex128).to(o.dtype)
            for o in outs]


def run(fn: Callable, sample, mode: str, seed: int,
        convert: Callable | None = None, cots: list | None = None) -> tuple[Result, list]:
    """Run `fn` on a copy of `sample` (its tensors mapped by `convert`); in `grad` mode also
    the gradients of the inputs that require grad, for cotangents `cots` (made here from
    `seed` when None). Returns the result and the cotangents used."""
    args = _clone_tree([sample.input, list(sample.args), dict(sample.kwargs)], convert)
    torch.manual_seed(seed)          # random ops draw the same numbers in every run
    out = fn(args[0], *args[1], **args[2])
    flat_in = [a for a in tree_flatten(args)[0]]
    grads: list = []
    if mode == "grad":
        diff_out = sample.output_process_fn_grad(out)
        outs = [o for o in tree_flatten(diff_out)[0] if isinstance(o, torch.Tensor)
                and o.requires_grad and (o.is_floating_point() or o.is_complex())]
        leaves = [a for a in flat_in if isinstance(a, torch.Tensor) and a.requires_grad]
        if outs and leaves:
            if cots is None:
                cots = cotangents(outs, seed)
            else:
                cots = [c.to(o.dtype) for c, o in zip(cots, outs)]
            grads = list(torch.autograd.grad(outs, leaves, cots, allow_unused=True))
    outputs = tree_flatten(out)[0]
    return Result([_detach(o) for o in outputs], grads,
                  [_detach(a) for a in flat_in]), cots or []


def _detach(v):
    return v.detach() if isinstance(v, torch.Tensor) else v


def eager(op) -> Callable:
    return lambda *a, **k: op.op(*a, **k)


def compiled(op, target: str, backend: Any = None) -> Callable:
    """`op` under torch.compile with our backend for `target` (or `backend`), traced anew."""
    torch._dynamo.reset()
    return torch.compile(eager(op), backend=backend or fusionstitch.backend(target=target),
                         dynamic=False)


# --- comparing -----------------------------------------------------------------------------


def _error(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|got - ref| per element in float64; 0 where both are the same infinity or NaN, inf
    where only one is NaN."""
    got, ref = got.to(torch.complex128 if got.is_complex() else torch.float64), \
        ref.to(torch.complex128 if ref.is_complex() else torch.float64)
    err = (got - ref).abs()
    same = (got == ref) | (torch.isnan(got) & torch.isnan(ref))
    err = torch.where(same, torch.zeros_like(err), err)
    return torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)


def mismatch(got, want, ref64, what: str, values: bool = True) -> str | None:
    """Why `got` (compiled) is wrong against `want` (eager) and `ref64` (float64 run of the
    same sample, or None), or None when it is right."""
    if isinstance(want, torch.Tensor) != isinstance(got, torch.Tensor):
        return f"{what}: {type(got).__name__} where eager gives {type(want).__name__}"
    if not isinstance(want, torch.Tensor):
        if want != got and not (isinstance(want, float) and want != want and got != got):
            return f"{what}: {got!r} where eager gives {want!r}"
        return None
    if got.shape != want.shape or got.dtype != want.dtype:
        return (f"{what}: {tuple(got.shape)} {got.dtype} where eager gives "
                f"{tuple(want.shape)} {want.dtype}")
    if not values or got.numel() == 0:
        return None
    if want.layout != torch.strided:
        got, want = got.to_dense(), want.to_dense()
    rtol, atol = TOLERANCE.get(want.dtype, (0.0, 0.0))
    if not (want.is_floating_point() or want.is_complex()):
        if torch.equal(got, want):
            return None
    else:
        err = _error(got, want)
        if bool((err <= atol + rtol * want.abs().double().nan_to_num(0.0)).all()):
            return None
    first = f"{what}: max |compiled - eager| {float(_error(got, want).max()):.3g}"
    if ref64 is None or not isinstance(ref64, torch.Tensor) or \
            not (want.is_floating_point() or want.is_complex()):
        return first
    # eager's own rounding: right when no further from float64 than eager is (within
    # SLACK), plus one rounding of the dtype at the result's scale. Where eager is NaN or
    # infinite and float64 is not (an fp16 intermediate overflowed), we must be close to
    # float64 there or not finite either (overflowed too: as wrong as eager, never a
    # finite wrong number); eager's infinite error allows nothing elsewhere.
    if not ref64.is_complex():
        # a value beyond the dtype's range is right as the infinity it rounds to
        rounded = ref64.to(want.dtype).to(ref64.dtype)
        ref64 = torch.where(torch.isinf(rounded), rounded, ref64)
    mine, theirs = _error(got, ref64), _error(want, ref64)
    eps = torch.finfo(want.dtype).eps
    size = ref64.abs().double().nan_to_num(0.0, 0.0, 0.0)
    lost = torch.isinf(theirs)
    overflowed = ~torch.isfinite(got)
    if bool(lost.any()) and not bool(((mine <= SLACK * eps * size + atol) | overflowed)[lost]
                                     .all()):
        return f"{first}; vs float64: compiled {float(mine[lost].max()):.3g} where eager " \
            "is not finite"
    mine, theirs = (float(e[~lost].max()) if bool((~lost).any()) else 0.0
                    for e in (mine, theirs))
    if mine <= SLACK * theirs + eps * float(size.max()) + atol:
        return None
    return f"{first}; vs float64: compiled {mine:.3g}, eager {theirs:.3g}"


def compare(got: Result, want: Result, ref64: Result | None, values: bool = True) -> list[str]:
    """Every way `got` differs from `want` (see `mismatch`)."""
    problems = []
    for kind in ("outputs", "grads", "inputs"):
        g, w = getattr(got, kind), getattr(want, kind)
        r = getattr(ref64, kind) if ref64 is not None else [None] * len(w)
        if len(g) != len(w):
            problems.append(f"{kind}: {len(g)} values where eager gives {len(w)}")
            continue
        if len(r) != len(w):
            r = [None] * len(w)
        for i, (a, b, c) in enumerate(zip(g, w, r)):
            if a is None or b is None:
                if (a is None) != (b is None):
                    problems.append(f"{kind}[{i}]: compiled {'no' if a is None else 'a'} "
                                    f"gradient, eager {'no' if b is None else 'a'} gradient")
                continue
            why = mismatch(a, b, c, f"{kind}[{i}]", values)
            if why:
                problems.append(why)
    return problems


def check_sample(op, mode: str, target: str, sample, seed: int,
                 backend: Any = None) -> list[str]:
    """Run one sample eagerly and compiled; the problems found (empty: right). Errors of the
    compiled run propagate (under FUSIONSTITCH_STRICT an internal error is one)."""
    want, cots = run(eager(op), sample, mode, seed)
    got, _ = run(compiled(op, target, backend), sample, mode, seed, cots=cots)
    values = not op.has_nondeterministic_output
    problems = compare(got, want, None, values)
    if problems:
        try:
            ref64, _ = run(eager(op), sample, mode, seed, convert=to_float64, cots=cots)
        except Exception:   # an op without float64: eager is the only reference
            ref64 = None
        if ref64 is not None:
            problems = compare(got, want, ref64, values)
    return problems


def describe(sample) -> str:
    """A short description of a sample's arguments (shapes, dtypes, values) for messages."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return f"T{list(v.shape)}:{str(v.dtype).removeprefix('torch.')}"
        return repr(v)
    return (f"input={tree_map(one, sample.input)} args={tree_map(one, list(sample.args))} "
            f"kwargs={tree_map(one, dict(sample.kwargs))}")


# --- the sweep outside pytest ----------------------------------------------------------------


def combos(op) -> list[tuple[str, str, str]]:
    """(target, mode, dtype) of every case of `op`: each of its dtypes and modes on `cpu`,
    float32 forward on `interpret`; ("cpu", "fwd", "none") when op_db gives it no dtype
    to run on the CPU."""
    out = [("cpu", mode, dtype) for mode in MODES for dtype in case_dtypes(op, mode)]
    if "float32" in case_dtypes(op, "fwd"):
        out.append(("interpret", "fwd", "float32"))
    return out or [("cpu", "fwd", "none")]


def case_id(op, target: str, mode: str, dtype: str) -> str:
    return f"{op_id(op)}-{dtype}-{mode}-{target}"


def cases(ops, count: int | None, targets=("cpu", "interpret")):
    """(op, dtype, mode, target, samples) for every case of the sweep on `targets`: `count`
    samples on `cpu` (None: all), one on `interpret`."""
    for op in ops:
        for target, mode, dtype in combos(op):
            if target in targets and dtype != "none":
                yield op, dtype, mode, target, 1 if target == "interpret" else count


def _main(argv=None) -> int:
    import argparse
    import json
    import re
    import signal
    import time
    import traceback

    from torch.testing._internal.common_methods_invocations import op_db

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="", help="regex on op ids")
    p.add_argument("--range", default="", help="start:stop[:step] slice of op_db")
    p.add_argument("--samples", default=os.environ.get("FUSIONSTITCH_OPINFO", "ci"))
    p.add_argument("--targets", default="cpu,interpret")
    p.add_argument("--out", default="-", help="jsonl file to append to")
    p.add_argument("--timeout", type=int, default=300, help="seconds per sample")
    p.add_argument("--no-strict", action="store_true",
                   help="let internal errors fall back to torch (counted) instead of raising")
    a = p.parse_args(argv)
    os.environ["FUSIONSTITCH_OPINFO"] = a.samples
    if not a.no_strict:   # as the tests: an internal error is an error of the case
        os.environ["FUSIONSTITCH_STRICT"] = "1"
    print(f"fusionstitch from {Path(fusionstitch.__file__).parent}", file=sys.stderr)
    count = samples_per_case()
    ops = op_db
    if a.range:
        ops = ops[slice(*(int(x) if x else None for x in a.range.split(":")))]
    ops = [o for o in ops if re.search(a.ops, op_id(o))]
    out = open(a.out, "a") if a.out != "-" else None

    def alarm(*_):
        raise TimeoutError("sample took too long")
    signal.signal(signal.SIGALRM, alarm)
    for op, dtype, mode, target, n in cases(ops, count, tuple(a.targets.split(","))):
        try:
            picked = pick_samples(op, dtype, mode, n)
        except Exception as e:
            picked, err = [], f"sample_inputs: {type(e).__name__}: {e}"
        else:
            err = None
        rows = [] if err is None else [dict(status="sample_error", error=err)]
        for i, s in picked:
            row = dict(sample=i, describe=describe(s)[:300])
            seed = seed_of(op_id(op), dtype, mode, i)
            t0 = time.time()
            fusionstitch.reset_stats()
            signal.alarm(a.timeout)
            try:
                problems = check_sample(op, mode, target, s, seed)
                row.update(status="mismatch" if problems else "ok", problems=problems)
            except Exception as e:
                row.update(status="error", error=f"{type(e).__name__}: {str(e)[:2000]}",
                           trace=traceback.format_exc()[-3000:])
            finally:
                signal.alarm(0)
            row.update(seconds=round(time.time() - t0, 3), stats={
                k: v for k, v in fusionstitch.stats().items() if v and k in (
                    "kernels_launched", "library_calls", "fallbacks", "compiles")})
            if row["status"] == "error":
                # torch's own failure: the same error with AOTAutograd and no fusionstitch
                try:
                    signal.alarm(a.timeout)
                    check_sample(op, mode, target, s, seed, backend="aot_eager")
                    row["aot_eager"] = "ok"
                except Exception as e:
                    row["aot_eager"] = f"{type(e).__name__}: {str(e)[:300]}"
                finally:
                    signal.alarm(0)
            rows.append(row)
        for row in rows:
            row.update(op=op_id(op), dtype=dtype, mode=mode, target=target)
            line = json.dumps(row)
            if out:
                out.write(line + "\n")
                out.flush()
            if row["status"] != "ok":
                print(f"{row['op']} {dtype} {mode} {target} #{row.get('sample')}: "
                      f"{row['status']}: {row.get('error') or row.get('problems')}"[:400],
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
