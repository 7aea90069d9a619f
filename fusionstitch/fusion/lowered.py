"""The lowered plan: a plan with the kernel IR of each of its kernel groups.

The driver's `lower` stage (fusionstitch/compile.py) makes one, and it flows on as a
value: the runtime builds its kernels from it (runtime/program.py) and the report shows
their sources. Nothing downstream lowers a group again or looks one up in a memo.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..targets import Target, resolve
from .plan import KERNEL, FusionPlan


@dataclass(frozen=True)
class LoweredPlan:
    plan: FusionPlan
    target: Target
    # group id -> codegen.kernel.Kernel, for every kernel group (none on a target that
    # generates no kernels)
    kernels: dict = field(default_factory=dict)

    def to_text(self) -> str:
        from ..codegen.kernel import kernel_text
        out = [f"# the kernel IR of {len(self.kernels)} kernel group(s) for {self.target}"]
        for gid, k in self.kernels.items():
            out += ["", f"group #{gid}", kernel_text(k).rstrip("\n")]
        return "\n".join(out) + "\n"


def lower_plan(plan: FusionPlan, target: str | Target) -> LoweredPlan:
    """Lower every kernel group of `plan` for `target`; raises codegen's Unsupported for a
    group that does not lower (code-generation legality left none such)."""
    target = resolve(target)
    if not target.generates_kernels:
        return LoweredPlan(plan, target)
    graph = plan.graph
    return LoweredPlan(plan, target, {g.id: target.lower(graph, g.nodes)
                                      for g in plan.groups if g.kind == KERNEL})
