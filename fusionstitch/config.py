"""Options and environment knobs. Every knob here is in the README's table."""
from __future__ import annotations

import os
from dataclasses import dataclass

# the package version (fusionstitch.__version__), here so that lower layers read it
__version__ = "0.1.0"

STRATEGIES = ("none", "xla", "stitch")
# `target="auto"`: the target marked `auto` for the inputs' device type (Target.auto)
AUTO = "auto"
# The registry of compilation targets, name -> Target (targets/__init__.py's TARGETS),
# handed over when the targets package is imported: config sits below it and imports
# none. The options read it by duck (a target's `selectable`, `device_type`, `auto`), so
# a target added there is accepted here with no other edit.
_targets: dict = {}


def use_targets(registry: dict) -> None:
    """Take the target registry (called once, by the targets package)."""
    global _targets
    _targets = registry


def target_names() -> tuple[str, ...]:
    """What `target=` accepts: `auto`, then every selectable target, in registry order."""
    if not _targets:   # fusionstitch/__init__ imports the targets before any option is made
        raise RuntimeError("fusionstitch: no target is registered (import fusionstitch, "
                           "which imports fusionstitch.targets)")
    return (AUTO, *(name for name, t in _targets.items() if t.selectable))


def auto_target(device_type: str) -> str:
    """The target `auto` picks for inputs on `device_type`; for a device no target marks
    (or without inputs), the CPU's."""
    picks = {t.device_type: name for name, t in _targets.items() if t.auto}
    return picks.get(device_type) or picks["cpu"]   # torch device types, not target names


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


def fuel() -> int | None:
    """FUSIONSTITCH_FUEL=N: planning applies at most N fusions, so that a miscompile can be
    bisected to the one fusion that causes it; unset or empty: no limit. Read once per
    compilation by the driver (compile.py), which hands it to the planner."""
    value = os.environ.get("FUSIONSTITCH_FUEL", "").strip()
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"fusionstitch: FUSIONSTITCH_FUEL={value!r}; expected a number of "
                         "fusions (0, 1, 2, ...)")
    return n


def graph_cache_enabled() -> bool:
    """FUSIONSTITCH_GRAPH_CACHE=0 turns the cache of AOTAutograd's graphs off (on by default)."""
    return env_flag_default("FUSIONSTITCH_GRAPH_CACHE", True)


def tune_level() -> int:
    """FUSIONSTITCH_TUNE: how the planner uses the performance library (fusionstitch/tune):
    `off` (-1) ignores it; 0 (default) uses the times it holds and measures nothing; 1 also
    measures, once per key, the fusions the cost model chose and the library lacks. An
    unknown value is an error, not a guess."""
    value = os.environ.get("FUSIONSTITCH_TUNE", "").strip().lower()
    if value in ("", "0"):
        return 0
    if value in ("off", "-1", "false", "no"):
        return -1
    if value in ("1", "true", "yes", "on"):
        return 1
    raise ValueError(f"fusionstitch: FUSIONSTITCH_TUNE={value!r}; expected off, 0 or 1")


def strict() -> bool:
    """FUSIONSTITCH_STRICT=1 (or `all`): errors raise instead of falling back to torch (an
    internal error, a kernel that cannot be built)."""
    return env_flag("FUSIONSTITCH_STRICT")


def strict_all() -> bool:
    """FUSIONSTITCH_STRICT=all: every fallback raises, also the designed ones (an op outside
    the IR or without a kernel lowering, an input the IR cannot express)."""
    return os.environ.get("FUSIONSTITCH_STRICT", "").strip().lower() == "all"


def elide_half_casts() -> bool:
    """FUSIONSTITCH_ELIDE_HALF_CASTS=1: an explicit conversion to float16/bfloat16 inside a
    kernel does not round (x.half().float() == x); off: it rounds as eager does."""
    return env_flag("FUSIONSTITCH_ELIDE_HALF_CASTS")


def verify_enabled() -> bool:
    """FUSIONSTITCH_VERIFY=1: run the IR verifier between passes (debug mode)."""
    return env_flag("FUSIONSTITCH_VERIFY")


# torch.compile's `mode=` for this backend: what each sets (README's knobs table).
# Inductor's max-autotune modes tune its kernels' configurations; our kernels have no
# configurations to tune, so they mean what their CUDA-graph part means.
MODES: dict[str, dict] = {
    "default": {},
    "reduce-overhead": {"cuda_graphs": True},
    "max-autotune": {"cuda_graphs": True},
    "max-autotune-no-cudagraphs": {},
}


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
        if self.target not in target_names():
            raise ValueError(f"fusionstitch: unknown target {self.target!r}; expected one of "
                             f"{', '.join(target_names())}")
        if not isinstance(self.cuda_graphs, bool):
            raise ValueError(f"fusionstitch: cuda_graphs must be True or False, not "
                             f"{self.cuda_graphs!r}")

    def resolved_target(self, device=None) -> str:
        """The target: `target`, or for `auto` the one it picks for the inputs' device
        (`auto_target`: `cuda` for CUDA tensors, else `cpu`); without a device, the
        GPU's when a GPU is present."""
        if self.target != AUTO:
            return self.target
        if device is not None:
            return auto_target(device.type)
        import torch
        return auto_target("cuda" if torch.cuda.is_available() else "cpu")

    def with_compile_args(self, mode: str | None = None, options: dict | None = None) \
            -> "Options":
        """These options after torch.compile's `mode=` then `options=` (a dict of the
        fields: strategy, target, cuda_graphs); an unknown mode or key is refused, with
        the known ones listed."""
        fields = {"strategy": self.strategy, "target": self.target,
                  "cuda_graphs": self.cuda_graphs}
        if mode is not None:
            if mode not in MODES:
                raise ValueError(f"fusionstitch: unknown mode {mode!r}; expected one of "
                                 f"{', '.join(MODES)}")
            fields.update(MODES[mode])
        if options is not None:
            if not isinstance(options, dict):
                raise ValueError(f"fusionstitch: options must be a dict, not "
                                 f"{type(options).__name__}")
            unknown = sorted(str(k) for k in options if k not in fields)
            if unknown:
                raise ValueError(f"fusionstitch: unknown option(s) {', '.join(unknown)}; the "
                                 f"options are {', '.join(fields)}")
            fields.update(options)
        return Options(**fields)
