"""A fusion decision with its reason (XLA's FusionDecision), as data.

Kept apart from legality.py so that the structural memo (structure.py), which
legality uses, and the profitability rules (profit.py) can name it without an import
cycle; legality.py re-exports it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    ok: bool
    reason: str = ""
    # the rule that refused: legality's "op", "cycle", "schedule", "lower" (the target's
    # code generator), or a profitability rule's name ("recompute"); "" when allowed, and
    # for the planners' own rules (xla's)
    rule: str = ""

    @staticmethod
    def allow() -> "Decision":
        return ALLOW

    @staticmethod
    def forbid(reason: str, rule: str = "") -> "Decision":
        return Decision(False, reason, rule)

    def __bool__(self) -> bool:
        return self.ok


ALLOW = Decision(True)
