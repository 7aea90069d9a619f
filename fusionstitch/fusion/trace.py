"""The plan trace: the decisions a planning run made, kept as data on the plan.

`Report.why_not_fused` reads the reason the planner itself used from here instead of
re-deriving one (a re-derived legality check could say "could fuse" where the planner
had found that the code generator has no rule for an op). Each planning stage records
as it decides:

- `fusible`: an op that cannot be part of a generated kernel on the target
  (`legality.Legality.op`: including an op its code generator has no rule for);
- `legality`: a pattern the legality seam rejected (`legality.Legality.group`: an op
  that cannot be in a kernel, a cycle, no consistent schedule, the target's code
  generator cannot lower it);
- `profit`: a legal pattern a profitability rule rejected (`profit.py`, applied by
  `stitch.StitchChecks`: too much recomputation);
- `candidate`: the fate of each stitch candidate pattern that was not chosen whole
  (`score`: the cost model gives it no gain; `cycle`: chosen with others it closes a
  cycle; `ilp`: the ILP chose overlapping patterns of a higher total score);
- `merge`: kernel merging after the ILP declined a pair (cost, footprint, a path
  through a third group);
- `xla:<pass>`: a rule of the xla baseline's passes declined a join;
- `views`: a view was taken out of its group (`plan.detach_views`: it runs as a free
  view before or after the kernel instead of being stored by it);
- `legalize`: code-generation legality split a planned group, or sent an op to torch.

`why_apart(a, b)` picks, for two nodes in different groups, the decision that kept them
apart (the latest stage first: a split outranks the pattern that was split).
A plan loaded from the plan cache carries no trace (the cache stores groups only):
`planned_trace` plans the graph again, deterministically, to read one.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Verdict:
    """Why two nodes are apart: the stage that decided it, the nodes it was about."""

    stage: str
    nodes: frozenset
    reason: str
    subject: str = ""    # the one node it is about, where it is about one (views)


@dataclass
class PlanTrace:
    strategy: str
    target: str
    # in the order decided; an entry may still be a tuple (stage, parts, reason, subject)
    # whose nodes are the union of `parts` (frozensets shared between entries), made a
    # Verdict when read: xla's sibling pass declines ~10^5 pairs of large groups on a
    # long LSTM, and a frozenset per pair made it 1.8x slower
    raw: list = field(default_factory=list)
    ops: dict[str, str] = field(default_factory=dict)     # op -> why it is not fusible
    # stitch: every candidate pattern and its fate ("chosen" or a candidate Verdict)
    candidates: dict[frozenset, Verdict | None] = field(default_factory=dict)
    # patterns legality rejected (the Legality's memo, the rejected entries), by reason
    rejected: dict[frozenset, str] = field(default_factory=dict)
    # legal patterns a profitability rule rejected, by reason
    unprofitable: dict[frozenset, str] = field(default_factory=dict)

    def record(self, stage: str, nodes, reason: str, subject: str = "") -> None:
        self.raw.append(Verdict(stage, frozenset(nodes), reason, subject))

    def record_parts(self, stage: str, parts: tuple, reason) -> None:
        """`record` of the union of `parts` (frozensets), made only when read; `reason`
        is a string or a callable making one (called when read)."""
        self.raw.append((stage, parts, reason, ""))

    @property
    def events(self) -> list[Verdict]:
        raw = self.raw
        for i, e in enumerate(raw):
            if not isinstance(e, Verdict):
                stage, parts, reason, subject = e
                raw[i] = Verdict(stage, frozenset().union(*parts),
                                 reason() if callable(reason) else reason, subject)
        return raw

    def op(self, name: str, reason: str) -> None:
        self.ops.setdefault(name, reason)

    def why_apart(self, a: str, b: str) -> Verdict:
        """The decision that kept %a and %b apart (both are in kernel or library groups
        of the plan, different ones)."""
        both = {a, b}
        for d in reversed(self.events):
            if d.stage == "legalize" and both <= d.nodes:
                return d
        for n in (a, b):
            if n in self.ops:
                return Verdict("fusible", frozenset([n]), self.ops[n])
        for d in reversed(self.events):
            if d.stage == "legalize" and len(d.nodes) == 1 and d.nodes & both:
                return d   # one of them was sent to torch
            if d.stage == "views" and d.subject in both and both <= d.nodes:
                return d   # one of them was a view taken out of the group holding both
        for d in reversed(self.events):
            if d.stage.startswith("merge") and both <= d.nodes:
                return d
        fates = [d for p, d in self.candidates.items() if both <= p and d is not None]
        if fates:   # the most specific candidate holding both, then the latest stage
            order = {"fuel": 0, "cycle": 0, "ilp": 1, "score": 2}
            return min(fates, key=lambda d: (order.get(d.stage, 3), len(d.nodes)))
        for d in reversed(self.events):
            if d.stage.startswith("xla") and both <= d.nodes:
                return d
        held = [(len(p), sorted(p), r, stage)
                for stage, rejected in (("legality", self.rejected),
                                        ("profit", self.unprofitable))
                for p, r in rejected.items() if both <= p]
        if held:
            n, names, reason, stage = min(held)
            return Verdict(stage, frozenset(names), reason)
        if self.strategy == "none":
            return Verdict("strategy", frozenset(both), "strategy 'none' fuses nothing")
        return Verdict("generators", frozenset(both),
                        f"no {self.strategy} rule proposed a group holding both (no "
                        f"candidate pattern or pass joined them)")


def planned_trace(plan, target: str) -> PlanTrace | None:
    """The trace of `plan`: its own, or (a plan from the plan cache) that of planning its
    graph again with the cache off, when that gives the same groups; None otherwise."""
    if plan.trace is not None:
        return plan.trace
    from . import make_plan
    again = make_plan(plan.graph, plan.strategy, target, use_cache=False)
    if [g.nodes for g in again.groups] != [g.nodes for g in plan.groups]:
        return None
    return again.trace
