"""Target `torch`: the reference executor. A plan runs group by group through its ops'
aten overloads (runtime/program.py); nothing is generated. explain() runs plans so; it is
no value of `target=` (not selectable)."""
from __future__ import annotations

from .base import Target

TORCH = Target("torch", selectable=False)
