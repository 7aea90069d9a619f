"""Options and environment knobs. Every knob here is in the README's table."""
from __future__ import annotations

import os
from dataclasses import dataclass

STRATEGIES = ("none", "xla", "stitch")
TARGETS = ("auto", "cuda", "cpu", "interpret")


def env_flag_default(name: str, default: bool) -> bool:
    """A boolean knob that is `default` when unset or empty; 0/false/no/off are off."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    return value not in ("0", "false", "no", "off")


def env_flag(name: str) -> bool:
    """A boolean knob that is off unless set."""
    return env_flag_default(name, False)


def disabled() -> bool:
    """FUSIONSTITCH_DISABLE=1: run graphs unfused through torch (the kill switch)."""
    return env_flag("FUSIONSTITCH_DISABLE")


def debug_dir() -> str | None:
    """FUSIONSTITCH_DEBUG_DIR: where per-pass dumps and plans are written."""
    return os.environ.get("FUSIONSTITCH_DEBUG_DIR") or None


def plan_cache_enabled() -> bool:
    """FUSIONSTITCH_PLAN_CACHE=0 turns the plan cache off (on by default)."""
    return env_flag_default("FUSIONSTITCH_PLAN_CACHE", True)


def graph_cache_enabled() -> bool:
    """FUSIONSTITCH_GRAPH_CACHE=0 turns the cache of AOTAutograd's graphs off (on by default)."""
    return env_flag_default("FUSIONSTITCH_GRAPH_CACHE", True)


def verify_enabled() -> bool:
    """FUSIONSTITCH_VERIFY=1: run the IR verifier between passes (debug mode)."""
    return env_flag("FUSIONSTITCH_VERIFY")


@dataclass(frozen=True)
class Options:
    """What `fusionstitch.backend(...)` was asked for; validated on construction."""

    strategy: str = "stitch"
    target: str = "auto"
    cuda_graphs: bool = False

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"fusionstitch: unknown strategy {self.strategy!r}; expected one "
                             f"of {', '.join(STRATEGIES)}")
        if self.target not in TARGETS:
            raise ValueError(f"fusionstitch: unknown target {self.target!r}; expected one of "
                             f"{', '.join(TARGETS)}")

    def resolved_target(self) -> str:
        if self.target != "auto":
            return self.target
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
