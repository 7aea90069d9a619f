"""Run a fuzzer `Program` eagerly, compiled with fusionstitch, and in float64; compare.

A compiled result is right when (per output, gradient and mutated input):
- it has eager's shape and dtype, and integer and bool values equal eager's exactly;
- NaNs and infinities sit where eager's do;
- its finite values match eager within the output's tolerance (relative, norm-wise;
  `programs.TOLERANCE` by the narrowest float type the value went through), or are
  no further from the float64 run than eager's are (3x, plus the same small slack):
  we may round once where eager rounds per op, and that must not count against us.
- when eager raises, the compiled program raises too; when eager does not, it does not.

With `dynamic=True` (`--dynamic`) the program is compiled with `dynamic=True` (one
symbolic program, frontend/dynamic.py) and checked at its own sizes and again at
`resized` ones (every dim of 2 or more grown, equal dims alike); a program whose body
spells sizes that no longer fit (eager raises at the new sizes) is checked at its own.

Run as a script, it checks one program given as the JSON line a failure prints:

    python tests/fuzz/check.py '<json>' [--target cpu|interpret] [--dynamic]
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F  # noqa: F401  (programs use F)

sys.path.insert(0, os.path.dirname(__file__))
from programs import Program  # noqa: E402

# how much further from float64 than eager a compiled value may be
FLOAT64_FACTOR = 3.0
# norm-wise absolute slack per element, in units of the output's tolerance: values that
# cancel to ~0 compare their rounding noise, which is the inputs' scale, not theirs
ABS_SLACK = 1e-2


@dataclass
class Outcome:
    values: dict = field(default_factory=dict)   # label -> tensor (outputs, grads, inputs)
    error: BaseException | None = None
    views: set = field(default_factory=set)      # outputs that are views of another value


def make_inputs(prog: Program) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(prog.seed)
    out = []
    for inp in prog.inputs:
        dtype = getattr(torch, inp.dtype)
        if inp.fill == "randint":
            t = torch.randint(-20, 21, inp.shape, generator=g, dtype=dtype)
        elif inp.fill == "bool":
            t = torch.rand(inp.shape, generator=g) > 0.5
        elif inp.fill == "uniform":
            t = (torch.rand(inp.shape, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)
        else:
            t = torch.randn(inp.shape, generator=g, dtype=torch.float64).to(dtype)
        if inp.order is not None:   # the same values, laid out in that order
            back = sorted(range(len(inp.order)), key=inp.order.__getitem__)
            t = t.permute(*inp.order).contiguous().permute(*back)
        out.append(t)
    return out


def function(prog: Program):
    scope = {"torch": torch, "F": torch.nn.functional}
    exec(compile(prog.source(), "<fuzz program>", "exec"), scope)
    return scope["program"]


def run(prog: Program, fn, inputs: list[torch.Tensor], float64: bool = False) -> Outcome:
    args = []
    for inp, t in zip(prog.inputs, inputs):
        t = t.clone()
        if float64 and t.is_floating_point():
            t = t.double()
        args.append(t.requires_grad_(inp.grad and t.is_floating_point()))
    res = Outcome()
    try:
        outs = fn(*args)
        for name, o in zip(prog.outputs, outs):
            res.values[name] = o.detach()
            if o._is_view():
                res.views.add(name)
        if prog.train:
            g = torch.Generator().manual_seed(prog.seed + 1)
            loss = 0
            for o in outs:
                if o.is_floating_point() and o.requires_grad:
                    w = torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)
                    loss = loss + (o * w).sum()
            leaves = [a for a in args if a.requires_grad]
            if leaves and isinstance(loss, torch.Tensor):
                grads = torch.autograd.grad(loss, leaves, allow_unused=True)
                for i, gr in enumerate(grads):
                    if gr is not None:
                        res.values[f"grad a{i}"] = gr
        for i, a in enumerate(args):   # inputs a program updated in place
            res.values[f"input a{i}"] = a.detach()
    except Exception as e:   # eager errors are part of the semantics
        res.error = e
    return res


def _mismatch(label: str, c: torch.Tensor, e: torch.Tensor, r: torch.Tensor | None,
              tol: float) -> str | None:
    if c.shape != e.shape or c.dtype != e.dtype:
        return f"{label}: compiled {c.dtype}{tuple(c.shape)}, eager {e.dtype}{tuple(e.shape)}"
    if not (e.is_floating_point() or e.is_complex()):
        if torch.equal(c, e):
            return None
        bad = (c != e).nonzero()[:3].tolist()
        return f"{label}: integer values differ at {bad}"
    if c.numel() == 0:
        return None
    for what, fn in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        if not torch.equal(fn(c), fn(e)):
            return f"{label}: {what} at other places than eager's"
    finite = torch.isfinite(e)
    c64, e64 = c[finite].double(), e[finite].double()
    slack = ABS_SLACK * tol * math.sqrt(max(1, c64.numel()))
    d_ce = (c64 - e64).norm().item()
    if d_ce <= tol * e64.norm().item() + slack:
        return None
    if r is not None and r.shape == e.shape:
        r64 = r[finite].double()
        d_cr, d_er = (c64 - r64).norm().item(), (e64 - r64).norm().item()
        if d_cr <= FLOAT64_FACTOR * d_er + slack:
            return None
        return (f"{label}: |compiled-eager| {d_ce:.3g} (|eager| {e64.norm().item():.3g}, "
                f"tol {tol:g}); |compiled-f64| {d_cr:.3g} > {FLOAT64_FACTOR}x |eager-f64| "
                f"{d_er:.3g}")
    return f"{label}: |compiled-eager| {d_ce:.3g} > tol {tol:g} x |eager| {e64.norm().item():.3g}"


def _layout_mismatch(label: str, c: torch.Tensor, e: torch.Tensor) -> str | None:
    """An output the caller sees comes in eager's memory layout where eager's is dense
    and not row-major (frontend/output_layout.py): `.view` after a permute, or
    `is_contiguous()`, behave as in eager."""
    shape = tuple(e.shape)
    if e.layout != torch.strided or e.numel() <= 1 or not _dense(shape, e.stride()):
        return None
    same = all(a == b for a, b, d in zip(c.stride(), e.stride(), shape) if d > 1)
    return None if same else (f"{label}: compiled strides {c.stride()}, eager's "
                              f"{e.stride()} (shape {list(shape)})")


def _dense(shape, stride) -> bool:
    n = 1
    for s, d in sorted((s, d) for s, d in zip(stride, shape) if d != 1):
        if s != n:
            return False
        n *= d
    return True


def traced_strides(prog: Program, fn, inputs: list[torch.Tensor]) -> dict:
    """Output name -> its strides as torch's fake tensors give them (what Dynamo's graph
    records, and so what a backend knows of eager's layout); {} where fake tensors cannot
    run the program (a data-dependent shape)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    try:
        with FakeTensorMode(allow_non_fake_inputs=False) as mode:
            fakes = [mode.from_tensor(t) for t in inputs]
            outs = fn(*fakes)
        return {name: tuple(o.stride()) for name, o in zip(prog.outputs, outs)
                if isinstance(o, torch.Tensor)}
    except Exception:   # noqa: BLE001 - no reference layout: nothing to check
        return {}


def compare(prog: Program, got: Outcome, eager: Outcome, ref: Outcome | None,
            layouts: dict | None = None) -> str | None:
    """Why the compiled outcome is wrong, or None. `layouts` (`traced_strides`): the
    outputs' memory layouts must be eager's too, where torch's own tracing gives eager's
    (fake tensors mispredict a few ops' layouts, e.g. `xlogy` of a transposed and a
    row-major tensor: no backend can know those)."""
    if eager.error is not None:
        if got.error is None:
            return f"eager raised {type(eager.error).__name__}: {eager.error}; compiled did not"
        return None
    if got.error is not None:
        return f"compiled raised {type(got.error).__name__}: {got.error}"
    if set(got.values) != set(eager.values):
        return f"compiled gave {sorted(got.values)}, eager {sorted(eager.values)}"
    base = min(prog.tolerance.values(), default=1e-4)
    for label, e in eager.values.items():
        tol = prog.tolerance.get(label, max(prog.tolerance.values(), default=base))
        r = None if ref is None or ref.error is not None else ref.values.get(label)
        why = _mismatch(label, got.values[label], e, r, tol)
        if why:
            return why
        traced = (layouts or {}).get(label)
        if prog.train and label in eager.views:
            traced = None   # rebuilt by AOTAutograd from its base: not ours to lay out
        if traced is not None and all(a == b for a, b, d in zip(traced, e.stride(), e.shape)
                                      if d > 1):
            why = _layout_mismatch(label, got.values[label], e)
            if why:
                return why
    return None


def resized(prog: Program) -> Program:
    """`prog` with inputs of other sizes: each distinct dim of 2 or more grows by a
    distinct amount (equal dims stay equal, so broadcasting is kept; 0 and 1 stay)."""
    from dataclasses import replace
    dims = sorted({d for i in prog.inputs for d in i.shape if d >= 2})
    grown = {d: d + 1 + k for k, d in enumerate(dims)}
    return replace(prog, inputs=[replace(i, shape=tuple(grown.get(d, d) for d in i.shape))
                                 for i in prog.inputs])


def check(prog: Program, target: str = "cpu", dynamic: bool = False) -> str | None:
    """Run `prog` three ways; the reason the compiled run is wrong, or None."""
    import fusionstitch
    fn = function(prog)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=fusionstitch.backend(target=target), dynamic=dynamic)
    for k, p in enumerate((prog, resized(prog)) if dynamic else (prog,)):
        inputs = make_inputs(p)
        eager = run(p, fn, inputs)
        if k and eager.error is not None:   # sizes spelled in the body: not resizable
            break
        ref = run(p, fn, inputs, float64=True)
        got = run(p, compiled, inputs)
        if eager.error is not None and got.error is None:
            # eager may have raised in dead code, which torch.compile drops (AOTAutograd's
            # dead-code elimination, for every backend): judge against the live part
            live = p.live()
            if live.body != p.body:
                live_fn = function(live)
                eager = run(live, live_fn, inputs)
                ref = run(live, live_fn, inputs, float64=True)
        why = compare(p, got, eager, ref, layouts=traced_strides(p, fn, inputs))
        if why is not None:
            sizes = [list(i.shape) for i in p.inputs]
            return f"{why} (inputs of sizes {sizes})" if k else why
    return None


def repro_line(prog: Program, target: str, dynamic: bool = False) -> str:
    return (f"python tests/fuzz/check.py '{prog.to_json()}' --target {target}"
            + (" --dynamic" if dynamic else ""))


def main(argv: list[str]) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("program", help="the JSON line a failure printed")
    p.add_argument("--target", default="cpu")
    p.add_argument("--dynamic", action="store_true",
                   help="compile with dynamic=True and check at two sizes")
    a = p.parse_args(argv)
    os.environ.setdefault("FUSIONSTITCH_STRICT", "1")
    prog = Program.from_json(a.program)
    print(prog.source())
    why = check(prog, a.target, a.dynamic)
    print("OK" if why is None else f"MISMATCH: {why}")
    return 0 if why is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
