"""What explain()'s compile leaves in Dynamo, taken back afterwards.

Dynamo keeps its decisions on code objects: cache entries (one per compile, guarded;
a code holding `recompile_limit` of them is run eagerly from then on) and an execution
strategy (a frame whose graph break it cannot handle, an nn.LSTM, is marked "skip").
Many of those code objects are shared: torch's wrapper of every compiled module,
`nn.Module._call_impl`, a module class's `forward`. An explain() that left its marks
there would make later explains, and the user's own `torch.compile`, find no graph
(after one failed explain) or hit the recompile limit (after eight).

So explain compiles a wrapper with a code object of its own (`fresh_entry`: its
entries die with it), and `isolated` records every code Dynamo converts meanwhile and
afterwards gives back each one that only explain's backend compiled (its entries and
mark dropped, as `torch._dynamo.reset()` would, for that code alone). A code that also
holds someone else's entries keeps them; only its "skip" mark, set by explain's run, is
cleared: Dynamo converted it during explain, so it was not marked before.

Dynamo has no public interface for this; the names used are those of torch 2.11 to
2.14 (`convert_frame.input_codes`, `reset_code`, `set_code_exec_strategy`,
`_debug_get_cache_entry_list`). Where one is missing the step is skipped: explain
still works, and may leave state as before.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import types
from collections.abc import Callable, Iterator

log = logging.getLogger("fusionstitch.report")
_entry_ids = itertools.count()


def fresh_entry(fn: Callable) -> Callable:
    """A function calling `fn` whose code object is new (Dynamo's entries for it are freed
    with it), named after `fn` for Dynamo's logs."""
    def explained(*args, **kwargs):
        return fn(*args, **kwargs)
    name = getattr(fn, "__name__", type(fn).__name__)
    explained.__code__ = explained.__code__.replace(
        co_name=f"explain_{name}_{next(_entry_ids)}")
    return explained


class _Recorder:
    """Stands in for Dynamo's tracker of converted codes: records every code (even one
    the tracker saw before), and passes it on."""

    def __init__(self, tracker):
        self.tracker = tracker
        self.codes: list[types.CodeType] = []
        self._ids: set[int] = set()

    def add(self, code: types.CodeType) -> None:
        if id(code) not in self._ids:
            self._ids.add(id(code))
            self.codes.append(code)
        self.tracker.add(code)

    def __getattr__(self, name: str):   # seen, seen_ids, clear, __contains__ ...
        return getattr(self.tracker, name)

    def __contains__(self, code) -> bool:
        return code in self.tracker


def _ours(entry, backend: Callable) -> bool:
    wrapper = getattr(entry, "backend", None)
    return wrapper is backend or getattr(wrapper, "compiler_fn", None) is backend


@contextlib.contextmanager
def isolated(backend: Callable) -> Iterator[None]:
    """Run the block, then give back the Dynamo state of the codes converted in it that
    only `backend` compiled (see the module docstring)."""
    try:
        from torch._C._dynamo.eval_frame import (_debug_get_cache_entry_list, reset_code,
                                                 set_code_exec_strategy)
        from torch._dynamo import convert_frame
        from torch._dynamo.types import FrameAction, FrameExecStrategy
        tracker = convert_frame.input_codes
    except (ImportError, AttributeError) as e:   # pragma: no cover - another torch
        log.debug("explain: cannot take back Dynamo's state on this torch: %s", e)
        yield
        return
    recorder = _Recorder(tracker)
    convert_frame.input_codes = recorder
    try:
        yield
    finally:
        convert_frame.input_codes = tracker
        for code in recorder.codes:
            entries = _debug_get_cache_entry_list(code)
            if all(_ours(e, backend) for e in entries):
                reset_code(code)
            else:
                set_code_exec_strategy(code, FrameExecStrategy(FrameAction.DEFAULT,
                                                               FrameAction.DEFAULT))
