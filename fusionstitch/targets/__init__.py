"""Compilation targets (base.py): one object per place a plan can run.

`TARGETS` is the registry: the options (config.py, which sits below this package and
receives the registry when it is imported), the CLI, the frontend's device checks, the
tuner and the runtime read it or the Target it resolves to, so a target added here is
accepted everywhere with no other edit."""
from __future__ import annotations

from .. import config
from .base import Language, Target
from .cpp import CPU
from .torch import TORCH
from .triton import CUDA, INTERPRET

TARGETS: dict[str, Target] = {t.name: t for t in (CPU, CUDA, INTERPRET, TORCH)}
config.use_targets(TARGETS)


def resolve(target: str | Target) -> Target:
    """The Target named `target` (a Target is returned as it is); `auto` is resolved
    before this, by the options (config.Options.resolved_target)."""
    if isinstance(target, Target):
        return target
    try:
        return TARGETS[target]
    except KeyError:
        raise ValueError(f"fusionstitch: unknown target {target!r}; expected one of "
                         f"{', '.join(TARGETS)}") from None


def device_types() -> set[str]:
    """The torch device types some target runs on."""
    return {t.device_type for t in TARGETS.values() if t.device_type is not None}


__all__ = ["Language", "Target", "TARGETS", "resolve", "device_types", "CPU", "CUDA",
           "INTERPRET", "TORCH"]
