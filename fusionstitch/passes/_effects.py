"""What the passes must treat as more than a pure function of its arguments.

Shared by CSE, DCE and constant folding so that all three agree on which ops
draw from the RNG or have side effects. The op table's `random` flag covers the
ops it lists; ops outside the table (fallbacks) are judged by torch's own
schema tags, since an unknown `normal.*` or `uniform.*` is just as random.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from ..ir.graph import CONSTANT, GETITEM, PARAMETER
from ..ir.ops import EFFECTS, lookup, resolve_overload


@lru_cache(maxsize=None)
def is_random(op: str) -> bool:
    """Draws from the global RNG: two calls differ, and each call advances the RNG."""
    if op in (PARAMETER, CONSTANT, GETITEM):
        return False
    d = lookup(op)
    if d.random:
        return True
    return d.fallback and torch.Tag.nondeterministic_seeded in resolve_overload(op).tags


@lru_cache(maxsize=None)
def has_side_effect(op: str) -> bool:
    """Mutates an argument (or is otherwise impure): never dropped, merged or folded."""
    if op in (PARAMETER, CONSTANT, GETITEM):
        return False
    d = lookup(op)
    if not d.fallback:
        # the op table holds functional aten ops, and checks called for their effect
        return op in EFFECTS
    schema = resolve_overload(op)._schema
    # No tensor result means it is called for its effect (e.g. _assert_async).
    return schema.is_mutable or not schema.returns
