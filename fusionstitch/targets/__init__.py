"""Compilation targets (base.py): one object per place a plan can run."""
from __future__ import annotations

from .base import Language, Target
from .cpp import CPU
from .torch import TORCH
from .triton import CUDA, INTERPRET

TARGETS: dict[str, Target] = {t.name: t for t in (CPU, CUDA, INTERPRET, TORCH)}


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


__all__ = ["Language", "Target", "TARGETS", "resolve", "CPU", "CUDA", "INTERPRET", "TORCH"]
