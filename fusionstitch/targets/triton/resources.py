"""What a `cuda` kernel's launches need on chip, found by compiling them for a GPU
architecture on any machine: no GPU, no driver (Triton's own compiler and the ptxas its
wheel carries).

Triton checks a binary's shared memory against the device's only when it loads it, at
the first launch (`OutOfResources`); a kernel that does not fit shows up there and
nowhere else. `launch_resources` compiles exactly the launches the runtime would make
for some sizes (`TritonKernel.configure`: blocks, variant, options) for `arch`, so a test
on a CPU machine checks what a GPU would refuse. `SHARED_LIMIT` holds the most shared
memory one program may take on each architecture (CUDA's opt-in limit per block, which
Triton asks for): sm_80 (A100) 163 KiB, sm_86/sm_89 99 KiB, sm_90 (H100, H200) 227 KiB.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.graph import dtype_name

SHARED_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}

# launch arguments that are compile options, not kernel parameters
_OPTIONS = ("num_warps", "num_stages")
# IR dtype name -> Triton's signature type of a pointer to it
_POINTER = {"f16": "*fp16", "bf16": "*bf16", "f32": "*fp32", "f64": "*fp64", "i8": "*i8",
            "u8": "*u8", "i16": "*i16", "i32": "*i32", "i64": "*i64", "b8": "*i1"}


@dataclass(frozen=True)
class LaunchResources:
    """One compiled launch: its constexprs and what the binary takes."""

    meta: dict
    shared: int        # bytes of shared memory one program takes
    num_warps: int
    num_stages: int


def _pointer(dtype) -> str:
    """Triton's pointer type for a torch dtype or an IR dtype name."""
    return _POINTER[dtype if isinstance(dtype, str) else dtype_name(dtype)]


def compile_for(fn, kernel, meta: dict, arch: int = 90, workspace_dtypes=None):
    """Triton's compiled kernel of JITFunction `fn` (Kernel `kernel`'s source) for
    sm_`arch` with launch constants `meta`: its constexprs, plus `num_warps` /
    `num_stages` where the launch sets them. `workspace_dtypes`: the dtypes of the split
    reductions' workspaces, in order (default: each reduction's own)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile as triton_compile

    from . import split as S
    from .printer import workspaces
    sig = {b.name: _pointer(b.dtype) for b in kernel.buffers}
    sig.update({s.name: "i32" for s in kernel.syms})
    if workspace_dtypes is None:
        workspace_dtypes = [r.dtype for c in kernel.components if S.splittable(c)
                            for r in S.reductions(c)]
    sig.update({n: _pointer(dt) for n, dt in zip(workspaces(kernel), workspace_dtypes)})
    if len(kernel.components) > 1:
        sig.update({f"pstart{i}": "i32" for i in range(len(kernel.components))})
    options = {o: meta[o] for o in _OPTIONS if o in meta}
    consts = {n: v for n, v in meta.items() if n not in options}
    sig.update({n: "constexpr" for n in consts})
    if list(sig) != list(fn.arg_names):
        raise ValueError(f"kernel parameters {fn.arg_names} but signature {list(sig)}")
    src = ASTSource(fn, sig, constexprs={(fn.arg_names.index(n),): v
                                         for n, v in consts.items()})
    return triton_compile(src, target=GPUTarget("cuda", arch, 32), options=options)


def launch_resources(tk, syms: list[int], arch: int = 90) -> list[LaunchResources]:
    """Compile each launch `tk` (a printer.TritonKernel of target `cuda`) makes with
    `syms` for sm_`arch`, and report each binary's shared memory."""
    launch = tk.configure(syms)
    if launch is None:
        return []
    launches, ws = launch
    out = []
    for _, _, meta in launches:
        md = compile_for(tk.fn, tk.kernel, meta, arch, [dt for _, dt in ws]).metadata
        consts = {n: v for n, v in meta.items() if n not in _OPTIONS}
        out.append(LaunchResources(consts, md.shared, md.num_warps, md.num_stages))
    return out
