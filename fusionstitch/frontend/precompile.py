"""Our part in torch's caching precompile: a warm start without Dynamo's tracing.

A warm start of a graph compiled before still pays Dynamo's bytecode tracing, which
no backend cache can skip: cartpole's 50 unrolled steps take Dynamo about 2 s, more
than everything after it. torch's experimental caching precompile
(`TORCH_CACHING_PRECOMPILE=1`, or `torch._dynamo.config.caching_precompile = True`)
stores Dynamo's transformed bytecode and guards on disk when the user calls
`torch.compiler.save_cache_artifacts()`, and a later `torch.compile` of the same
function loads them instead of tracing. It needs every backend graph of the frame
in a serialisable form, a `BackendCacheArtifact` recorded under Dynamo's backend id.

`record` gives one for the graphs the graph cache covers (frontend/graph_cache.py:
inference graphs whose AOTAutograd wrapper only copies mutated inputs back). The
artifact carries the graph cache's entry itself (the aten graph and its mutated
inputs), the backend options, and the fusionstitch and torch versions. Unpickling it
builds the `CompiledGraph` (`after_deserialization` hands it to torch); plans and
kernels then come from their own disk caches as in any warm start. A training
graph records nothing: torch then marks the frame bypassed, and it is traced again
as without precompile.

Load refuses (a `RuntimeError` while torch unpickles its cache entry, on which torch
logs a warning and traces the function again) when fusionstitch's or torch's version
changed since the save, or the entry does not build. torch's precompile drops some
guards (identity matches of globals and closures): that is torch's trade, documented
with its flag, and it is why this is opt-in through torch's flag rather than ours.
"""
from __future__ import annotations

import hashlib
import logging
from functools import partial
from typing import Any

import torch

from .. import config
from ..runtime import counters
from . import graph_cache

log = logging.getLogger("fusionstitch.frontend")

# Bump when the artifact's content changes: an older one then refuses to load.
FORMAT = 2

try:   # torch >= 2.9 names it so; without it, precompile simply traces our frames again
    from torch._dynamo.precompile_context import BackendCacheArtifact, PrecompileContext
except ImportError:   # pragma: no cover - depends on the torch version
    BackendCacheArtifact = PrecompileContext = None


def enabled() -> bool:
    """torch's caching precompile is on, and this torch has the interface we use."""
    return PrecompileContext is not None and bool(
        getattr(torch._dynamo.config, "caching_precompile", False))


def _versions() -> str:
    """The versions a carried graph must come from: fusionstitch's and torch's (Dynamo
    checks Python's, torch's and Triton's for its own part). Our sources may differ:
    the carried graph is AOTAutograd's trace of the function, correct whatever planned
    it, and plans and kernels come from caches stamped with our sources."""
    from ..fusion.plan_cache import versions
    return versions()


def _checksum(key: str, data: bytes) -> str:
    return hashlib.sha256(key.encode() + b"\0" + data).hexdigest()


if BackendCacheArtifact is not None:
    class FusionstitchArtifact(BackendCacheArtifact):
        """`content`: (FORMAT, graph_cache.FORMAT, versions, options as a dict, graph cache
        key, pickled graph cache entry, its checksum, number of inputs). The checksum
        (SHA-256 of the key and the entry) refuses an entry damaged in torch's cache file
        before it is unpickled.

        The compiled graph is built when the artifact is unpickled, not in
        `after_deserialization`: torch (2.13) cannot recover from an error raised there
        (it re-initialises a package that is already initialised, and the compile
        fails), while an error raised in unpickling makes its Dynamo cache log a warning
        and trace the function again."""

        def __getstate__(self) -> dict:
            return {"key": self.key, "content": self.content}

        def __setstate__(self, state: dict) -> None:
            self.key, self.content = state["key"], state["content"]
            self._compiled = self._build()

        def __deepcopy__(self, memo: dict) -> "FusionstitchArtifact":
            # torch copies each artifact it records (at save and at load): the content
            # is immutable, and the copy need not build the graph again
            return FusionstitchArtifact(key=self.key, content=self.content)

        def _build(self) -> Any:
            content = self.content
            if not isinstance(content, tuple) or len(content) != 8 or \
                    content[:2] != (FORMAT, graph_cache.FORMAT):
                raise RuntimeError(f"fusionstitch: precompiled graph {self.key} has another "
                                   f"format; this fusionstitch reads "
                                   f"{(FORMAT, graph_cache.FORMAT)}")
            _, _, versions, options, key, data, checksum, num_inputs = content
            if not isinstance(data, bytes) or checksum != _checksum(key, data):
                raise RuntimeError(f"fusionstitch: precompiled graph {self.key} is damaged "
                                   "(its checksum does not match)")
            if versions != _versions():
                raise RuntimeError(f"fusionstitch: precompiled graph {self.key} was saved by "
                                   f"{versions}, this is {_versions()}")
            from .torch import CompiledGraph
            make = partial(CompiledGraph, options=config.Options(**options))
            compiled = graph_cache.load_payload(
                key, data, lambda g, pairs: make(g, kind="inference", mutated=pairs),
                num_inputs)
            if compiled is None:
                raise RuntimeError(f"fusionstitch: precompiled graph {self.key} does not build")
            return compiled

        def after_deserialization(self) -> Any:
            compiled = getattr(self, "_compiled", None)
            if compiled is None:   # not unpickled: an artifact recorded in this process
                compiled = self._build()
            counters.bump("precompile_loads")
            return compiled


def record(gm: torch.fx.GraphModule, cache_key: str | None, options: config.Options,
           num_inputs: int) -> bool:
    """Record `gm`'s compiled form for torch's caching precompile when it is on and the
    graph cache holds `cache_key`'s entry; True when recorded. Never fails a compile."""
    if not enabled() or cache_key is None:
        return False
    backend_id = getattr(gm, "_backend_id", None) or gm.meta.get("backend_id")
    data = graph_cache.payload(cache_key)
    if backend_id is None or data is None:
        log.debug("precompile: %s not recorded (%s)", backend_id,
                  "no backend id" if backend_id is None else "not in the graph cache")
        return False
    try:
        options_dict = {"strategy": options.strategy, "target": options.target,
                        "cuda_graphs": options.cuda_graphs}
        PrecompileContext.record_artifact(FusionstitchArtifact(
            key=backend_id,
            content=(FORMAT, graph_cache.FORMAT, _versions(), options_dict, cache_key, data,
                     _checksum(cache_key, data), num_inputs)))
    except Exception as e:   # never fail the compile for the cache's sake
        log.debug("precompile: %s not recorded: %s: %s", backend_id, type(e).__name__, e)
        return False
    counters.bump("precompile_records")
    return True
