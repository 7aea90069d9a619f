"""CUDA-graph capture of a Program: `fusionstitch.backend(cuda_graphs=True)`.

Why: a fused plan still launches one kernel per group plus its library calls, and on a
GPU every launch costs the CPU microseconds (the papers' launch latency φ); for small
graphs that is most of a step. A CUDA graph records the launches of one run and replays
them with one driver call.

Where: one graph per specialisation (one Program, so static shapes by construction; each
shape key gets its own graph), when `cuda_graphs=True`, the resolved target supports CUDA
graphs (`Target.supports_cuda_graphs`: cuda) and every tensor input is on a CUDA device. Otherwise the Program runs as before, and the
reason is logged once at INFO (`fusionstitch.runtime`).

Life of a GraphedProgram:

1. First call: the Program runs as usual (its kernels compile); the inputs' addresses
   and strides are remembered.
2. Second call: an input at the same address and strides as on the first call, whose
   first-call tensor is still alive (a parameter, an optimizer state), is *static by
   address*: the graph reads the caller's tensor itself (held, so its memory cannot be
   handed to another tensor), and a call that passes it again copies nothing. Every
   other input gets a private buffer of its layout, into which each call copies the
   caller's tensor; an input no buffer can copy with its layout (stride 0, overlapping)
   is static by address too.
   The Program then runs once eagerly on those buffers on the capture stream (the
   warm-up: nothing may compile, autotune or initialise lazily during capture); its
   results are this call's results. Then one run is captured: capture records launches,
   it executes nothing, so the update of a mutated input happens once.
3. Later calls copy changed inputs in, replay, and hand the results out. An input static
   by address that comes at another address gets a private buffer and the graph is
   captured again (each input at most once; `CAPTURE_LIMIT` bounds the rest). A caller's
   tensor laid out unlike the buffer that an output is a view of runs that call
   uncaptured (the view could not be mapped back).

Results: a replay writes its outputs into the same graph-pool memory every time. Handing
those tensors out would let the next call overwrite what the caller still holds (a loss
kept for logging, activations a forward saved for a backward that runs after the next
forward), and our rule is that no use of the API gives wrong numbers. So each output
that is new memory is copied out of the pool (one batched copy per call): the price is
one read and write of every output, paid for safety. An output that is an input, or a
view of one, is returned as that input of the caller's, or the same view of it. A mutated
input's new value (AOTAutograd's input mutations) is copied into the caller's tensor
unless the graph already wrote it there, and that tensor is returned for it (AOTAutograd's
epilogue `copy_` is then a no-op). Nothing the caller passed is written unless the graph
says so.

Memory: all graphs of a device share one pool. That is safe here although graphs replay
in any order (torch's rule for shared pools is to replay in capture order): a graph's
pool memory matters only from its replay to the copy-out right after it, on the same
stream, and inputs live outside the pool. Each captured specialisation keeps its pool
memory (about one run's intermediates and outputs) and its private input buffers.

Failure: anything that cannot be captured (a library op that synchronises, a CPU tensor
met during capture, any error capture raises) logs one warning naming the graph, and
the Program runs uncaptured from then on. The call that tried loses nothing: it already
has its results from the warm-up.

Counters: `cuda_graph_captures` per capture, `cuda_graph_replays` per replay. A replay
also bumps what the captured run of the Program counted (kernels_launched, library_calls,
...), so `kernels_launched` per call still equals `explain().num_kernels`.

The capture mechanism is one small class (`CudaGraph`: run_eager, capture, replay); tests
replace it to check this module's buffer logic on CPU tensors.
"""
from __future__ import annotations

import logging
import weakref
from functools import partial
from typing import Any, Callable

import torch

from ..targets import resolve
from . import counters as _stats

log = logging.getLogger("fusionstitch.runtime")

# Counters a Program's run bumps; a replay bumps them by as much as the captured run did.
_PER_RUN = ("kernels_launched", "library_calls", "fallbacks", "inplace_writes")
# Captures of one specialisation before it gives up and runs uncaptured: an input that
# moves to new memory on every call (and cannot get a private buffer of its layout) would
# otherwise be captured again on every call, each capture costing milliseconds.
CAPTURE_LIMIT = 4
_said: set[str] = set()


def why_not(target, tensors: list) -> str | None:
    """Why a Program for `target` (a Target or its name) with these inputs cannot be
    captured, or None when it can."""
    target = resolve(target)
    if not target.supports_cuda_graphs:
        return f"the target {target.name!r} has no CUDA graphs"
    if not tensors:
        return "the graph has no tensor inputs"
    where = next((t.device for t in tensors if not t.is_cuda), None)
    if where is not None:
        return f"an input is on {where}"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    return None


def wrap(program: Callable, name: str, mutated: list[tuple[int, int]], target,
         tensors: list) -> Callable:
    """`program` run through a CUDA graph when it can be, else `program` itself.

    `mutated`: (output, input) pairs, the output being the input's new value."""
    why = why_not(target, tensors)
    if why is not None:
        if why not in _said:
            _said.add(why)
            log.info("cuda_graphs: programs run uncaptured: %s", why)
        return program
    return GraphedProgram(program, name, mutated, CudaGraph(tensors[0].device))


_SHARED: dict = {}   # device -> (graph pool, capture stream)


class CudaGraph:
    """The capture mechanism: torch.cuda graphs on one side stream and pool per device.

    The warm-up runs on the stream that captures: libraries set up per stream (cuBLAS
    workspaces) are then ready when capture starts."""

    def __init__(self, device: torch.device):
        self.device = device
        shared = _SHARED.get(device)
        if shared is None:
            with torch.cuda.device(device):
                shared = _SHARED[device] = (torch.cuda.graph_pool_handle(), torch.cuda.Stream())
        self.pool, self.stream = shared
        self.graph = None

    def run_eager(self, fn: Callable[[], list]) -> list:
        """fn() on the capture stream, ordered after and before the caller's stream."""
        with torch.cuda.device(self.device):
            caller = torch.cuda.current_stream()
            self.stream.wait_stream(caller)
            with torch.cuda.stream(self.stream):
                outs = fn()
            caller.wait_stream(self.stream)
            # memory made on the side stream and used on the caller's is not reused
            # before the caller's stream is done with it
            for t in outs:
                if isinstance(t, torch.Tensor) and t.is_cuda:
                    t.record_stream(caller)
        return outs

    def capture(self, fn: Callable[[], list], inputs: list) -> list:
        """Record fn()'s launches (nothing runs); its outputs are the graph's buffers.

        cuBLAS keeps one workspace per stream, made by the first GEMM and reused by the
        next: made by the warm-up, outside the pool, a captured GEMM would hold its address
        while anyone may free it (Inductor's CUDA graphs clear the workspaces and
        torch.cuda.graph empties the cache: the replay then faulted, "unspecified launch
        failure", H100, 2026-11-27). Clearing them before capture makes the captured GEMMs
        allocate theirs in the pool, which stays mapped while a graph uses it; clearing
        after it keeps later uncaptured GEMMs out of the pool."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(self.device):
            caller = torch.cuda.current_stream()
            _clear_cublas_workspaces()
            try:
                with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                    outs = fn()
            finally:
                # torch.cuda.graph's exit leaves its stream current when capture_end raises
                torch.cuda.set_stream(caller)
                _clear_cublas_workspaces()
        self.graph = graph
        return outs

    def replay(self) -> None:
        self.graph.replay()


def _clear_cublas_workspaces() -> None:
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


class Uncapturable(Exception):
    """A program whose results a graph cannot hand out safely."""


# how one output of a run is handed to the caller (see _plan)
KEEP, MUTATED, INPUT, VIEW, NEW, SHARED = range(6)


class GraphedProgram:
    """A Program run through a CUDA graph after one plain call (see the module docstring)."""

    def __init__(self, program: Callable, name: str, mutated: list[tuple[int, int]],
                 graph: Any):
        self.program = program
        self.name = name
        self.mutated = dict(mutated)         # output -> input whose new value it is
        self.graph = graph                   # the capture mechanism (CudaGraph)
        self.first: list | None = None       # the first call's inputs: (weakref, address, strides)
        self.statics: list | None = None     # the buffers the graph reads
        self.by_address: list[bool] = []     # statics[j] is the caller's own tensor
        self.where: list = []                # (address, strides) of each of the statics
        self.outs: list = []                 # the graph's outputs (pool memory)
        self.plan: list = []                 # per output: how a replay hands it out
        self.viewed: set[int] = set()        # inputs some output is a view of
        self.shared: list = []               # whole storages of outputs that share one
        self.counts: dict[str, int] = {}     # counters the captured run bumped
        self.captures = 0
        self.off = False

    def __call__(self, inputs: list[torch.Tensor]) -> list:
        if self.off:
            return self.program(inputs)
        if self.statics is not None:
            return self._replay(inputs)
        if self.first is None:
            self.first = [(weakref.ref(t), t.data_ptr(), t.stride()) for t in inputs]
            return self.program(inputs)
        # the same memory as on the first call, and not an address the allocator handed
        # out again after the first call's tensor died (a batch, a saved activation)
        return self._capture(inputs, [r() is not None and (p, st) == (t.data_ptr(), t.stride())
                                      for (r, p, st), t in zip(self.first, inputs)])

    def _capture(self, inputs: list[torch.Tensor], by_address: list[bool]) -> list:
        if self.captures >= CAPTURE_LIMIT:
            self._give_up(f"inputs moved to new memory after {self.captures} captures")
            return self.program(inputs)
        statics = []
        for j, t in enumerate(inputs):
            s = t if by_address[j] else torch.empty_like(t)
            if s.stride() != t.stride():    # overlapping or gappy: no buffer of its layout
                s, by_address[j] = t, True
            statics.append(s)
        _copy([s for s, a in zip(statics, by_address) if not a],
              [t for t, a in zip(inputs, by_address) if not a])
        self.statics = self.outs = None
        run = partial(self.program, statics)          # the graph reads these very buffers
        warm = self.graph.run_eager(run)              # this call's results
        result = self._hand_out(_plan(warm, statics, self.mutated)[0], warm, statics,
                                inputs, copy_new=False)
        saved = _stats.stats()
        try:
            outs = self.graph.capture(run, statics)
            plan, shared = _plan(outs, statics, self.mutated, replay=True)
        except Exception as e:   # any failure to capture: run uncaptured, never crash
            _stats.restore(saved)
            self._give_up(f"{type(e).__name__}: {e}")
            return result
        counted = _stats.stats()
        _stats.restore(saved)
        _stats.bump("cuda_graph_captures")
        self.captures += 1
        self.counts = {k: counted[k] - saved[k] for k in _PER_RUN if counted[k] != saved[k]}
        self.statics, self.by_address, self.outs = statics, by_address, outs
        self.where = [(s.data_ptr(), s.stride()) for s in statics]
        self.plan, self.shared = plan, shared
        self.viewed = {a[0] for how, a in plan if how == VIEW}
        return result

    def _give_up(self, why: str) -> None:
        log.warning("fusionstitch: %s is not captured in a CUDA graph and runs uncaptured: %s",
                    self.name, why)
        self.off = True
        self.statics = self.outs = None
        self.plan, self.shared = [], []

    def _replay(self, inputs: list[torch.Tensor]) -> list:
        statics = self.statics
        dst, src, moved = [], [], []
        for j, (t, (ptr, strides)) in enumerate(zip(inputs, self.where)):
            if t.data_ptr() == ptr and t.stride() == strides:
                continue                            # the graph reads this very memory
            if self.by_address[j]:
                moved.append(j)
            elif j in self.viewed and t.stride() != strides:
                # an output is a view of this input, laid out as the buffer: the caller's
                # tensor has another layout, so this call runs uncaptured
                log.debug("%s: input %d has strides %s, not %s: runs uncaptured", self.name,
                          j, t.stride(), strides)
                return self.program(inputs)
            else:
                dst.append(statics[j])
                src.append(t)
        if moved:
            by_address = list(self.by_address)
            for j in moved:
                by_address[j] = False
            return self._capture(inputs, by_address)
        _copy(dst, src)
        self.graph.replay()
        _stats.bump("cuda_graph_replays")
        for k, n in self.counts.items():
            _stats.bump(k, n)
        return self._hand_out(self.plan, self.outs, statics, inputs, copy_new=True)

    def _hand_out(self, plan: list, outs: list, statics: list, inputs: list,
                  copy_new: bool) -> list:
        """The caller's results from a run's `outs` on `statics`: new memory copied out of
        the pool when `copy_new` (a replay), inputs and views of them mapped to the caller's
        tensors, mutated inputs' new values written into the caller's tensors."""
        res: list = list(outs)
        dst, src = [], []
        groups: dict[int, torch.Tensor] = {}
        for k, (how, arg) in enumerate(plan):
            o = outs[k]
            if how == MUTATED:
                u = inputs[arg]
                if not (u.data_ptr() == o.data_ptr() and u.stride() == o.stride()):
                    dst.append(u)
                    src.append(o)
                res[k] = u
            elif how == INPUT:
                res[k] = inputs[arg]
            elif how == VIEW:
                res[k] = _view_of(inputs[arg[0]], o, arg[1])
            elif how == NEW and copy_new:
                res[k] = torch.empty_strided(o.size(), o.stride(), dtype=o.dtype,
                                             device=o.device)
                dst.append(res[k])
                src.append(o)
            elif how == SHARED and copy_new:
                whole = groups.get(arg)
                if whole is None:
                    whole = groups[arg] = torch.empty_like(self.shared[arg])
                    dst.append(whole)
                    src.append(self.shared[arg])
                res[k] = torch.empty(0, dtype=o.dtype, device=o.device).set_(
                    whole.untyped_storage(), o.storage_offset(), o.size(), o.stride())
        _copy(dst, src)
        return res


def _plan(outs: list, statics: list, mutated: dict[int, int],
          replay: bool = False) -> tuple[list, list]:
    """How each output of a run on `statics` is handed out: (kind, argument) per output,
    and the whole storages (as bytes) of outputs that share memory (SHARED's argument
    indexes them). `replay`: these are the graph's own outputs, reused by every replay."""
    owner: dict[int, int] = {}
    for j, s in enumerate(statics):
        owner.setdefault(s.untyped_storage().data_ptr(), j)
    index = {id(s): j for j, s in reversed(list(enumerate(statics)))}
    plan: list = []
    fresh: dict[int, list[int]] = {}
    for k, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            if replay and isinstance(o, (list, tuple)) and \
                    any(isinstance(v, torch.Tensor) for v in o):
                raise Uncapturable(f"output {k} is a sequence of tensors")
            plan.append((KEEP, None))
        elif k in mutated:
            plan.append((MUTATED, mutated[k]))
        elif id(o) in index:
            plan.append((INPUT, index[id(o)]))
        elif o.untyped_storage().data_ptr() in owner:
            j = owner[o.untyped_storage().data_ptr()]
            plan.append((VIEW, (j, o.data_ptr() - statics[j].data_ptr())))
        else:
            fresh.setdefault(o.untyped_storage().data_ptr(), []).append(k)
            plan.append(None)
    shared: list[torch.Tensor] = []
    for ks in fresh.values():
        o = outs[ks[0]]
        if len(ks) == 1 and torch.empty_like(o).stride() == o.stride():
            plan[ks[0]] = (NEW, None)
            continue
        # outputs sharing memory (views of one intermediate), or one that is not dense:
        # copy the whole storage, so that offsets, strides and aliasing stay as they are
        for k in ks:
            plan[k] = (SHARED, len(shared))
        shared.append(torch.empty(0, dtype=torch.uint8, device=o.device).set_(
            o.untyped_storage()))
    return plan, shared


def _view_of(u: torch.Tensor, o: torch.Tensor, delta: int) -> torch.Tensor:
    """The caller's input `u` viewed as output `o` views the buffer that stood for `u`
    (`delta`: bytes from that buffer's first element to o's). A real view when the dtype
    is the same (AOTAutograd replays views from real ones)."""
    if o.dtype == u.dtype:
        return u.as_strided(o.size(), o.stride(), u.storage_offset() + delta // o.element_size())
    offset = (u.data_ptr() - u.untyped_storage().data_ptr() + delta) // o.element_size()
    return torch.empty(0, dtype=o.dtype, device=u.device).set_(
        u.untyped_storage(), offset, o.size(), o.stride())


def _copy(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """dst[i] <- src[i], in one multi-tensor launch where torch can."""
    if not dst:
        return
    with torch.no_grad():
        if len(dst) == 1:
            dst[0].copy_(src[0])
        else:
            torch._foreach_copy_(dst, src)
