"""A kernel's cuda source compiled by Triton for sm_90 with no GPU (shared by test files):
catches type errors of loop-carried values, tl.dot shapes, constexpr branches and the like."""
import importlib.util
import os
import tempfile

import pytest

PTR = {"f32": "*fp32", "f16": "*fp16", "bf16": "*bf16", "f64": "*fp64", "i64": "*i64",
       "i32": "*i32", "i16": "*i16", "i8": "*i8", "u8": "*u8", "b8": "*i1"}


def compile_sm90(k, **meta_overrides):
    """(source, compiled kernel) of Kernel `k` for sm_90: every component's constexprs at
    the lowering-time sizes (a sym's value, else 1), `meta_overrides` laid over them (say
    SPLIT0=8, STAGE=1). Skips where Triton has no NVIDIA backend."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    from fusionstitch.targets.triton import split as S
    from fusionstitch.targets.triton.printer import _meta, triton_source
    name, src = triton_source(k, interpret=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.py")
        with open(path, "w") as fh:
            fh.write(src)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = JITFunction(getattr(module, name))
        sig = {b.name: PTR[b.dtype] for b in k.buffers}
        env = {s.name: s.value or 1 for s in k.syms}
        sig.update({s.name: "i32" for s in k.syms})
        for i, c in enumerate(k.components):
            if S.splittable(c):
                sig.update({ws: PTR[r.dtype] for ws, r in
                            zip(S.workspace_names(c, f"{i}"), S.reductions(c))})
        if len(k.components) > 1:
            sig.update({f"pstart{i}": "i32" for i in range(len(k.components))})
        meta = {}
        for i, c in enumerate(k.components):
            meta.update(_meta(c, f"{i}", env, False))
        if "STAGE" in fn.arg_names:
            meta["STAGE"] = 2
        meta.update(meta_overrides)
        consts = {}
        for p, v in meta.items():
            sig[p] = "constexpr"
            consts[(fn.arg_names.index(p),)] = v
        try:
            return src, triton.compile(ASTSource(fn, sig, consts),
                                       target=GPUTarget("cuda", 90, 32))
        except RuntimeError as e:      # a toolchain without the NVIDIA backend
            if "ptxas" in str(e) or "backend" in str(e):
                pytest.skip(str(e))
            raise
