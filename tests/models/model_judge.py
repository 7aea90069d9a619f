"""Run a model workload eagerly, compiled and in float64, and judge the compiled numbers.

Shared by test_models_text.py and test_models_vision.py (cpu target, every model of
bench/models.py, split in two files so that `make test`'s two workers share them) and
test_models_interpret.py.

FUSIONSTITCH_MODELS picks what the cpu files run: unset or `small` is CI's share (every
model, both modes, at the small size); `full` runs the bench's larger sizes; a
comma-separated list of architectures (`gpt2,llama`) runs those at the small size.

Two calls of each: the compiled outputs and gradients of the first call are judged after
the second call ran, so a buffer the second call recycled while the first call's results
still lived would show. Every tensor of each call is judged by bench/judge.py's rules
(outputs, the loss, the gradient of every parameter, every floating buffer): within
RTOL = 1e-4 of eager fp32, norm-wise (a gradient that is zero in exact arithmetic against
the model's largest gradient norm), and no further from the float64 run than SLACK = 3x
eager's own distance (or 16 roundings where eager is closer than that). A convolutional
network is run eagerly in its other memory layout too (`<arch>_train` and
`<arch>_train_cl` are twins), and each tensor is judged against the nearer and the
farther of eager's two (bench/judge.py): the cpu target runs convolutions channels-last
(passes/conv_layout.py), where oneDNN rounds otherwise than NCHW.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import fusionstitch
from bench import models as M
from bench.judge import judge_tensors
from bench.workloads import loss_of
from fusionstitch.report.explain import flat_tensors

# the fallbacks every test allows (tests/frontend: the folders have no __init__.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "frontend"))
import known_fallbacks  # noqa: E402

RTOL = 1e-4     # fp32, relative, norm-wise (bench/judge.py's rules)
SLACK = 3.0     # no further from float64 than 3x eager's own distance

# model workload -> reason its numbers are known to miss the bar (xfail, strict): none
KNOWN_BAD: dict[str, str] = {}

# model workload -> (slack, reason): a wider SLACK where the 3x-eager rule measures
# eager's luck on some CPUs rather than our error (a wrong number is orders of magnitude
# past either)
SLACK_FOR: dict[str, tuple[float, str]] = {}

_KNOB = os.environ.get("FUSIONSTITCH_MODELS", "small")
SIZE = "full" if _KNOB == "full" else "small"


def selected(archs) -> list:
    """pytest params `<arch>_infer`, `<arch>_train` of the `archs` the knob selects."""
    if _KNOB not in ("small", "full"):
        archs = [a for a in archs if a in _KNOB.split(",")]
    out = []
    for arch in archs:
        for mode in ("infer", "train"):
            name = f"{arch}_{mode}"
            marks = [pytest.mark.xfail(reason=KNOWN_BAD[name], strict=True)] \
                if name in KNOWN_BAD else []
            out.append(pytest.param(name, marks=marks, id=name))
    return out


@dataclass
class Call:
    outputs: list      # the tensors the call returned (not copied)
    grads: list        # .grad of each parameter after the call (not copied), or None
    buffers: list      # copies of the floating buffers after the call


def call(inst, fn) -> Call:
    """One step of a model workload: train mode backpropagates its loss."""
    if inst.workload.mode == "train":
        for p in inst.grad_params:
            p.grad = None
        out = fn(*inst.args)
        loss_of(inst.workload, out).backward()
        grads = [p.grad for p in inst.grad_params]
    else:
        with torch.no_grad():
            out = fn(*inst.args)
        grads = []
    return Call([o.detach() for o in flat_tensors(out)], grads,
                [b.detach().clone() for b in inst.mutated])


def twin(name: str) -> str | None:
    """The same model workload in the other memory layout (`resnet_train` <->
    `resnet_train_cl`), if bench/models.py has it."""
    other = name[:-3] if name.endswith("_cl") else name + "_cl"
    return other if other in M.names(channels_last=True) else None


def judge(name: str, compiled: list[Call], eager: list[Call], exact: list[Call],
          param_names: list[str], eager_twin: list[Call] | None = None) -> list[str]:
    """Every tensor that breaks a rule of bench/judge.py, as a readable line (empty: all
    good). `eager_twin`: eager's calls in the model's other memory layout (`twin`)."""
    bad = []
    for k, (c, e, f) in enumerate(zip(compiled, eager, exact)):
        t = eager_twin[k] if eager_twin else None
        where = f"{name} call {k + 1}"
        if len(c.outputs) != len(e.outputs):
            bad.append(f"{where}: {len(c.outputs)} outputs, eager has {len(e.outputs)}")
        def alt(part: str, i: int) -> tuple:
            return (getattr(t, part)[i],) if t is not None else ()
        items = [(f"{where} output {i}", *v, False, alt("outputs", i)) for i, v in enumerate(
            zip(c.outputs, e.outputs, f.outputs))]
        items += [(f"{where} grad {param_names[i]}", *v, True, alt("grads", i))
                  for i, v in enumerate(zip(c.grads, e.grads, f.grads))]
        items += [(f"{where} buffer {i}", *v, False, alt("buffers", i)) for i, v in enumerate(
            zip(c.buffers, e.buffers, f.buffers))]
        bad += judge_tensors(items, RTOL, SLACK_FOR.get(name, (SLACK, ""))[0])
    return bad


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def compare_model(name: str, size: str, target: str, **overrides) -> tuple[list[str], list]:
    """Eager, compiled (two calls each) and float64 runs of model workload `name`: what
    `judge` finds, and fusionstitch's (stats(), the frontend's warnings) of each compiled
    call."""
    eager = M.make(name, size, **overrides)
    ref = [call(eager, eager.fn) for _ in range(2)]
    other, other_ref = twin(name), None
    if other is not None:
        other_eager = M.make(other, size, **overrides)
        other_ref = [call(other_eager, other_eager.fn) for _ in range(2)]
    exact64 = M.make(name, size, dtype=torch.float64, **overrides)
    exact = [call(exact64, exact64.fn) for _ in range(2)]
    inst = M.make(name, size, **overrides)
    compiled_fn = torch.compile(inst.fn, backend=fusionstitch.backend(target=target))
    got, runs = [], []
    frontend = logging.getLogger("fusionstitch.frontend")
    for _ in range(2):
        fusionstitch.reset_stats()
        records = _Records()
        frontend.addHandler(records)
        try:
            got.append(call(inst, compiled_fn))
        finally:
            frontend.removeHandler(records)
        runs.append((fusionstitch.stats(), records.records))
    param_names = [n for n, p in inst.fn.named_parameters() if p.requires_grad]
    return judge(name, got, ref, exact, param_names, other_ref), runs


def check_model(name: str, size: str, target: str, **overrides) -> None:
    """compare_model, asserted: every tensor judged good, kernels of ours ran in each
    call, and every fallback is counted, logged with its cause and one that
    tests/frontend/known_fallbacks.py allows (a lowering no code generator has yet)."""
    bad, runs = compare_model(name, size, target, **overrides)
    assert not bad, f"{len(bad)} tensors off:\n" + "\n".join(bad[:25])
    (first, logged), (second, again) = runs
    # the first call compiles every graph: one warning per graph names its fallbacks
    known_fallbacks.check_logged(first, logged, name)
    assert not [r for r in again if "through torch" in r.getMessage()], \
        [r.getMessage() for r in again]   # the second call compiles nothing new
    assert second["fallbacks"] == first["fallbacks"], (first, second)
    assert first["kernels_launched"] > 0 and second["kernels_launched"] > 0, runs
