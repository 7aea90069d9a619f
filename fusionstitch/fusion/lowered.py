"""The lowered plan: a plan with the kernel IR of each of its kernel groups.

The driver's `lower` stage (fusionstitch/compile.py) makes one, and it flows on as a
value: the runtime builds its kernels from it (runtime/program.py) and the report shows
their sources. Nothing downstream lowers a group again or looks one up in a memo. Each
group is lowered in the schedule its plan carries (`Group.schedule`): the planner decided
it, lowering does not decide it again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..codegen.lower import Unsupported
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
    """Lower every kernel group of `plan` for `target`, each in the schedule the plan
    decided for it (`Group.schedule`: lowering decides none of its own); raises codegen's
    Unsupported for a group that does not lower (code-generation legality left none
    such), and for a kernel group without a schedule (none covers it)."""
    target = resolve(target)
    if not target.generates_kernels:
        return LoweredPlan(plan, target)
    graph = plan.graph
    kernels = {}
    for g in plan.groups:
        if g.kind != KERNEL:
            continue
        if g.schedule is None:
            raise Unsupported(f"kernel group #{g.id} ({len(g.nodes)} ops) has no schedule: "
                              f"no one schedule covers its ops")
        kernels[g.id] = target.lower(graph, g.nodes, g.schedule)
    return LoweredPlan(plan, target, kernels)
