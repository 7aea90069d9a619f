"""The generated source of a plan's groups for one target, printed without compiling.

One function, kernel_source(), serves every place that shows generated code: the
debug folder (`kernels/kNNN.py|.cpp`), the HTML report and `fusionstitch explain
--out DIR` (`DIR/kernels/<graph>/kNNN.*`). It lowers the group (the kernel IR the
runtime compiles, when the caller has it) and prints it: C++ for target `cpu`, Triton for
`cuda` and `interpret`. Nothing is compiled or loaded, so a report on a machine
without a GPU or a C++ compiler still shows the code.

The runtime renames the function by the digest of its text (`fs_<digest>`); the source
here keeps the printer's name (`fs_kernel` in C++, the digest name in Triton).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.ops import FREE, KERNEL
from . import Target, resolve


@dataclass(frozen=True)
class KernelSource:
    """One group's generated kernel for one target, or why there is none."""

    group: int
    language: str = ""     # "C++" | "Triton"; "" when there is no source
    ext: str = ""          # "cpp" | "py"
    template: str = ""     # the kernel's implementation template ("" when not lowered)
    header: str = ""       # the group, its template and kernel IR, as comment lines
    source: str = ""       # the printer's output
    reason: str = ""       # why there is no source ("" when there is one)

    @property
    def file_name(self) -> str:
        return f"k{self.group:03d}.{self.ext}"

    @property
    def file_text(self) -> str:
        """What the debug folder and the explain folder write: header, blank line, source."""
        return self.header + "\n\n" + self.source


def _no_source(group, target: Target) -> str:
    if group.kind == FREE:
        return "free: views and bitcasts, no kernel"
    if group.kind != KERNEL:
        return "library call: runs through torch (a vendor library), no generated source"
    return f"target {target.name!r} generates no kernels: plans run group by group through torch"


def kernel_source(plan, group, target: str | Target, kernel=None) -> KernelSource:
    """The source `target` generates for `group` of `plan` (a fusion.plan.FusionPlan;
    library and free groups get a reason).

    `kernel`: the group's lowered Kernel when the caller has it (the lowered plan, the
    runtime's steps); else the group is lowered here. A group that does not lower or
    print (legalisation should have split it) gets the error as its reason instead of
    raising, unless FUSIONSTITCH_STRICT is set.
    """
    target = resolve(target)
    if group.kind != KERNEL or not target.generates_kernels:
        return KernelSource(group.id, reason=_no_source(group, target))
    from ..codegen.kernel import kernel_text, template
    language, ext, comment = target.language.name, target.language.ext, \
        target.language.comment
    try:
        # (lowered in the schedule the plan decided for the group)
        k = kernel if kernel is not None else \
            target.lower(plan.graph, group.nodes, group.schedule)
        source = target.render(k)
    except Exception as e:  # noqa: BLE001 - a report shows the failure, it does not stop
        from .. import config
        if config.strict():
            raise
        return KernelSource(group.id, reason=f"no {language} source: {type(e).__name__}: {e}")
    tpl = template(k, target.persistent_rule())
    ops = " ".join(f"%{n}={plan.graph[n].op}" for n in group.nodes)
    lines = [f"group #{group.id} ({group.composition}) {tpl}: {ops}", ""]
    lines += kernel_text(k).splitlines()
    header = "\n".join(f"{comment} {line}".rstrip() for line in lines)
    return KernelSource(group.id, language, ext, tpl, header, source)
