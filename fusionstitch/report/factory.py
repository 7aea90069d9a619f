"""What `fusionstitch explain TARGET` explains: a zoo workload or a factory in a Python file.

    transformer_encoder          zoo workload, small size
    transformer_encoder:full     zoo workload, full size
    path/to/model.py:make        make() returns (fn, example_args) [or (fn, args, mode)]
"""
from __future__ import annotations

import importlib.util
import os
import sys

SIZES = ("small", "full")
MODES = ("train", "inference")


class TargetError(ValueError):
    """A TARGET that cannot be loaded; the message says what was expected."""


def _workloads():
    """bench/ lives beside the package in the repository; make it importable."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        from bench import workloads
    except ImportError as e:
        raise TargetError(f"the model zoo (bench/workloads.py) is not importable here ({e}); "
                          f"use path/to/file.py:factory instead") from None
    return workloads


def _load_zoo(spec: str):
    name, _, size = spec.partition(":")
    size = size or "small"
    if size not in SIZES:
        raise TargetError(f"target {spec!r}: size must be one of {', '.join(SIZES)}, "
                          f"not {size!r} (expected NAME, NAME:small or NAME:full)")
    W = _workloads()
    if name not in W.WORKLOADS:
        raise TargetError(f"target {spec!r}: no zoo workload {name!r} and not a "
                          f"path/to/file.py:factory; zoo workloads: {', '.join(W.names())}")
    inst = W.make(name, size)
    return inst.fn, tuple(inst.args), inst.workload.mode


def _import_file(path: str):
    mod_name = "fusionstitch_target_" + "".join(
        c if c.isalnum() else "_" for c in os.path.splitext(os.path.abspath(path))[0])
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot import {path!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module   # dataclasses and pickling look modules up by name
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)       # so the file can import its neighbours
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[mod_name]
        raise
    finally:
        sys.path.remove(folder)
    return module


def _load_file(spec: str, path: str, factory: str):
    if not factory:
        raise TargetError(f"target {spec!r}: name the factory function, as in "
                          f"{path}:make (it returns (fn, example_args))")
    if not os.path.isfile(path):
        raise TargetError(f"target {spec!r}: no file {path!r} (expected "
                          f"path/to/file.py:factory)")
    module = _import_file(path)
    fn_factory = getattr(module, factory, None)
    if fn_factory is None:
        found = sorted(k for k, v in vars(module).items()
                       if callable(v) and not k.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise TargetError(f"target {spec!r}: {path} has no function {factory!r} "
                          f"(functions there: {', '.join(found) or 'none'})")
    if not callable(fn_factory):
        raise TargetError(f"target {spec!r}: {path}:{factory} is a "
                          f"{type(fn_factory).__name__}, not a function")
    got = fn_factory()
    shape = "a (fn, example_args) tuple, optionally with a third item 'train' or 'inference'"
    if not isinstance(got, tuple) or len(got) not in (2, 3):
        what = (f"a {len(got)}-tuple" if isinstance(got, tuple) else type(got).__name__)
        raise TargetError(f"target {spec!r}: {factory}() returned {what}; expected {shape}")
    fn, args = got[0], got[1]
    mode = got[2] if len(got) == 3 else "train"
    if not callable(fn):
        raise TargetError(f"target {spec!r}: {factory}() returned a {type(fn).__name__} as fn; "
                          f"expected a callable (function or nn.Module)")
    if not isinstance(args, (tuple, list)):
        raise TargetError(f"target {spec!r}: {factory}() returned a {type(args).__name__} as "
                          f"example_args; expected a tuple or list of arguments")
    if mode not in MODES:
        raise TargetError(f"target {spec!r}: {factory}() returned mode {mode!r}; "
                          f"expected one of {', '.join(MODES)}")
    return fn, tuple(args), mode


def load_target(spec: str):
    """`(fn, args, mode)` for a TARGET: a zoo name (`name`, `name:small`, `name:full`) or
    `path/to/file.py:factory`, where `factory()` returns `(fn, example_args)`.

    `mode` is "train" or "inference"; explain an inference target under torch.no_grad().
    A file's factory may add a third item to choose the mode; by default it is "train"
    (grad enabled: the backward is planned when an output needs grad).
    Raises TargetError, whose message names what was expected.
    """
    path, sep, factory = spec.rpartition(":")
    if spec.endswith(".py"):
        return _load_file(spec, spec, "")
    if sep and (path.endswith(".py") or "/" in path or os.sep in path):
        return _load_file(spec, path, factory)
    if "/" in spec or os.sep in spec:
        return _load_file(spec, spec, "")
    return _load_zoo(spec)
