"""Program: executes a FusionPlan group by group.

This is the plan executor: kernel groups run as generated kernels on the targets
that generate them (cpu, cuda, interpret), and through their nodes' reference
implementations (aten overloads) on the `torch` target, which is how explain()
runs a plan. It counts one launch per kernel group and one call per library group,
so `stats()["kernels_launched"]` matches `explain().num_kernels`.

Fallbacks: every part of a plan that runs through torch instead of the kernel or
call the plan meant is counted in `stats()["fallbacks"]`, once per group per call,
and `fallback_reasons` names the cause of each (the frontend logs them per graph):
- an op outside fusionstitch's IR (a library node run by torch);
- an op code-generation legality left to torch because no rule lowers it (GEMMs on a
  target without GEMM stages are library calls by design, and random ops run through
  torch to keep eager's RNG stream: neither is a fallback);
- the kernel groups of a plan whose kernels could not be built (no C++ compiler, a
  source the compiler rejects, a kernel the printer cannot print): they run through
  torch and count as fallbacks, not as launches. Under FUSIONSTITCH_STRICT=1 the
  build error is raised instead.

Intermediates are dropped after their last use so peak memory stays as eager; on the
CPU the memory of large ones may serve later kernel outputs (runtime/recycle.py).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from operator import getitem, itemgetter
from typing import Any

import torch

from .. import config
from ..fusion.lowered import LoweredPlan, lower_plan
from ..fusion.plan import KERNEL, LIBRARY, FusionPlan, node_kind
from ..ir.graph import CONSTANT, GETITEM, PARAMETER, Ref, TensorLiteral, TensorType
from ..ir.ops import lookup, resolve_overload
from ..ir.symbolic import is_symbolic
from ..targets import Target, resolve
from . import counters as _stats
from . import recycle as _recycle
from . import wrapper as _wrapper

# the step kind of a kernel group run through torch because its kernel was not built
_UNBUILT = "unbuilt"

log = logging.getLogger("fusionstitch.runtime")
_warned_dtypes: set[str] = set()


@dataclass(frozen=True)
class _Slot:
    """Argument placeholder: the value computed by node number `index`."""

    index: int


class SizeSlots:
    """The sizes a Program of a graph of symbolic sizes computes per call from its symbols'
    values (kernel size syms, output shapes, sizes passed to torch ops): each expression
    gets a slot after the graph's values, filled at every call."""

    def __init__(self, base: int):
        self.base = base
        self.exprs: list = []
        self._index: dict = {}

    def of_expr(self, e) -> int:
        k = self._index.get(e)
        if k is None:
            k = self._index[e] = len(self.exprs)
            self.exprs.append(e)
        return self.base + k

    def __call__(self, d) -> int:
        return self.of_expr(d.expr)


def _template(value: Any, slot_of: dict[str, int], sizes: SizeSlots | None = None) -> Any:
    if isinstance(value, Ref):
        return _Slot(slot_of[value.name])
    if isinstance(value, TensorLiteral):
        return value.value
    if isinstance(value, tuple):
        return [_template(v, slot_of, sizes) for v in value]
    if sizes is not None and is_symbolic(value):
        return _Slot(sizes(value))
    return value


def _fill(template: Any, values: list) -> Any:
    if isinstance(template, _Slot):
        return values[template.index]
    if isinstance(template, list):
        return [_fill(v, values) for v in template]
    return template


class Program:
    """A compiled plan for one concrete input signature."""

    def __init__(self, plan: FusionPlan | LoweredPlan, device: torch.device | None = None,
                 target: str = "torch", mutated: list[tuple[int, int]] = (),
                 static: bool = False, symbols: list | None = None,
                 free_outputs: frozenset[int] = frozenset()):
        """`plan`: the lowered plan (the driver's `lower` stage), or a plan, lowered here.
        `target`: the target (a name or a targets.Target) that runs it; `torch` runs every
        group through its ops' aten overloads.
        `mutated`: (graph output, parameter) pairs where the output is the parameter's
        new value (AOTAutograd's mutated inputs); kernels may write those in place.
        `static`: every call passes inputs of the sizes and strides of the first (Dynamo
        guards them for a graph of static sizes), so each kernel's syms and in-place
        choices are worked out once (runtime/launch.py).
        `symbols`: the size symbols of a graph of symbolic sizes (frontend/dynamic.py),
        whose values every call passes; the program computes every size from them. Its
        `guards` are those its kernels were lowered under.
        `free_outputs`: positions of graph outputs only the graph's own backward reads
        (a training forward's saved values, frontend `saved_outputs`): a view among them
        may be a reinterpretation of memory like the views inside (runtime/wrapper.py)."""
        lowered = plan if isinstance(plan, LoweredPlan) else None
        plan = plan.plan if lowered is not None else plan
        target = resolve(target)
        if lowered is None or lowered.target is not target:
            lowered = lower_plan(plan, target)
        self.plan = plan
        self.lowered = lowered
        self.target = target.name
        graph = plan.graph
        self.device = device or torch.device("cpu")
        slot_of = {n.name: i for i, n in enumerate(graph.nodes)}
        self.num_slots = len(graph.nodes)
        sizes = SizeSlots(self.num_slots) if symbols is not None else None
        self.param_slots = [slot_of[n.name] for n in graph.params]
        # constants are materialised once, on the program's device
        self.constants = [(slot_of[n.name], n.kwarg("value").value.to(self.device))
                          for n in graph.nodes if n.op == CONSTANT]
        # last readers in *execution* order (groups may run ops in another order than
        # the graph lists them)
        last_use: dict[str, str] = {}
        for g in plan.groups:
            for name in g.nodes:
                for i in graph[name].inputs:
                    last_use[i] = name
        keep = {r.name for r in graph.output_refs} | {n.name for n in graph.params}
        dead_after: dict[str, list[int]] = {}
        for value, user in last_use.items():
            if value not in keep:
                dead_after.setdefault(user, []).append(slot_of[value])
        from ..targets.cpp.build import KernelBuildError
        self.fallback_reasons: list[str] = fallback_reasons(plan, target)
        try:
            kernels = compile_kernels(lowered, target, slot_of, self.device, list(mutated),
                                      sizes)
        except KernelBuildError as e:
            if config.strict():
                raise
            kernels = {}
            n = plan.num_kernels
            self.fallback_reasons.append(
                f"{n} kernel group{'s' * (n != 1)} ({e.cause}): {e}")
        for gid, k in list(kernels.items()):
            if isinstance(k, KernelBuildError):     # this group's kernel alone
                if config.strict():
                    raise k
                del kernels[gid]
                self.fallback_reasons.append(f"kernel group {gid} ({k.cause}): {k}")
                continue
            k.static = static
        self.kernel_steps = kernels
        # kernel groups without a generated kernel on a target that generates them run
        # through torch as fallbacks (a build error above), not as launches
        unbuilt = KERNEL if not target.generates_kernels else _UNBUILT
        # library ops that add into the memory of an argument they read last (inplace.py)
        from .inplace import addmm_into, plan_library_writes
        accumulate = plan_library_writes(plan) if inplace_enabled() else frozenset()
        steps = []
        for g in plan.groups:
            step = kernels.get(g.id)
            if step is not None:
                # values made and last read inside the kernel never reach `values`
                inside = {slot_of[name] for name in g.nodes}
                dead = [d for name in g.nodes for d in dead_after.get(name, ())
                        if d not in inside]
                steps.append(("generated", (step, dead)))
                continue
            ops = []
            for name in g.nodes:
                node = graph[name]
                if node.op == GETITEM:
                    fn = _getitem
                    args = [_Slot(slot_of[node.args[0].name]), node.args[1]]
                    kwargs = {}
                else:
                    fn = addmm_into if name in accumulate else (
                        _RESHAPING.get(node.op) or resolve_overload(node.op))
                    args = [_template(a, slot_of, sizes) for a in node.args]
                    kwargs = {k: _template(v, slot_of, sizes) for k, v in node.kwargs}
                ops.append((slot_of[name], fn, args, kwargs, dead_after.get(name, ())))
            steps.append((unbuilt if g.kind == KERNEL else g.kind, ops))
        outputs = {slot_of[r.name] for r in graph.output_refs}
        self.constants, steps = _bind_constant_views(graph, steps, self.constants, outputs)
        self.steps = steps
        # views run through torch in a program whose every value has the same layout at
        # each call (static sizes and strides, no size symbols): their layout, seen on the
        # first call, lets the generated code make each one as a reinterpretation of its
        # input's memory (runtime/wrapper.py). Not graph outputs the caller sees: it gets
        # views made by torch, with their `_base`; values saved for the backward are read
        # by it alone (an LSTM forward returns 15 `alias`es of its gates for it)
        seen = {slot_of[r.name] for i, r in enumerate(graph.outputs)
                if isinstance(r, Ref) and i not in free_outputs}
        self._view_slots = _view_slots(graph, steps, seen, slot_of, kernels.values()) \
            if static and sizes is None else {}
        # split slot -> {element key: k}, the splits whose elements are views (the wrapper
        # runs a split none of whose elements it must make from its tuple): the layouts of
        # a split's elements are seen when the split runs (its input may be dead by the
        # time a getitem runs)
        self.split_views: dict[int, dict[Any, int]] = {}
        for key in self._view_slots:
            split, k = key if isinstance(key, tuple) else _element(graph, slot_of, key)
            if split is not None:
                self.split_views.setdefault(split, {})[key] = k
        self._elements = {e for views in self.split_views.values() for e in views}
        # slot, or (split slot, k) -> (input slot, sizes, strides, storage offset from
        # the input's)
        self.view_layouts: dict[Any, tuple[int, tuple, tuple, int]] = {}
        # the values generated kernels read from ops run through torch, by slot: the
        # elements read (None: the value itself), checked on the first call (`_conform`)
        self._declared: dict[int, set] = {}
        for step in kernels.values():
            for slot, element in step.inputs:
                node = graph.nodes[slot]
                if element is None and node.op == GETITEM:    # a tuple element, got by torch
                    slot, element = slot_of[node.args[0].name], node.args[1]
                if graph.nodes[slot].op not in (PARAMETER, CONSTANT):
                    self._declared.setdefault(slot, set()).add(element)
        torch_run = {slot for kind, ops in steps if kind != "generated" for slot, *_ in ops}
        self._declared = {s: e for s, e in self._declared.items() if s in torch_run}
        self._conformed = False
        self.outputs = [_Slot(slot_of[o.name]) if isinstance(o, Ref) else
                        _template(o, slot_of, sizes) for o in graph.outputs]
        self.guards = frozenset().union(*(k.kernel.guards for k in kernels.values()))
        self._sizes = None
        if sizes is not None:
            from ..ir.symbolic import compile_values
            self._sizes = compile_values(symbols, sizes.exprs)
        # every output a value (the usual case): picked in C, not by _fill per output
        self._pick_outputs = itemgetter(*(o.index for o in self.outputs)) \
            if len(self.outputs) > 1 and all(isinstance(o, _Slot) for o in self.outputs) \
            else None
        # dead values big enough to be recycled into later kernel outputs (recycle.py):
        # on the CPU, only when some kernel output can take one
        from . import recycle
        self.recycled = frozenset()
        # bytes -> how many kernel outputs of that size take memory from the pool, in the
        # whole plan and after each step (a value dying there is kept only for those)
        self._room: dict[int, int] = {}
        self._room_after: list[dict[int, int]] = [{}] * len(steps)
        for i in range(len(steps) - 1, -1, -1):
            self._room_after[i] = self._room
            kind, ops = steps[i]
            if kind == "generated" and ops[0].pooled:
                self._room = dict(self._room)
                for n in ops[0].pooled.values():
                    self._room[n] = self._room.get(n, 0) + 1
        bound = {slot for slot, _ in self.constants}   # views of constants, made once
        if self.device.type == "cpu" and self._room and recycle.enabled():
            # not the inputs: the caller holds them (recycle.offer would refuse each, and
            # an optimizer step drops 160 a call)
            self.recycled = frozenset(
                slot_of[n.name] for n in graph.nodes
                if n.op not in (PARAMETER, CONSTANT) and isinstance(n.type, TensorType)
                and slot_of[n.name] not in bound
                and n.type.nbytes >= recycle.MIN_BYTES)
        self.num_kernels = sum(1 for kind, _ in steps if kind in ("generated", KERNEL))
        self.num_library_calls = plan.num_library_calls
        # per call: library groups that are fallbacks, and kernel groups left unbuilt
        self.num_fallback_calls = num_fallback_groups(plan, target) + sum(
            1 for kind, _ in steps if kind == _UNBUILT)
        assert all(n.op != PARAMETER for n in graph.nodes[len(self.param_slots):]), \
            "parameters must lead the graph"
        # the per-call code, written out after the first call (runtime/wrapper.py)
        self._fast: Any = None
        self._off: Any = None       # the code while use_generated(False) holds
        self._generate = _wrapper.enabled()

    def __call__(self, inputs: list[torch.Tensor], symbols: tuple = ()) -> list[Any]:
        """Run the plan on `inputs` (the graph's tensor inputs); `symbols`: the size
        symbols' values (a program of a graph of symbolic sizes). Dead values of this
        call go to a pool that is gone when it returns (recycle.py). From the second
        call on, the program runs as generated code (runtime/wrapper.py)."""
        fast = self._fast
        if fast is not None and len(inputs) == len(self.param_slots):
            return fast(inputs, _recycle.Pool() if self.recycled else None,
                        None if self._sizes is None else self._sizes(*symbols))
        out = self._run(inputs, _recycle.Pool() if self.recycled else None, symbols)
        if self._generate and self._conformed and fast is None:
            self._generate = False   # once: a failure to build keeps the interpreter
            try:
                self._fast = _wrapper.build(self, _Slot, self._drop, self._sizes is not None,
                                            self._pick_outputs is not None)
            except Exception:   # a bug of ours: this program stays on the interpreter
                if config.strict():
                    raise
                log.exception("fusionstitch: could not generate a program's per-call code; "
                              "it keeps the interpreter (as slow, as correct)")
        return out

    def use_generated(self, on: bool) -> None:
        """Run the generated per-call code (built at the next call) or the interpreter
        for every call: the A/B of bench/overhead.py, and tests. Code generated before
        is kept for when it is turned on again."""
        if on:
            self._fast = self._fast or self._off
            self._generate = self._fast is None
        else:
            self._off = self._fast or self._off
            self._fast = None
            self._generate = False

    @property
    def generating(self) -> bool:
        """Whether calls run (or will run, from the next one) the generated code."""
        return self._fast is not None or self._generate

    @property
    def generated_source(self) -> str | None:
        """The Python source the program runs per call, once generated."""
        return getattr(self._fast, "source", None)

    def _run(self, inputs: list[torch.Tensor], pool: dict | None,
             symbols: tuple = ()) -> list[Any]:
        values: list[Any] = [None] * self.num_slots
        if self._sizes is not None:
            values.extend(self._sizes(*symbols))
        for slot, t in zip(self.param_slots, inputs):
            values[slot] = t
        for slot, t in self.constants:
            values[slot] = t
        kernels = library = 0
        check = not self._conformed
        for i, (kind, ops) in enumerate(self.steps):
            if kind == "generated":
                step, dead = ops
                step(values, pool)
                if dead:
                    self._drop(values, dead, pool, i)
                kernels += 1
                continue
            for j, (slot, fn, args, kwargs, dead) in enumerate(ops):
                values[slot] = fn(*_fill(args, values), **{k: _fill(v, values)
                                                         for k, v in kwargs.items()})
                if check and slot in self._declared:
                    values[slot] = self._conform(ops, j, values[slot])
                if check and slot in self.split_views:
                    for element, k in self.split_views[slot].items():
                        self._record_layout(element, self._view_slots[element], values,
                                            values[slot][k])
                elif check and slot in self._view_slots and slot not in self._elements:
                    self._record_layout(slot, self._view_slots[slot], values)
                if dead:
                    self._drop(values, dead, pool, i)
            if kind == KERNEL:
                kernels += 1
            elif kind == LIBRARY:
                library += 1
            # _UNBUILT: counted below, in num_fallback_calls
        self._conformed = True
        _stats.bump("kernels_launched", kernels)
        _stats.bump("library_calls", library)
        if self.num_fallback_calls:
            _stats.bump("fallbacks", self.num_fallback_calls)
        if self._pick_outputs is not None:
            return list(self._pick_outputs(values))
        return [_fill(o, values) for o in self.outputs]

    def _record_layout(self, slot: Any, source: int, values: list, out: Any = None) -> None:
        """Remember the layout of view `slot` of value `source` when torch made it as a
        plain alias of the source's memory: the same storage, dtype, conjugate and
        negative bits (a reshape that copied, or a view that changes what the bytes mean,
        is left to torch at every call). The alias has no autograd history: so only where
        none is recorded, grad mode off (Dynamo guards it: every call of this program runs
        so) or a result that does not require grad. A view of a parameter counts as one of
        a plain tensor."""
        src, out = values[source], values[slot] if out is None else out
        if type(src) not in _PLAIN or type(out) not in _PLAIN:
            return
        if out.requires_grad and torch.is_grad_enabled():
            return
        if out.dtype != src.dtype or out.device != src.device \
                or out.is_conj() != src.is_conj() or out.is_neg() != src.is_neg() \
                or out.layout != torch.strided or src.layout != torch.strided:
            return
        ptr = out.untyped_storage().data_ptr()
        if ptr != src.untyped_storage().data_ptr() or (ptr == 0 and out.numel()):
            return
        self.view_layouts[slot] = (source, tuple(out.shape), tuple(out.stride()),
                                   out.storage_offset() - src.storage_offset())

    def _conform(self, ops: list, k: int, value: Any) -> Any:
        """`value`, returned by op `ops[k]` run through torch on the first call, checked
        where generated kernels read it against the type the graph declares. The types come
        from torch's meta kernels, which can disagree with the real ones (fp16 batch-norm
        running statistics: fp32 in meta, fp16 for real), and a kernel reads its inputs as
        declared. A dtype that differs is converted to the declared one, now and on every
        later call (one warning per op); a shape that differs raises. Values only torch
        reads are left as they are (embedding_bag's unused offset2bag: shape (0,) for
        real)."""
        slot, fn, args, kwargs, dead = ops[k]
        declared = self.plan.graph.nodes[slot].type
        op = self.plan.graph.nodes[slot].op
        convert = []
        for i in sorted(self._declared[slot], key=lambda e: -1 if e is None else e):
            t = declared if i is None else declared.elements[i]
            v = value if i is None else value[i]
            if t is None or not isinstance(v, torch.Tensor):
                continue
            if tuple(v.shape) != t.shape:
                raise RuntimeError(f"fusionstitch: {op} returned shape {tuple(v.shape)}"
                                   f"{'' if i is None else f' (value {i})'} where the graph "
                                   f"declares {t}, and a generated kernel reads it")
            if v.dtype != t.torch_dtype:
                convert.append((i, t.torch_dtype))
        if not convert:
            return value
        if op not in _warned_dtypes:    # once per op: every specialisation meets it
            _warned_dtypes.add(op)
            log.warning("%s returns %s where torch's meta kernel (the graph's types) says %s; "
                        "converted to the declared dtypes", op,
                        ", ".join(f"{value.dtype if i is None else value[i].dtype}"
                                  f"{'' if i is None else f' (value {i})'}"
                                  for i, _ in convert), declared)
        fix = partial(_convert, convert=tuple(convert))
        ops[k] = (slot, lambda *a, **kw: fix(fn(*a, **kw)), args, kwargs, dead)
        return fix(value)

    def _drop(self, values: list, dead, pool: dict | None, step: int) -> None:
        """Free the values of `dead` slots (after step number `step`); the memory of
        recyclable ones goes to `pool` while later kernel outputs can take it."""
        recycled = self.recycled
        for d in dead:
            if d in recycled:
                t, values[d] = values[d], None
                _recycle.offer(pool, t, self._room_after[step])
            else:
                values[d] = None


_PLAIN = (torch.Tensor, torch.nn.Parameter)


# ops whose result is a tuple of views of their first argument: each element read by a
# getitem is a view of that argument, made like the others (the op itself is then not run)
SPLITS = frozenset({"split.Tensor", "split_with_sizes.default", "unbind.int"})


def _element(graph, slot_of: dict, slot: int) -> tuple:
    """(split slot, k) when `slot` is getitem k of a split, else (None, None)."""
    node = graph.nodes[slot]
    if node.op == GETITEM:
        return slot_of[node.args[0].name], node.args[1]
    return None, None


def _view_slots(graph, steps: list, outputs: set, slot_of: dict, kernels) -> dict:
    """{view: the slot it is a view of} of the views run through torch whose first
    argument is a value: the graph's view ops (the graph's `view`s run as reshapes, which
    may copy: the first call tells) and the elements of a split (`SPLITS`), views of the
    split's input, whether a getitem reads them (key: its slot) or a generated kernel
    (key: (split slot, k)); not graph outputs."""
    slots: dict = {}

    def split_input(slot: int) -> int | None:
        split = graph.nodes[slot]
        if split.op in SPLITS and isinstance(split.args[0], Ref) and slot not in outputs:
            return slot_of[split.args[0].name]
        return None
    for kind, ops in steps:
        if kind == "generated":
            continue
        for slot, _, args, _, _ in ops:
            node = graph.nodes[slot]
            if slot in outputs or node.op == CONSTANT or not args \
                    or not isinstance(args[0], _Slot):
                continue
            if node.op == GETITEM:
                source = split_input(args[0].index)
                if source is not None:
                    slots[slot] = source
                continue
            try:
                view = lookup(node.op).view
            except Exception:   # an op outside the IR's table: not ours to reason about
                continue
            if view and node.op not in SPLITS:
                slots[slot] = args[0].index
    for step in kernels:
        for slot, k in step.inputs:
            source = split_input(slot) if k is not None else None
            if source is not None:
                slots[(slot, k)] = source
    return slots


def _bind_constant_views(graph, steps: list, constants: list, outputs: set) -> tuple:
    """(constants, steps) with each view of a constant run through torch (a reshape,
    permute or expand of a graph constant, or a chain of them) made once, here, and
    bound as one more constant of the program instead of an op of every call.

    Safe because a graph constant is the program's own frozen tensor: the frontend
    clones each one when it converts the graph (fx_to_ir: a `get_attr` tensor is
    `detach().cpu().clone()`d, and Program moves it to the device once), while module
    parameters and buffers reach the graph as inputs (Dynamo lifts them), which are
    never folded: the caller may swap or mutate those between calls. The graph is
    functional and no kernel writes into a constant (in-place stores go only into
    mutated inputs; recycling skips what the program holds), so a view of one is the
    same tensor at every call. Not folded: a view that is a graph output (the caller
    gets a fresh view per call, as before: it may set attributes on it or resize it),
    and a view whose result has not the type the graph declares (left to the first
    call's check). passes/constant_fold.py does not fold views (a folded constant is
    a contiguous copy, and views are free in the plan), so they reach the program."""
    known = dict(constants)
    bound = list(constants)
    kept_steps = []
    for kind, ops in steps:
        if kind == "generated":
            kept_steps.append((kind, ops))
            continue
        kept = []
        for op in ops:
            slot, fn, args, kwargs, _ = op
            node = graph.nodes[slot]
            value = None
            if (slot not in outputs and node.op not in (GETITEM, CONSTANT)
                    and lookup(node.op).view and _reads_only(args, known)
                    and _reads_only(list(kwargs.values()), known, need=False)):
                try:
                    value = fn(*_fill(args, known), **{k: _fill(v, known)
                                                      for k, v in kwargs.items()})
                except Exception as e:   # an error stays the call's, as before
                    log.debug("view %%%s of a constant not bound: %s", node.name, e)
            if isinstance(value, torch.Tensor) and TensorType.of(value) == node.type:
                known[slot] = value
                bound.append((slot, value))
                # `dead` lists only this op's inputs (constants): nothing to free
            else:
                kept.append(op)
        kept_steps.append((kind, kept))
    return bound, kept_steps


def _reads_only(template: Any, known: dict, need: bool = True) -> bool:
    """Whether every slot `template` reads is in `known` (and it reads one, if `need`)."""
    slots = []

    def walk(t):
        if isinstance(t, _Slot):
            slots.append(t.index)
        elif isinstance(t, list):
            for v in t:
                walk(v)
    walk(template)
    return (bool(slots) or not need) and all(s in known for s in slots)


def _convert(value: Any, convert: tuple) -> Any:
    """`value` with element i (the value itself when i is None) cast to dtype d for each
    (i, d) in `convert`."""
    if convert[0][0] is None:
        return value.to(convert[0][1])
    out = list(value)
    for i, dtype in convert:
        out[i] = out[i].to(dtype)
    return tuple(out)


# Both bound as torch's own C functions: no Python frame per call of a program's op.
_getitem = getitem
_reshape = torch.Tensor.reshape

# The IR's views are logical (a reshape in row-major order); the graph's `view` calls
# were valid for the layouts torch had when it traced them. A library call may return
# another layout here (the CPU flash attention's output follows its query's strides,
# and the query may now come from one of our kernels, contiguous), so a view runs as a
# reshape: the same view where the memory allows it, else a copy (as Inductor does).
_RESHAPING = {"view.default": _reshape, "_unsafe_view.default": _reshape}


def _demoted(plan: FusionPlan, target: Target):
    """(group, node) of each op code-generation legality left to torch because no rule
    lowers it: a one-op library group of an op that is a kernel op alone. Not those that
    run through torch by design: GEMMs on targets without GEMM stages (library calls),
    random ops (eager's RNG stream is kept by letting torch draw)."""
    if not target.generates_kernels:
        return
    from ..ir.ops import FUSIBLE_DOTS
    graph = plan.graph
    for g in plan.groups:
        if g.kind == LIBRARY and len(g.nodes) == 1:
            node = graph[g.nodes[0]]
            if node_kind(node) == KERNEL and node.op not in FUSIBLE_DOTS \
                    and not lookup(node.op).random:
                yield g, node


def _outside_ir(plan: FusionPlan):
    graph = plan.graph
    for g in plan.groups:
        if g.kind == LIBRARY:
            node = next((graph[n] for n in g.nodes if lookup(graph[n].op).fallback), None)
            if node is not None:
                yield g, node


def num_fallback_groups(plan: FusionPlan, target: str | Target) -> int:
    """Library groups of `plan` that are fallbacks on `target` (see the module docstring)."""
    return sum(1 for _ in _outside_ir(plan)) + sum(1 for _ in _demoted(plan, resolve(target)))


def fallback_reasons(plan: FusionPlan, target: str | Target) -> list[str]:
    """Why each fallback library group of `plan` runs through torch, one line each."""
    out = [f"%{node.name} ({node.op}): not an op of fusionstitch's IR"
           for _, node in _outside_ir(plan)]
    target = resolve(target)
    legality = None
    for _, node in _demoted(plan, target):
        # the op alone: does this target make a kernel of it (then legality left it to
        # torch) or not?
        if legality is None:
            from ..fusion.legality import Legality
            legality = Legality(plan.graph, target)
        d = legality.lowers((node.name,))
        why = "left to torch by code-generation legality" if d else d.reason
        out.append(f"%{node.name} ({node.op}): no {target} kernel: {why}")
    return out


def compile_kernels(lowered: LoweredPlan, target: Target, slot_of: dict[str, int],
                    device: torch.device, mutated: list[tuple[int, int]] = (),
                    sizes: SizeSlots | None = None) -> dict:
    """Generated kernels of the lowered plan's kernel groups, by group id (empty for a
    target that generates none); a group whose kernel alone could not be built (the
    others were) maps to its KernelBuildError.

    `mutated` (graph output, parameter) pairs: kernels that may store those outputs into
    the parameters' memory are told so before they are compiled (runtime/inplace.py).
    `sizes`: the slots of a symbolic program's sizes (SizeSlots)."""
    if not target.generates_kernels:
        return {}
    from ..ir.graph import TupleType
    from .launch import KernelStep
    plan = lowered.plan
    graph = plan.graph
    lowered = [(g, lowered.kernels[g.id]) for g in plan.groups if g.kind == KERNEL]
    if not lowered:
        return {}
    from .inplace import may_alias, plan_dying_writes, plan_writes
    by_id = {g.id: k for g, k in lowered}
    writes = plan_writes(plan, by_id, list(mutated)) if mutated else {}
    # outputs stored into inputs' memory: mutated parameters', and values the kernel
    # reads for the last time (a static program's on the CPU alone: Dynamo guards its
    # layouts; not measured on a GPU yet)
    dying = plan_dying_writes(plan, by_id, writes) \
        if sizes is None and device.type == "cpu" and inplace_enabled() else {}
    into = {gid: [(pos, graph.params[p].name) for pos, p in pairs]
            for gid, pairs in writes.items()}
    for gid, pairs in dying.items():
        into.setdefault(gid, []).extend(pairs)
    lowered = [(g, may_alias(k, into[g.id]) if g.id in into else k) for g, k in lowered]
    runs = target.build([k for _, k in lowered])   # KernelBuildError: see Program
    arity = {n.name: len(n.type.elements) for n in graph.nodes if isinstance(n.type, TupleType)}
    # a kernel that alone failed to build has its KernelBuildError in its place: its
    # group runs through torch (Program counts it and names the error)
    steps = {g.id: run if isinstance(run, Exception) else
             KernelStep(k, run, slot_of, arity, device, sizes)
             for (g, k), run in zip(lowered, runs)}
    for gid, pairs in into.items():
        if not isinstance(steps[gid], Exception):
            steps[gid].write_into({pos: slot_of[name] for pos, name in pairs})
    return steps


def inplace_enabled() -> bool:
    """FUSIONSTITCH_INPLACE=0: no kernel output goes into the memory of a value it read
    for the last time (the A/B of runtime/inplace.py's `plan_dying_writes`); mutated
    inputs are still written in place."""
    return config.env_flag_default("FUSIONSTITCH_INPLACE", True)
