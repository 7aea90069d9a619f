"""Planning with Python's cyclic garbage collector paused.

A planning run allocates millions of small objects (sets, frozensets, tuples,
Decisions) and keeps many of them in memos until it returns, and it makes no cycles
that must be freed before it returns. Each time the collector's thresholds trip it
walks the young objects, and every few rounds the whole heap (torch's modules, the
captured graphs); on the 400-step LSTM that was about a third of planning time.
`gc_paused` turns collection off for the call and back on after it (only if it was on:
nested planners and callers that keep it off are left as they are); garbage made
while planning is collected by the first collection after it.

The pause is process-wide (CPython has one collector), so another thread allocating
while a plan is made is not collected either; reference counting still frees
everything without cycles, which is almost all of it.
"""
from __future__ import annotations

import functools
import gc


def gc_paused(fn):
    """Decorator: run `fn` with the cyclic collector off (restored afterwards)."""
    @functools.wraps(fn)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()
    return paused
