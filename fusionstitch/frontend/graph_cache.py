"""A cache of AOTAutograd's inference graphs, in memory and on disk.

A warm start (a new compile of a graph compiled before, e.g. in a new process)
spends most of its time in AOTAutograd tracing Dynamo's graph again into aten ops
(cartpole: 4.7 of 6.6 s); plans and kernels already come from their caches. For an
inference graph whose AOTAutograd runtime wrapper only copies mutated inputs back,
the aten graph and the list of mutated inputs are all AOTAutograd contributes:
this cache keeps them, and a hit builds the `CompiledGraph` without AOTAutograd.

`key` is None (not cached) unless AOTAutograd would surely give that simple case:
no autograd (grad mode off, or no input requires grad), no autocast, no parameters,
buffers, get_attr or call_module in Dynamo's graph, only torch's own functions and
aten/prims ops called (a user function allowed in the graph, or a custom op, has a
body the key cannot see), every input a plain strided tensor of static sizes (no
subclass, no fake tensor, no number) and no two inputs on one storage (aliased
inputs change AOTAutograd's graph). The key is a digest of Dynamo's generated code
(`gm.code`: the same text in every process), each input's shape, strides, offset,
dtype, device and requires_grad, the grad mode, default dtype and deterministic
flag, AOTAutograd's config, the backend options, the versions and fusionstitch's
source stamp (`plan_cache.code_stamp`: our decompositions are code), and `FORMAT`.

`store` (AOTAutograd's inference-compiler callback, on a miss) keeps the graph only
when its metadata (`fw_metadata`) gives the simple runtime layout: every user output
a new tensor (`non_alias`), no effect tokens, no intermediate bases, no change of
grad mode, each mutated input mutating data only (not its sizes, strides or
storage) and returned, not kept in the graph; the graph's outputs are the mutated
inputs' new values (in `mutated_inp_runtime_indices` order) then the user outputs.
`mutations_hidden_from_autograd` does not matter here: it only decides how a
training graph records the copy. The graph is stored node by node (names kept: the
IR's node names are in the plan cache's key) with each node's `val` as shape,
strides, dtype and device: meta tensors (what `fx_to_ir` reads) and the devices beside
them (what `frontend/devices.py` reads).

On a hit, `load` returns what stands in for AOTAutograd's runtime wrapper: it runs
the graph with grad off (as AOTAutograd runs inference graphs), copies each mutated
input's new value back unless our runtime already wrote it in place
(runtime/inplace.py), and returns the user outputs as a list (as AOTAutograd does;
Dynamo's code unpacks it). A miss whose graph `store` kept gets the same wrapper (`runner_for`)
around the CompiledGraph AOTAutograd's compile just made, so the first compile runs as
lean as a warm one. The wrapper bumps the version of each input our kernel wrote in
place (AOTAutograd's `copy_` onto itself did), so that autograd still refuses a backward
through a saved old value. A graph `key` refuses only because inputs require grad (an
update of parameters under no_grad after a graph break) is not stored, but gets the same
wrapper (`lean_layout`, `lean`) when AOTAutograd compiles it as an inference graph (no
output requires grad) of the simple layout whose mutated inputs that require grad are
leaves (AOTAutograd copies into those detached; into a non-leaf with the caller's grad
mode, which the wrapper does not mimic); there a user output that is an input or a view
of one (the loss, detached, of the graph before the break) is rebuilt from the input by
AOTAutograd's own output handler, as its wrapper would. Files are `cache_dir("graphs")/<key>.pkl`, written to a
temporary file and renamed into place; they unpickle with an allow-list of this
module's tags only. An entry that does not load or build is ignored (logged at
DEBUG) and AOTAutograd runs as before. `FUSIONSTITCH_GRAPH_CACHE=0` turns it off.
"""
from __future__ import annotations

import hashlib
import io
import logging
import operator
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.fx
from torch.autograd.graph import increment_version

from ..config import graph_cache_enabled
from ..runtime import counters
from ..runtime.cache import cache_dir, digest, register_memory_cache, write_atomic
from .devices import DEVICE_KEY

log = logging.getLogger("fusionstitch.frontend")

# Bump when the entry layout changes: older files then miss instead of failing to load.
FORMAT = 2   # 2: node values keep their device
_TORCH_MODULES = ("torch", "_operator", "operator", "builtins", "math")
_OP_NAMESPACES = ("aten", "prims")

# key -> (nodes, mutated pairs, number of inputs, number of user outputs), as stored
_MEMORY: dict[str, tuple] = {}


class NotCacheable(Exception):
    """Why a graph is not cached (logged at DEBUG)."""


# Tags for what the stored graph holds besides numbers, strings, tuples and lists
class _Ref(NamedTuple):       # another node of the graph
    name: str


class _Torch(NamedTuple):     # a dtype, layout or memory format: getattr(torch, name)
    name: str


class _Device(NamedTuple):
    spec: str


class _Val(NamedTuple):       # a node's tensor value (node.meta["val"])
    shape: tuple
    stride: tuple
    dtype: str
    device: str               # where it lives (frontend/devices.py reads it)


_TAGS = {c.__name__: c for c in (_Ref, _Torch, _Device, _Val)}


# --- the key ----------------------------------------------------------------------------
def _torch_target(target: Any) -> bool:
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace in _OP_NAMESPACES
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[0] in _OP_NAMESPACES
    if isinstance(target, torch._ops.OperatorBase):   # higher-order ops hold subgraphs
        return False
    module = getattr(target, "__module__", None) or getattr(
        getattr(target, "__objclass__", None), "__module__", None) or ""
    return module.split(".")[0] in _TORCH_MODULES


def _static(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and all(
        type(d) is int for d in (*value.shape, *value.stride(), value.storage_offset()))


def why_not(gm: torch.fx.GraphModule, example_inputs: list, lean: bool = False) -> str | None:
    """Why AOTAutograd's graph for `gm` may not be cached (None: it may). `lean`: why its
    runtime wrapper may not be ours (`lean_layout`) although it is not cached: inputs that
    require grad and parameters are allowed there, since AOTAutograd's own metadata of the
    compile then says whether the graph is an inference graph of the simple layout (the
    key cannot: it does not see which inputs are leaves)."""
    if not lean and torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        return "an input requires grad"
    if torch._C._is_any_autocast_enabled():
        return "autocast is on"
    if next(gm.parameters(), None) is not None or next(gm.buffers(), None) is not None:
        return "the graph has parameters or buffers"
    for n in gm.graph.nodes:
        if n.op in ("get_attr", "call_module"):
            return f"the graph has a {n.op} node ({n.target})"
        if n.op == "call_function" and not _torch_target(n.target):
            return f"the graph calls {getattr(n.target, '__name__', n.target)!r}"
        if n.op == "placeholder":
            val = n.meta.get("example_value", n.meta.get("val"))
            if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
                    isinstance(val, torch.Tensor) and val.layout == torch.strided and
                    not _static(val)):
                return f"input {n.name} is symbolic"
    return why_not_plain_inputs(example_inputs, parameters=lean)


def why_not_plain_inputs(example_inputs: list, parameters: bool = False) -> str | None:
    """Why these are not plain inputs (None: they are): strided torch.Tensors (and, with
    `parameters`, Parameters) of static sizes, no two of which share storage; that is,
    none aliases another as AOTAutograd sees it (the same storage object), nor overlaps
    another's memory (the same non-empty data pointer)."""
    objects, pointers = set(), set()
    for i, t in enumerate(example_inputs):
        plain = type(t) is torch.Tensor or (parameters and type(t) is torch.nn.Parameter)
        if not plain or t.layout != torch.strided or not _static(t):
            return f"input {i} is a {type(t).__name__}, not a tensor of static sizes"
        storage = t.untyped_storage()
        pointer = (storage.data_ptr(), str(t.device)) if storage.nbytes() else None
        if storage._cdata in objects or pointer in pointers:
            return "two inputs share storage"
        objects.add(storage._cdata)
        if pointer is not None:
            pointers.add(pointer)
    return None


def _functorch_config() -> str:
    import torch._functorch.config as c
    return repr(sorted(c.save_config_portable().items()))


def key(gm: torch.fx.GraphModule, example_inputs: list, options, execute: bool = True) \
        -> str | None:
    """The cache key of AOTAutograd's inference graph for `gm`, or None: not cached."""
    if not (execute and graph_cache_enabled()):   # explain() plans without executing
        return None
    try:
        why = why_not(gm, example_inputs)
    except Exception as e:   # never fail the compile for the cache's sake
        why = f"{type(e).__name__}: {e}"
    if why is not None:
        log.debug("graph cache: not cached: %s", why)
        return None
    from ..fusion.plan_cache import code_stamp, versions
    inputs = [(tuple(t.shape), t.stride(), t.storage_offset(), str(t.dtype), str(t.device),
               t.requires_grad) for t in example_inputs]
    state = (f"grad {torch.is_grad_enabled()}, default {torch.get_default_dtype()}, "
             f"deterministic {torch.are_deterministic_algorithms_enabled()}")
    return digest(f"graph-cache {FORMAT}", versions(), code_stamp(), repr(options), state,
                  _functorch_config(), repr(inputs), gm.code)


# --- storing ----------------------------------------------------------------------------
def _encode(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return _Ref(value.name)
    if isinstance(value, list):   # FX's immutable_list too
        return [_encode(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_encode(v) for v in value)
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return _Torch(str(value).removeprefix("torch."))
    if isinstance(value, torch.device):
        return _Device(str(value))
    raise NotCacheable(f"an argument of type {type(value).__name__}")


def _encode_val(val: Any) -> Any:
    if isinstance(val, torch.Tensor):
        if not _static(val):
            raise NotCacheable("a value of symbolic size")
        return _Val(tuple(val.shape), tuple(val.stride()), str(val.dtype).removeprefix("torch."),
                    str(val.device))
    if isinstance(val, list):
        return [_encode_val(v) for v in val]
    if isinstance(val, tuple):
        return tuple(_encode_val(v) for v in val)
    if val is None or type(val) in (bool, int, float):
        return val
    raise NotCacheable(f"a node value of type {type(val).__name__}")


def _encode_graph(gm: torch.fx.GraphModule) -> tuple:
    nodes = []
    for n in gm.graph.nodes:
        if n.op == "call_function":
            if n.target is operator.getitem:
                target = "getitem"
            elif isinstance(n.target, torch._ops.OpOverload) and \
                    n.target.namespace in _OP_NAMESPACES:
                target = n.target.name()
            else:
                raise NotCacheable(f"a call to {n.target}")
        elif n.op in ("placeholder", "output"):
            target = n.target
        else:
            raise NotCacheable(f"a {n.op} node")
        nodes.append((n.name, n.op, target, _encode(n.args), _encode(tuple(n.kwargs.items())),
                      _encode_val(n.meta.get("val"))))
    return tuple(nodes)


def _entry(gm: torch.fx.GraphModule, num_inputs: int) -> tuple:
    """What to store for `gm`, read with AOTAutograd's metadata of the compile now running."""
    mutated, user_outputs = _layout(gm, num_inputs)
    return _encode_graph(gm), mutated, num_inputs, user_outputs


def _layout(gm: torch.fx.GraphModule, num_inputs: int, aliases: bool = False) \
        -> tuple[tuple, int]:
    """(mutated pairs, number of user outputs) of the inference graph `gm` AOTAutograd is
    compiling now, when its runtime wrapper is the simple one `_runner` stands in for;
    raises NotCacheable otherwise. `aliases`: outputs that are inputs or views of inputs
    are allowed too (the caller rebuilds them with AOTAutograd's own handlers)."""
    from torch._functorch._aot_autograd.schemas import OutputType
    meta = getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)
    if meta is None:
        raise NotCacheable("no AOTAutograd metadata")
    if meta.tokens or meta.num_intermediate_bases or meta.grad_enabled_mutation is not None \
            or meta.is_rng_op_functionalized:
        raise NotCacheable("effect tokens, intermediate bases, a grad-mode change or "
                           "functionalised random ops")
    allowed = (OutputType.non_alias, OutputType.alias_of_input, OutputType.is_input) \
        if aliases else (OutputType.non_alias,)
    if any(o.output_type not in allowed for o in meta.output_info):
        raise NotCacheable("an output aliases an input or an intermediate")
    order = list(meta.mutated_inp_runtime_indices)
    for j, info in enumerate(meta.input_info):
        changed = info.mutates_data or info.mutates_metadata or \
            info.mutation_inductor_storage_resize
        if changed and j not in order:
            raise NotCacheable(f"input {j}'s mutation is kept in the graph")
        if j in order and (not info.mutates_data or info.mutates_metadata or
                           info.mutates_storage_metadata or
                           info.mutation_inductor_storage_resize):
            raise NotCacheable(f"input {j} mutates more than its data")
        if j in order and info.requires_grad and not info.is_leaf:
            # AOTAutograd copies into it with the caller's grad mode, which records the
            # copy in its history; `_runner` copies under no_grad
            raise NotCacheable(f"input {j} requires grad, is no leaf and is mutated")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    outputs = gm.graph.output_node().args[0]
    if len(placeholders) != num_inputs:
        raise NotCacheable(f"{len(placeholders)} placeholders for {num_inputs} inputs")
    if not isinstance(outputs, (tuple, list)) or \
            len(outputs) != len(order) + len(meta.output_info):
        raise NotCacheable("the outputs are not the mutated inputs then the user outputs")
    if any(o.requires_grad for o in meta.output_info):   # not an inference graph
        raise NotCacheable("an output requires grad")
    return tuple(enumerate(order)), len(meta.output_info)   # (graph output, input)


class Layout(NamedTuple):
    """What `lean` needs of AOTAutograd's metadata of an inference graph."""
    pairs: list[tuple[int, int]]   # (graph output, input) of mutated inputs
    handlers: list | None          # per user output, AOTAutograd's alias handler or None


def lean_layout(gm: torch.fx.GraphModule, num_inputs: int) -> Layout | None:
    """The layout of the inference graph `gm` AOTAutograd is compiling now (call it from
    the inference compiler) when `lean` may stand in for AOTAutograd's runtime wrapper, or
    None (logged at DEBUG). For graphs `key` refuses only for their inputs' requires_grad
    (`why_not(..., lean=True)`): nothing is stored. A user output that is an input or a
    view of one (`loss.detach()` of a graph input) is rebuilt by AOTAutograd's own output
    handler, as its wrapper would."""
    try:
        mutated, _ = _layout(gm, num_inputs, aliases=True)
        from torch._functorch._aot_autograd.runtime_wrappers import make_output_handler
        from torch._functorch._aot_autograd.schemas import OutputType
        meta = torch._guards.TracingContext.try_get().fw_metadata
        handlers = [None if o.output_type == OutputType.non_alias else
                    make_output_handler(o, meta, False) for o in meta.output_info]
    except Exception as e:   # NotCacheable, or metadata of another torch: AOTAutograd's
        log.debug("lean runner: not used: %s: %s", type(e).__name__, e)
        return None
    return Layout([(int(i), int(j)) for i, j in mutated],
                  handlers if any(h is not None for h in handlers) else None)


def lean(compiled: Callable, layout: Layout) -> Callable:
    """The wrapper a cache hit returns, around `compiled` with `layout` (`lean_layout`)."""
    run = _runner(compiled, layout.pairs, len(layout.pairs))
    handlers = layout.handlers
    if handlers is None:
        return run

    def run_aliased(*args):
        # after the graph and the copies back, with the caller's grad mode (as
        # AOTAutograd's epilogue): an alias of an input is made from the input
        outs = run(*args)
        return [o if h is None else h(args, outs, o) for h, o in zip(handlers, outs)]
    run_aliased.compiled_graph = compiled   # type: ignore[attr-defined]
    return run_aliased


def _path(key: str) -> Path:
    return cache_dir("graphs") / f"{key}.pkl"


def _checksum(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()[:24]


def store(key: str, gm: torch.fx.GraphModule, num_inputs: int) -> None:
    """Remember AOTAutograd's inference graph `gm` under `key` (call it from the inference
    compiler: it reads the compile's metadata), in memory and on disk, when its runtime
    layout is the simple one; otherwise log why not. A failed write is only logged."""
    try:
        entry = _entry(gm, num_inputs)
    except NotCacheable as e:
        log.debug("graph cache: not cached: %s", e)
        return
    except Exception as e:   # never fail the compile for the cache's sake
        log.debug("graph cache: not cached: %s: %s", type(e).__name__, e)
        return
    _MEMORY[key] = entry
    payload = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    record = {"format": FORMAT, "key": key, "checksum": _checksum(payload), "payload": payload}
    try:
        write_atomic(_path(key), pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError as e:
        log.debug("graph cache: cannot write %s: %s", key, e)


# --- loading ----------------------------------------------------------------------------
class _Unpickler(pickle.Unpickler):
    """Only this module's tags: an entry is data, never code to run."""

    def find_class(self, module: str, name: str):
        if module == __name__ and name in _TAGS:
            return _TAGS[name]
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a graph entry")


def _unpickle(data: bytes) -> Any:
    return _Unpickler(io.BytesIO(data)).load()


def _read(key: str) -> tuple | None:
    """The stored entry of `key`, or None (missing, unreadable, corrupt, another key)."""
    try:
        data = _path(key).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:   # also a cache folder that cannot be made
        log.debug("graph cache: ignoring unreadable entry %s: %s", key, e)
        return None
    try:
        record = _unpickle(data)
        if record["format"] != FORMAT or record["key"] != key:
            raise ValueError("format or key does not match")
        if record["checksum"] != _checksum(record["payload"]):
            raise ValueError("checksum does not match")
        return _unpickle(record["payload"])
    except Exception as e:   # a damaged pickle raises almost anything
        log.debug("graph cache: ignoring entry %s: %s: %s", key, type(e).__name__, e)
        return None


def _torch_value(tag: _Torch) -> Any:
    value = getattr(torch, tag.name)
    if not isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        raise TypeError(f"torch.{tag.name} is not a dtype, layout or memory format")
    return value


def _decode(value: Any, env: dict) -> Any:
    if isinstance(value, _Ref):
        return env[value.name]
    if isinstance(value, _Torch):
        return _torch_value(value)
    if isinstance(value, _Device):
        return torch.device(value.spec)
    if isinstance(value, (list, tuple)):
        return type(value)(_decode(v, env) for v in value)
    return value


def _decode_val(val: Any) -> Any:
    """A node's value as a meta tensor (a fake tensor would cost 0.2 ms a node)."""
    if isinstance(val, _Val):
        return torch.empty_strided(val.shape, val.stride, dtype=_torch_value(_Torch(val.dtype)),
                                   device="meta")
    if isinstance(val, (list, tuple)):
        return type(val)(_decode_val(v) for v in val)
    return val


def _decode_devices(val: Any) -> Any:
    """Where the node's tensors live, shaped as its value (frontend/devices.DEVICE_KEY)."""
    if isinstance(val, _Val):
        return torch.device(val.device)
    if isinstance(val, (list, tuple)):
        return type(val)(_decode_devices(v) for v in val)
    return None


def _resolve(target: str) -> Any:
    if target == "getitem":
        return operator.getitem
    namespace, _, rest = target.partition("::")
    if namespace not in _OP_NAMESPACES:
        raise ValueError(f"op {target} is not an aten or prims op")
    name, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")


def _rebuild(nodes: tuple) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    for name, op, target, args, kwargs, val in nodes:
        args, kwargs = _decode(args, env), dict(_decode(kwargs, env))
        if op == "output":
            graph.output(*args)
            continue
        if op == "placeholder":
            node = graph.create_node("placeholder", target, name=name)
        elif op == "call_function":
            node = graph.create_node("call_function", _resolve(target), args, kwargs, name=name)
        else:
            raise ValueError(f"a {op} node")
        if node.name != name:
            raise ValueError(f"node {name} came back as {node.name}")
        if val is not None:
            node.meta["val"] = _decode_val(val)
            node.meta[DEVICE_KEY] = _decode_devices(val)
        env[name] = node
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def load(key: str, make: Callable[[torch.fx.GraphModule, list], Any], num_inputs: int) \
        -> Callable | None:
    """A compiled function for the graph cached under `key` (`make(graph, mutated pairs)`
    builds the CompiledGraph), or None: a miss, or an entry that does not build."""
    entry = _MEMORY.get(key)
    if entry is None:
        entry = _read(key)
    if entry is None:
        counters.bump("graph_cache_misses")
        return None
    return _build(key, entry, make, num_inputs)


def payload(key: str) -> bytes | None:
    """The entry stored under `key` in this process, pickled (what `load_payload` takes),
    or None: not stored (not cacheable, or cached by another process only)."""
    entry = _MEMORY.get(key)
    return None if entry is None else pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)


def load_payload(key: str, data: bytes, make: Callable[[torch.fx.GraphModule, list], Any],
                 num_inputs: int) -> Callable | None:
    """`load` from an entry carried elsewhere (frontend/precompile.py): the same checks,
    and the entry unpickles with the same allow-list."""
    try:
        entry = _unpickle(data)
    except Exception as e:
        log.debug("graph cache: ignoring carried entry %s: %s: %s", key, type(e).__name__, e)
        counters.bump("graph_cache_misses")
        return None
    return _build(key, entry, make, num_inputs)


def _build(key: str, entry: tuple, make: Callable[[torch.fx.GraphModule, list], Any],
           num_inputs: int) -> Callable | None:
    try:
        nodes, mutated, inputs, user_outputs = entry
        if inputs != num_inputs:
            raise ValueError(f"{inputs} inputs stored, {num_inputs} given")
        pairs = [(int(i), int(j)) for i, j in mutated]
        if any(i != k or not 0 <= j < inputs for k, (i, j) in enumerate(pairs)):
            raise ValueError(f"mutated pairs {pairs} do not fit the graph")
        gm = _rebuild(nodes)
        if len(gm.graph.output_node().args[0]) != len(pairs) + user_outputs:
            raise ValueError("the outputs are not the mutated inputs then the user outputs")
        compiled = make(gm, pairs)
    except Exception as e:
        log.debug("graph cache: entry %s does not build (%s: %s); tracing again", key,
                  type(e).__name__, e)
        _MEMORY.pop(key, None)
        counters.bump("graph_cache_misses")
        return None
    _MEMORY[key] = entry
    counters.bump("graph_cache_hits")
    return _runner(compiled, pairs, len(pairs))


def runner_for(key: str, compiled: Callable) -> Callable | None:
    """The wrapper a hit would return, around `compiled` (the CompiledGraph this process
    just made for the graph `store` kept under `key`), or None when it kept none."""
    entry = _MEMORY.get(key)
    if entry is None:
        return None
    pairs = [(int(i), int(j)) for i, j in entry[1]]
    return _runner(compiled, pairs, len(pairs))


_grad_enabled, _set_grad_enabled = torch.is_grad_enabled, torch._C._set_grad_enabled


def _runner(compiled: Callable, pairs: list[tuple[int, int]], skip: int) -> Callable:
    """AOTAutograd's inference runtime wrapper for the simple layout (see the docstring)."""
    def run(*args):
        # torch.no_grad(), without its context manager's 2 us a call (cartpole's step
        # is 40 us): grad mode off while the graph runs, back on after, also on a raise
        grad = _grad_enabled()
        if grad:
            _set_grad_enabled(False)
        try:
            outs = compiled(list(args))
            written = []
            for i, j in pairs:
                if outs[i] is not args[j]:   # not already written in place
                    args[j].copy_(outs[i])   # (bumps its version)
                else:
                    written.append(args[j])
            if written:
                # our kernel wrote it through its pointer, unseen by autograd: bump its
                # version as AOTAutograd's copy_ onto itself (and eager's in-place op)
                # would, so that a use of its old value saved for a backward raises
                increment_version(written)
        finally:
            if grad:
                _set_grad_enabled(True)
        return list(outs[skip:])
    run.compiled_graph = compiled   # type: ignore[attr-defined]
    return run


def clear_memory_cache() -> None:
    """Forget the graphs of this process (the disk cache stays)."""
    _MEMORY.clear()


register_memory_cache(clear_memory_cache)
