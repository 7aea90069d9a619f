"""A kernel's cuda source compiled by Triton for sm_90 with no GPU (shared by test files):
catches type errors of loop-carried values, tl.dot shapes, constexpr branches and the like."""
import importlib.util
import os
import tempfile

import pytest


def or_skip(compile_):
    """`compile_()`, skipping the test where Triton has no NVIDIA backend (no ptxas)."""
    try:
        return compile_()
    except RuntimeError as e:      # a toolchain without the NVIDIA backend
        if "ptxas" in str(e) or "backend" in str(e):
            pytest.skip(str(e))
        raise


def compile_sm90(k, **meta_overrides):
    """(source, compiled kernel) of Kernel `k` for sm_90: every component's constexprs at
    the lowering-time sizes (a sym's value, else 1) and the kernel's launch options
    (printer.launch_options), `meta_overrides` laid over them (say SPLIT0=8, STAGE=1).
    Skips where Triton has no NVIDIA backend."""
    from triton.runtime.jit import JITFunction

    from fusionstitch.targets.triton.printer import _meta, launch_options, triton_source
    from fusionstitch.targets.triton.resources import compile_for
    name, src = triton_source(k, interpret=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.py")
        with open(path, "w") as fh:
            fh.write(src)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = JITFunction(getattr(module, name))
        env = {s.name: s.value or 1 for s in k.syms}
        meta = dict(launch_options(k))
        for i, c in enumerate(k.components):
            meta.update(_meta(c, f"{i}", env, False))
        if "STAGE" in fn.arg_names:
            meta["STAGE"] = 2
        meta.update(meta_overrides)
        return src, or_skip(lambda: compile_for(fn, k, meta, 90))
