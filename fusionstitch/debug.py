"""The debug folder (FUSIONSTITCH_DEBUG_DIR), one subfolder per compiled graph:

    01_frontend.txt      the IR straight from the frontend (parses back with ir.text.parse)
    02_fold_views.txt …  the IR after each canonicalisation pass, numbered in order
    NN_<strategy>_plan.txt  the fusion plan: groups, composition, schedule spaces
    kernels/k<group>.py|.cpp  every generated kernel's source (Triton or C++), headed by
                         the group it came from and its kernel IR
    repro.py             a runnable script: re-plans 01_frontend.txt and checks the plan
                         against the unfused execution on random inputs

A debug folder that cannot be written gives one warning per folder and the compile
goes on without the dump (a dump is for reading, never a reason to fall back).
"""
from __future__ import annotations

import itertools
import logging
import os
from typing import Any, Callable

from . import config

log = logging.getLogger("fusionstitch.report")
_WARNED: set[str] = set()


def _cannot_write(root: str, e: OSError) -> None:
    if root not in _WARNED:
        _WARNED.add(root)
        log.warning("fusionstitch: the debug folder %s cannot be written (%s); compiling "
                    "without the dump", root, e)

REPRO = '''"""Repro for graph {graph}: python repro.py  (strategy {strategy}, target {target}).

Re-runs canonicalisation and planning on 01_frontend.txt, executes the plan and the
unfused graph on the same random inputs (CPU tensors, on target {runner}), and prints the
largest difference. FUSIONSTITCH_FUEL=N plans with at most N fusions (bisect a
miscompile to the one fusion that causes it).
"""
import os
import pathlib

import torch

from fusionstitch.config import fuel
from fusionstitch.fusion import make_plan, plan_none
from fusionstitch.ir.text import parse
from fusionstitch.passes.pipeline import canonicalize
from fusionstitch.runtime.program import Program
from fusionstitch.targets import resolve

os.environ.setdefault("FUSIONSTITCH_PLAN_CACHE", "0")  # plan again, never load the plan
here = pathlib.Path(__file__).parent
# the target's own rewrites (conv_layout) too; which outputs a backward alone reads is
# not in the text, so those keep eager's layout here
graph = canonicalize(parse((here / "01_frontend.txt").read_text()), verify=True,
                     target=resolve("{target}"))
plan = make_plan(graph, "{strategy}", "{target}", fuel=fuel())
print(plan.to_text())
gen = torch.Generator().manual_seed(0)
inputs = []
for p in graph.params:
    t = p.type
    if t.torch_dtype.is_floating_point:
        inputs.append(torch.randn(t.shape, generator=gen).to(t.torch_dtype))
    elif t.torch_dtype == torch.bool:
        inputs.append(torch.rand(t.shape, generator=gen) > 0.5)
    else:  # integers are often indices: zeros are always in range
        inputs.append(torch.zeros(t.shape, dtype=t.torch_dtype))
got = Program(plan, None, "{runner}")(inputs)
ref = Program(plan_none(graph))(inputs)
worst = 0.0
for g, r in zip(got, ref):
    if isinstance(r, torch.Tensor) and r.numel():
        worst = max(worst, (g.double() - r.double()).abs().max().item())
print(f"{{plan.num_kernels}} kernels, {{plan.num_library_calls}} library calls; "
      f"max abs difference vs unfused: {{worst:.3g}}")
'''


def dumper(graph_name: str, strategy: str, target) -> Callable[[str, Any], None] | None:
    """A dump(stage, obj) writer for one graph planned for `target` (a Target), or None
    when no debug folder is set."""
    root = config.debug_dir()
    if not root:
        return None
    folder = os.path.join(root, graph_name)
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "repro.py"), "w") as f:
            f.write(REPRO.format(graph=graph_name, strategy=strategy, target=target.name,
                                 runner=target.host_twin or target.name))
    except OSError as e:
        _cannot_write(root, e)
        return None
    counter = itertools.count(1)

    def dump(stage: str, obj: Any) -> None:
        path = os.path.join(folder, f"{next(counter):02d}_{stage}.txt")
        text = obj.to_text() if hasattr(obj, "to_text") else str(obj)
        try:
            with open(path, "w") as f:
                f.write(text if text.endswith("\n") else text + "\n")
        except OSError as e:   # the folder went away, the disk is full
            _cannot_write(root, e)
    dump.folder = folder  # type: ignore[attr-defined]
    return dump


def dump_kernels(folder: str, plan, steps: dict, target: str) -> None:
    """Write each generated kernel's source, with its group and kernel IR as a header."""
    from .targets.source import kernel_source
    out = os.path.join(folder, "kernels")
    try:
        os.makedirs(out, exist_ok=True)
        for g in plan.groups:
            step = steps.get(g.id)
            if step is None:
                continue
            ks = kernel_source(plan, g, target, step.kernel)
            if ks.source:
                with open(os.path.join(out, ks.file_name), "w") as f:
                    f.write(ks.file_text)
    except OSError as e:
        _cannot_write(os.path.dirname(folder), e)
