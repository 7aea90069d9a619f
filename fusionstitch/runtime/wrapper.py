"""A Program's per-call code, generated once: one straight-line Python function.

`Program._run` interprets its plan on every call: a loop over steps that tests each
step's kind, fills each torch op's argument templates recursively (`_fill`), builds
each kernel's input list and syms in a loop, and counts launches as it goes. That
interpretation is the same at every call of a program, so after its first call (which
checks the values torch returns against the graph's types, `Program._conform`, and
works out each static kernel's syms) the program writes it out once as Python source
and runs that from then on, as Inductor's wrapper code does:

    def run(inputs, pool, sizes):
        values = [None] * 12
        values[0], values[1] = inputs
        a0 = values[0]
        o0 = empty(S0, dtype=D0, device=DEV)
        K0.run([a0, o0], Y0)              # a static kernel: syms fixed at the first call
        values[5] = o0
        values[7] = F2_0(values[5], A2_0) # an op run through torch, arguments in place
        values[5] = None                  # dead after its last reader
        K3(values, pool)                  # a kernel that needs the general launch
        BUMP()                            # the counters' increments of one call, at once
        return [values[7]]

A launch whose target gives a direct entry (`run.direct`: the cpu target's CPython
built-ins, targets/cpp/pyentry.py) is a call of that entry with the buffers and the
fixed syms as its arguments, guarded by `if K0.run is R0:` (a replaced `run` is called
instead, with the values it would have got). Two savings of Inductor's wrapper as well:
a view at offset 0 that only such launches read is its source (a launch reads a data
pointer, never strides), and an output takes the memory of a dead value of its shape
and dtype that only launches read (`_Source.allocate`, FUSIONSTITCH_REUSE=0 turns it off).
And one of its own: consecutive small kernels run as one native call (a chain), and a
value that a chain's kernel writes and only its later kernels read, dead once the chain
returns, is no tensor at all: it lives in the calling thread's scratch, which the
chain's target places (runtime/chain_scratch.py; FUSIONSTITCH_CHAIN_SCRATCH=0 allocates them).

Behaviour is the program's own: the same steps in the same order, the same values
dropped after the same steps (recyclable ones through `Program._drop`, so the pool
sees what it saw), the same counters bumped by the same amounts (fallbacks included),
the same outputs. A kernel launch is written inline where its syms are static: outputs
stored into inputs as the step remembered them (checked per call), outputs from the
recycling pool taken from it as the step takes them (the launches' locals dropped
before the pool is offered a value, so that it can take it), tuple elements placed in
their tuples; the others call the step as before.
Anything else the interpreter does only on a first call (conforming dtypes) is done
by then: an op it wrapped is the op the source calls.

FUSIONSTITCH_WRAPPER=0 keeps the interpreter (`Program._run`) for every call.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import torch

from ..config import env_flag_default
from ..fusion.plan import KERNEL, LIBRARY
from . import counters, recycle
from .chain_scratch import MOVED, Fresh, temporaries
from .chain_scratch import enabled as scratching
from .launch import place_element


def enabled() -> bool:
    return env_flag_default("FUSIONSTITCH_WRAPPER", True)


class _Source:
    """Lines of the function and the objects its names stand for."""

    def __init__(self):
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}
        # views that are their source in the code (`_composed_views`' pointers): slot ->
        # (size, stride); and a launch's argument holding one -> the view itself, made
        # only where a step's `run` was replaced (what a wrapper of it must see)
        self.pointers: dict[int, tuple] = {}
        self.made: dict[str, str] = {}
        # outputs allocated here that a later output may reuse once dead: slot -> key;
        # dead ones, by (shape, dtype, device): the locals holding them
        self.reusable: frozenset = frozenset()
        self.owned: dict[int, tuple] = {}
        self.free: dict[tuple, list[str]] = {}
        self.released: dict[str, int] = {}     # local -> the line that holds it
        self.taken: set[str] = set()            # locals a later output took
        # the program recycles dead values (runtime/recycle.py): outputs a step would take
        # from the pool take from it here too; and the launches' locals that may still
        # hold a tensor, dropped before the pool is offered one (it takes only a tensor
        # nothing else references)
        self.recycled = False
        self.locals: set[str] = set()

    def allocate(self, slot: int, shape, dt, device, dev_name: str) -> str:
        """Source of a new output for `slot`: the memory of a dead value of the same
        shape and dtype (`reusable` ones: no alias of it can be alive), as Inductor's
        wrapper reuses buffers, else a new tensor (0.4-1 us)."""
        key = (tuple(int(d) for d in shape), dt, str(device))
        free = self.free.get(key)
        if slot in self.reusable:
            self.owned[slot] = key
        if free:
            var = free.pop()
            self.taken.add(var)
            return var
        return _empty(self, shape, dt, device, dev_name)

    def release(self, slot: int) -> None:
        """`slot` is dead: its memory, if it is ours alone, serves a later output."""
        key = self.owned.pop(slot, None)
        if key is not None:
            var = f"free{len(self.names)}_{slot}"
            self.released[var] = len(self.lines)
            self.emit(f"{var} = values[{slot}]")
            self.free.setdefault(key, []).append(var)

    def unused_releases(self) -> None:
        """Drop the releases no later output took: their memory goes when they die."""
        unused = {at for var, at in self.released.items() if var not in self.taken}
        self.lines = [line for k, line in enumerate(self.lines) if k not in unused]

    def argument(self, var: str, slot: int, element) -> None:
        """`var` holds a launch's input `slot` (`element`): note how to make its view."""
        layout = self.pointers.get(slot) if element is None else None
        if layout is None:
            self.made.pop(var, None)
        else:
            self.made[var] = (f"{self.name('RT', _REINTERPRET)}({var}, {layout[0]!r}, "
                              f"{layout[1]!r}, 0)")

    def name(self, prefix: str, obj: Any) -> str:
        n = f"{prefix}{len(self.names)}"
        self.names[n] = obj
        return n

    def expr(self, template: Any, slot_type: type) -> str:
        """Source of a filled argument template (program.py's `_fill`): slots read
        `values`, lists are built anew each call, anything else is a bound constant."""
        if isinstance(template, slot_type):
            return f"values[{template.index}]"
        if isinstance(template, list):
            return "[" + "".join(self.expr(t, slot_type) + ", " for t in template) + "]"
        if template is None or type(template) in (bool, int):
            return repr(template)
        return self.name("A", template)

    def emit(self, line: str) -> None:
        self.lines.append("    " + line)


def _inline(step) -> bool:
    """Whether the launch of `step` (a KernelStep) can be written out: static syms known,
    and outputs stored into inputs only as the step remembered them (checked per call:
    storages of their own, else the step's own launch)."""
    return (step.static and not step.symbolic and step.fixed_syms() is not None
            and (not step.into or step.fixed_into() is not None))


def _tuple_outputs(step) -> bool:
    return any(element is not None for _, element, _, _ in step.outputs)


def build(program, slot_type: type, drop: Callable, symbolic: bool, pick: bool) -> Callable:
    """`run(inputs, pool, sizes)` for `program` (a Program after its first call):
    `inputs` its tensor inputs (exactly one per parameter), `pool` its call's recycling
    pool or None, `sizes` the values of a symbolic program's size slots (`symbolic`) or
    None. `drop`: the program's `_drop`; `pick`: every output is a value's slot."""
    src = _Source()
    src.emit(f"values = [None] * {program.num_slots}")
    if symbolic:
        src.emit("values.extend(sizes)")
    if program.param_slots:
        src.emit("".join(f"values[{s}], " for s in program.param_slots) + "= inputs")
    for slot, t in program.constants:
        src.emit(f"values[{slot}] = {src.name('C', t)}")
    recycled = program.recycled
    src.recycled = bool(recycled)
    drop = src.name("DROP", drop)
    kernels = library = 0
    layouts, skipped, pointers, reusable = _composed_views(program, slot_type) \
        if _REINTERPRET is not None else ({}, frozenset(), frozenset(), frozenset())
    src.pointers = {s: layouts[s][1:3] for s in pointers}
    src.reusable = reusable if env_flag_default("FUSIONSTITCH_REUSE", True) else frozenset()
    # a view made from the first value of its chain reads that value later than the
    # graph did: its drop waits for the last such view (`keep`: value -> that position)
    keep: dict[int, int] = {}
    position = 0
    for kind, ops in program.steps:
        if kind == "generated":         # split elements it reads as views of the input
            for slot, element in ops[0].inputs:
                if (slot, element) in layouts:
                    keep[layouts[(slot, element)][0]] = position
        for op in ([None] if kind == "generated" else ops):
            if op is not None and op[0] in layouts and op[0] not in skipped:
                keep[layouts[op[0]][0]] = position
            position += 1
    deferred: dict[int, list] = {}
    position = -1

    def drops(dead, i: int) -> None:
        dead = list(dead) + deferred.pop(position, [])
        if keep:
            later = [d for d in dead if keep.get(d, -1) > position]
            for d in later:
                deferred.setdefault(keep[d], []).append(d)
            dead = [d for d in dead if d not in later]
        if not dead:
            return
        for d in dead:
            src.release(d)
        if any(d in recycled for d in dead):
            if src.locals and not chain:   # (a pending chain still needs its buffers)
                src.emit(" = ".join(sorted(src.locals)) + " = None")
                src.locals.clear()
            src.emit(f"{drop}(values, {src.name('D', tuple(dead))}, pool, {i})")
        else:
            src.emit("".join(f"values[{d}] = " for d in dead) + "None")

    # consecutive small static kernels, launched together (`_chainable`): (step, position,
    # dead, i); their buffers are made where they stand (`_chain_buffers`: a view after
    # one may read its output), their launch waits for the chain's end (`flush`)
    chain: list[tuple] = []

    # what a chain's kernels allocated where it stands (`Fresh`), candidates for its
    # scratch; `start`: the first line of the chain's buffers
    fresh: list = []
    start = [0]

    def join(step, dead, i) -> None:
        if not chain:
            start[0] = len(src.lines)
        args = _chain_buffers(src, step, len(chain), layouts, fresh)
        chain.append((step, position, dead, i, args))

    def flush() -> None:
        nonlocal position
        if not chain:
            return
        gone = {d for c in chain for d in c[2]} - set(keep) - set(recycled)
        temps = temporaries(src.lines, fresh, gone, start[0]) if scratching() else []
        if _launch_chain(src, [c[0] for c in chain], [c[4] for c in chain], temps):
            for t in temps:
                if t.slot is not None:
                    src.owned.pop(t.slot, None)   # no tensor: none for a later output
        fresh.clear()
        here = position
        for _, at, dead, i, _ in chain:  # drops wait for the chain: its kernels read them
            position = at
            drops(dead, i)
        position = here
        chain.clear()

    for i, (kind, ops) in enumerate(program.steps):
        if kind == "generated":
            position += 1
            step, dead = ops
            kernels += 1
            if _inline(step):
                if not _chainable(step, chain):
                    flush()
                if _chainable(step, chain):
                    join(step, dead, i)
                    continue
                _launch(src, step, layouts)
            else:
                flush()
                src.emit(f"{src.name('K', step)}(values, pool)")
            drops(dead, i)
            continue
        for slot, fn, args, kwargs, dead in ops:
            position += 1
            layout = layouts.get(slot)
            if layout is not None:
                source, size, stride, offset = layout
                if slot in skipped:     # read only by views made from its own source
                    drops(dead, i)
                    continue
                if slot in pointers:    # read only by launches: the source's memory
                    src.emit(f"values[{slot}] = values[{source}]")
                    drops(dead, i)
                    continue
                src.emit(f"values[{slot}] = {src.name('RT', _REINTERPRET)}(values[{source}], "
                         f"{size!r}, {stride!r}, {offset!r})")
                drops(dead, i)
                continue
            if slot in skipped:         # a split whose elements are all views made above
                drops(dead, i)
                continue
            method = _method_call(src, fn, args, kwargs, slot_type)
            if method is not None:
                if _VIEW_METHODS[fn][0] == "reshape":   # (it copies what it cannot view)
                    flush()
                src.emit(f"values[{slot}] = {method}")
                drops(dead, i)
                continue
            if not _pure_view(fn):
                flush()     # an op that reads data: the kernels before it run first
            call = ", ".join([src.expr(a, slot_type) for a in args] +
                             [f"{k}={src.expr(v, slot_type)}" for k, v in kwargs.items()])
            src.emit(f"values[{slot}] = {src.name('F', direct(fn))}({call})")
            drops(dead, i)
        if kind == KERNEL:
            kernels += 1
        elif kind == LIBRARY:
            library += 1
        # `unbuilt` groups: counted in num_fallback_calls, as _run counts them
    flush()
    increments = {"kernels_launched": kernels, "library_calls": library}
    if program.num_fallback_calls:
        increments["fallbacks"] = program.num_fallback_calls
    src.emit(f"{src.name('BUMP', counters.bumper(increments))}()")
    if pick:
        src.emit("return [" + "".join(f"values[{o.index}], " for o in program.outputs) + "]")
    else:
        src.emit("return [" + "".join(src.expr(o, slot_type) + ", "
                                      for o in program.outputs) + "]")
    src.unused_releases()
    text = "def run(inputs, pool, sizes):\n" + "\n".join(line for line in src.lines
                                                        if line is not MOVED) + "\n"
    namespace = dict(src.names)
    namespace["empty"] = torch.empty
    exec(compile(text, f"<fusionstitch program {id(program):x}>", "exec"), namespace)
    run = namespace["run"]
    run.source = text      # type: ignore[attr-defined]
    return run


def _composed_views(program, slot_type: type) -> tuple[dict, frozenset, frozenset, frozenset]:
    """(layouts, skipped, pointers, reusable): each view of `program.view_layouts` made from the
    first value of its chain of such views (a view of a view of x is one
    reinterpretation of x); the views that need not be made at all: those read by
    nothing but such views; and the views at offset 0 read only by written-out kernel
    launches. A launch takes a buffer's data pointer and nothing else (its sizes and
    strides are the syms fixed at the first call), which is the source's own: such a
    view is its source in the generated code (a reinterpretation costs 0.6-1.2 us);
    and the values whose memory a later output may take once they are dead (`_Source`'s
    `allocate`)."""
    known = program.view_layouts
    layouts = {}
    for slot, (source, size, stride, offset) in known.items():
        while source in known:
            source, offset = known[source][0], offset + known[source][3]
        layouts[slot] = (source, size, stride, offset)
    readers: dict[int, set] = {}
    launched: set[int] = set()      # values read by written-out launches

    def read(template: Any, by: Any) -> None:
        if isinstance(template, slot_type):
            readers.setdefault(template.index, set()).add(by)
        elif isinstance(template, (list, tuple)):
            for t in template:
                read(t, by)
        elif isinstance(template, dict):
            for t in template.values():
                read(t, by)

    for kind, ops in program.steps:
        if kind == "generated":
            step = ops[0]
            # (a launch that is not written out reads its inputs from `values` itself)
            inline = _inline(step)
            for slot, element in step.inputs:
                if (slot, element) in layouts and inline:
                    continue
                if inline and element is None:
                    launched.add(slot)
                else:
                    readers.setdefault(slot, set()).add(None)
            continue
        for slot, _, args, kwargs, _ in ops:
            if slot in layouts:
                continue        # reads its chain's first value, not its own source
            read(args, slot)
            read(kwargs, slot)
    for o in program.outputs:
        read(o, None)
    # an input a launch stores an output into becomes that output: a tensor made where
    # it stands (not only its source's pointer)
    for kind, ops in program.steps:
        if kind == "generated" and ops[0].into:
            for slot in ops[0].into.values():
                readers.setdefault(slot, set()).add(None)
    skipped = {s for s in layouts if not readers.get(s) and s not in launched}
    # a split whose every element read is a view made from its input is not run at all
    skipped.update(s for s in program.split_views
                   if not readers.get(s) and s not in launched)
    pointers = {s for s in layouts if s in launched and not readers.get(s)
                and layouts[s][3] == 0}
    # values whose memory may serve a later output once they are dead: read by
    # written-out launches alone (no op of torch's may have kept an alias, no output),
    # no view made from them, no output stored into them, not the pool's
    sources = {layout[0] for layout in layouts.values()}
    into = {slot for kind, ops in program.steps if kind == "generated" and ops[0].into
            for slot, _ in ops[0].inputs}
    reusable = {s for s in launched if not readers.get(s)} - sources - into \
        - set(program.split_views) - set(program.recycled)
    return layouts, frozenset(skipped), frozenset(pointers), frozenset(reusable)


def _private(name: str) -> Callable | None:
    """One of torch's C helpers for generated wrapper code (Inductor's use them: they
    skip the dispatcher), or None where this torch has no such helper."""
    try:
        from torch._C._dynamo import guards
    except ImportError:
        return None
    return getattr(guards, name, None)


# `_reinterpret_tensor(x, sizes, strides, offset)`: x's memory with those sizes and
# strides, the storage offset `offset` elements past x's (0.9 us against 1.8-2.5 for a
# view op here); `_empty_strided_cpu(sizes, strides, dtype)`: a CPU tensor (1.0 us
# against 2.9 for torch.empty with keywords).
_REINTERPRET = _private("_reinterpret_tensor")
_EMPTY_CPU = _private("_empty_strided_cpu")


def _contiguous_strides(shape) -> tuple:
    strides, n = [], 1
    for d in reversed(tuple(shape)):
        strides.append(n)
        n *= max(int(d), 1)
    return tuple(reversed(strides))


def _empty(src: _Source, shape, dt, device, dev_name: str) -> str:
    """Source allocating a contiguous tensor of `shape` and dtype `dt` on `device`."""
    if _EMPTY_CPU is not None and torch.device(device).type == "cpu":
        return (f"{src.name('ES', _EMPTY_CPU)}({src.name('S', tuple(shape))}, "
                f"{src.name('ST', _contiguous_strides(shape))}, {src.name('T', dt)})")
    return f"empty({src.name('S', tuple(shape))}, dtype={src.name('T', dt)}, device={dev_name})"


def _view_methods() -> dict:
    """aten view ops whose Tensor method computes the same view: op -> (method, whether the
    op's second argument is a size list the method takes unpacked). A method call with
    ints costs about a third of the operator object's boxed call (1 us against 2.7 us
    here), and a transformer step runs dozens of views around its GEMMs."""
    aten = torch.ops.aten
    return {aten.view.default: ("view", True), aten.permute.default: ("permute", True),
            aten.expand.default: ("expand", True), aten.t.default: ("t", False),
            aten.transpose.int: ("transpose", False),
            aten.unsqueeze.default: ("unsqueeze", False),
            aten.squeeze.dim: ("squeeze", False), aten.select.int: ("select", False),
            # the runtime's views (program.py runs the graph's views as reshapes)
            torch.Tensor.reshape: ("reshape", True)}


_VIEW_METHODS = _view_methods()

# aten ops that only make a view of their input (never read its data, never copy): a
# chain of kernels before one need not run first (reshape and flatten may copy: not here)
_PURE_VIEWS = frozenset(getattr(getattr(torch.ops.aten, p), o) for p, o in (
    ("alias", "default"), ("view", "default"), ("_unsafe_view", "default"),
    ("permute", "default"), ("expand", "default"), ("t", "default"),
    ("transpose", "int"), ("unsqueeze", "default"), ("squeeze", "dim"),
    ("squeeze", "dims"), ("squeeze", "default"), ("select", "int"), ("slice", "Tensor"),
    ("detach", "default"), ("as_strided", "default"), ("diagonal", "default"),
    ("unfold", "default")))


def _pure_view(fn) -> bool:
    try:
        return fn in _PURE_VIEWS
    except TypeError:       # an unhashable callable
        return False


def _method_call(src: _Source, fn, args, kwargs, slot_type: type) -> str | None:
    """Source calling the Tensor method for a view op of `_VIEW_METHODS` on a value, or
    None (any other op, keyword arguments, a first argument that is not a value)."""
    try:
        entry = _VIEW_METHODS.get(fn)
    except TypeError:       # an unhashable callable
        return None
    if entry is None or kwargs or not args or not isinstance(args[0], slot_type):
        return None
    method, unpack = entry
    rest = list(args[1:])
    if unpack:
        if len(rest) != 1 or not isinstance(rest[0], list) or not rest[0]:
            return None     # (an empty size: `x.view()` is not `view(x, [])`)
        rest = rest[0]
    parts = [src.expr(a, slot_type) for a in rest]
    return f"{src.expr(args[0], slot_type)}.{method}({', '.join(parts)})"


def _bindings() -> dict:
    """Library ops whose torch function is the same overload with the same arguments, in
    the same order (keywords too): it reaches the op through an unboxed call, where the
    operator object converts every argument to an IValue first (a 1x1 convolution: 5.0
    against 8.7 us; mm 1.9 against 2.6 us; CPU attention 11.0 against 12.3 us; index_put
    3.0 against 4.6 us)."""
    aten = torch.ops.aten
    pairs = [(op, torch) for op in (
        "convolution", "mm", "addmm", "bmm", "baddbmm", "index_put", "embedding",
        "_scaled_dot_product_flash_attention_for_cpu")]
    pairs.append(("max_pool2d_with_indices", torch._C._nn))
    return {getattr(aten, op).default: getattr(module, op) for op, module in pairs
            if hasattr(aten, op) and hasattr(module, op)}


_BINDINGS = _bindings()


def direct(fn: Callable) -> Callable:
    """What the source calls for op `fn`: the torch function of `_BINDINGS`, else an aten
    OpOverload's own operator object, the one `OpOverload.__call__` forwards to
    (`self._op(*args, **kwargs)`), so each op run through torch costs one C call and no
    Python frame (a program runs tens per call); anything else (a wrapper from
    `_conform`, a C function) as it is."""
    if type(fn) is torch._ops.OpOverload:
        return _BINDINGS.get(fn) or fn._op
    return fn


def _storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


# A chain's kernels are launched in one native call (the target's `run.chain`, e.g.
# targets/cpp/build.chain) when each writes at most CHAIN_KERNEL_BYTES and all of them
# CHAIN_BYTES: a launch's host cost (0.3-8 us) weighs only beside small kernels, and a
# chain allocates its kernels' outputs before it runs and drops its dead values after,
# so its memory peak can grow by what it allocates.
CHAIN_KERNEL_BYTES = 1 << 18
CHAIN_BYTES = 1 << 20


def _output_bytes(step) -> int:
    return sum(_nbytes(shape, dt) for (_, _, shape, _), dt in
               zip(step.outputs, step.torch_dtype)) + \
        sum(_nbytes(shape, dt) for shape, dt in step.scratch)


def _chainable(step, chain: list) -> bool:
    """Whether `step` (an inline launch) may join `chain`: no stores into inputs, a target
    runner that chains, the same one as the chain's, and the byte limits above."""
    fn = getattr(step.run, "chain", None)
    if step.into or fn is None or not chaining() or _tuple_outputs(step):
        return False
    size = _output_bytes(step)
    if size > CHAIN_KERNEL_BYTES:
        return False
    if chain:
        first = chain[0][0]
        if getattr(first.run, "chain", None) is not fn or \
                sum(_output_bytes(c[0]) for c in chain) + size > CHAIN_BYTES:
            return False
    return True


def chaining() -> bool:
    """FUSIONSTITCH_CHAIN=0 launches every kernel on its own (the A/B of the chains)."""
    return env_flag_default("FUSIONSTITCH_CHAIN", True)


def _input(src: _Source, layouts: dict, slot: int, element) -> str:
    """Source of a kernel's input: the value, its tuple element, or a split's element
    made as a view of the split's input (`layouts` has it)."""
    layout = layouts.get((slot, element))
    if layout is not None:
        source, size, stride, offset = layout
        return (f"{src.name('RT', _REINTERPRET)}(values[{source}], {size!r}, {stride!r}, "
                f"{offset!r})")
    return f"values[{slot}]" + ("" if element is None else f"[{element!r}]")


def _chain_buffers(src: _Source, step, j: int, layouts: dict, fresh: list) -> list[str]:
    """The buffers of the `j`th kernel of a chain, its outputs allocated (and in `values`,
    for the views and kernels after it): the names of its arguments. Appends to `fresh`
    the buffers allocated anew here (a `Fresh` each: where the chain's scratch may hold
    them instead)."""
    args = []
    for k, (slot, element) in enumerate(step.inputs):
        src.emit(f"a{j}_{k} = {_input(src, layouts, slot, element)}")
        src.argument(f"a{j}_{k}", slot, element)
        args.append(f"a{j}_{k}")
    device = src.name("DEV", step.device)
    for k, ((slot, _, shape, _), dt) in enumerate(zip(step.outputs, step.torch_dtype)):
        made = _new_output(src, step, k, slot, shape, dt, device)
        if made.startswith("ES"):       # `_empty`'s (not the pool's, not a dead value's)
            fresh.append(Fresh(j, len(args), slot, len(src.lines), _nbytes(shape, dt)))
        src.emit(f"o{j}_{k} = values[{slot}] = {made}")
        args.append(f"o{j}_{k}")
    for k, (shape, dt) in enumerate(step.scratch):
        made = _empty(src, shape, dt, step.device, device)
        if made.startswith("ES"):
            fresh.append(Fresh(j, len(args), None, len(src.lines), _nbytes(shape, dt)))
        src.emit(f"s{j}_{k} = {made}")
        args.append(f"s{j}_{k}")
    src.locals.update(args)
    return args


def _nbytes(shape, dt) -> int:
    return math.prod(int(d) for d in shape) * dt.itemsize


def _new_output(src: _Source, step, k: int, slot: int, shape, dt, dev_name: str) -> str:
    """Source of output k's memory: from the call's recycling pool where the step would
    take it from there (`KernelStep.pooled`), else `_Source.allocate`'s."""
    if src.recycled and k in step.pooled:
        return (f"{src.name('TAKE', recycle.take)}(pool, {src.name('S', tuple(shape))}, "
                f"{src.name('T', dt)}, {step.pooled[k]})")
    return src.allocate(slot, shape, dt, step.device, dev_name)


def _launch_chain(src: _Source, steps: list, args: list[list[str]], temps: list) -> bool:
    """The launches of a chain's kernels (`args`: each one's buffers, made by
    `_chain_buffers`): one call of their target's chain, which checks at each call that
    no step's `run` was replaced since (a profiler, a test wraps them) and launches them
    one by one if one was; one by one too where there is one kernel, or the target
    refuses the chain. A chain with a `direct` entry (targets/cpp/pyentry.py) is called
    with the buffers as its arguments, no list built.

    `temps` (`chain_scratch.temporaries`): buffers the chain's call keeps in its scratch instead (its
    target's `chain` places them, no tensor is allocated); their allocations, and the
    arguments that read them, move to the one-by-one branch, which needs tensors.
    Returns whether they did (False: no chain call, or one refusing the scratch)."""
    runs = [s.run for s in steps]
    syms = [list(s.fixed_syms()) for s in steps]
    fn = None
    if len(steps) > 1 and temps:
        fn = runs[0].chain(runs, syms, [(t.nbytes, ((t.j, t.position),) + tuple(
            (j, position) for j, position, _ in t.readers)) for t in temps])
    placed = fn is not None
    if fn is None and len(steps) > 1:
        fn = runs[0].chain(runs, syms)
    moved: list[str] = []
    inside = set()
    if placed:
        for t in temps:
            inside.add(args[t.j][t.position])
            moved.append(src.lines[t.line].strip())
            src.lines[t.line] = MOVED
            for j, position, line in t.readers:
                inside.add(args[j][position])
                src.lines[line] = MOVED
                moved.append(f"{args[j][position]} = {args[t.j][t.position]}")
    names = [src.name("K", step) for step in steps]
    pad = ""
    if fn is not None:
        src.emit(f"if tuple(map({src.name('RUN', _RUN)}, {src.name('KS', tuple(steps))})) == "
                 f"{src.name('R', tuple(runs))}:")
        passed = [a for buffers in args for a in buffers if a not in inside]
        direct = getattr(fn, "direct", None)
        if direct is not None:
            entry, head, error = direct
            src.name("CH", fn)      # (alive as long as the code: it owns the chain's table)
            call = f"{src.name('CE', entry)}({', '.join(list(map(repr, head)) + passed)})"
            src.emit(f"    if (e := {call}):")
            src.emit(f"        raise {src.name('KE', error)}(e)")
        else:
            src.emit(f"    {src.name('CH', fn)}([{', '.join(passed)}])")
        src.emit("else:")
        pad = "    "
        for line in moved:
            src.emit(pad + line)
    for j, step in enumerate(steps):
        _call(src, step, names[j], args[j], pad)
    return placed


def _call(src: _Source, step, name: str, args: list[str], pad: str) -> None:
    """The launch of a static kernel (`name`: its KernelStep's) on buffers `args`: a
    direct call of its native entry (targets/cpp/pyentry.py: no list, no Python frame)
    while its `.run` is the one it was built with, else `.run` itself, read at each call
    as KernelStep reads it (a test or a profiler may wrap it). A target's `run.direct`:
    (entry, leading arguments, None or code -> the exception of a nonzero return)."""
    run = step.run
    syms = src.name("Y", step.fixed_syms())
    made = ", ".join(src.made.get(a, a) for a in args)
    direct = getattr(run, "direct", None)
    if direct is None:
        src.emit(f"{pad}{name}.run([{made}], {syms})")
        return
    entry, head, error = direct
    values = ", ".join([repr(h) for h in head] + args + [repr(int(y)) for y in step.fixed_syms()])
    src.emit(f"{pad}if {name}.run is {src.name('R', run)}:")
    call = f"{src.name('LE', entry)}({values})"
    if error is not None:   # the code of the kernel's error cell -> what it raises
        src.emit(f"{pad}    if (e := {call}):")
        src.emit(f"{pad}        raise {src.name('KE', error)}(e)")
    else:
        src.emit(f"{pad}    {call}")
    src.emit(f"{pad}else:")
    src.emit(f"{pad}    {name}.run([{made}], {syms})")


_RUN = operator.attrgetter("run")


def _launch(src: _Source, step, layouts: dict) -> None:
    """A static kernel's launch inline (KernelStep.__call__'s path for a static step).
    A step that stores outputs into inputs (runtime/inplace.py) takes the choice it
    remembered when the inputs are on the storages it was made for (as the step itself
    does), and otherwise launches as a step (which checks again)."""
    args = []
    for k, (slot, element) in enumerate(step.inputs):
        a = f"a{k}"
        src.emit(f"{a} = {_input(src, layouts, slot, element)}")
        src.argument(a, slot, element)
        args.append(a)
    into = dict(step.fixed_into()[0]) if step.into else {}
    pad = ""
    if step.into:
        # the remembered choice while the inputs lie on storages of their own and the
        # unread inputs it writes into on none of theirs (KernelStep.fixed_into)
        chosen, unread = step.fixed_into()
        sp = src.name("SP", _storage_ptr)
        src.emit(f"ptrs = {{{''.join(f'{sp}({a}), ' for a in args)}}}")
        test = f"len(ptrs) == {len(args)}" + "".join(
            f" and {sp}(values[{slot}]) not in ptrs" for slot in sorted(unread))
        src.emit(f"if {test}:")
        pad = "    "
        if chosen:
            bump = counters.bumper({"inplace_writes": len(chosen)})
            src.emit(f"{pad}{src.name('BUMP', bump)}()")
    device = src.name("DEV", step.device)
    outs = []
    for k, ((slot, element, shape, _), dt) in enumerate(zip(step.outputs, step.torch_dtype)):
        if k in into and k in step.into_views:     # an input of another shape
            src.emit(f"{pad}o{k} = values[{into[k]}].view({tuple(step.into_views[k])})")
        elif k in into:
            src.emit(f"{pad}o{k} = values[{into[k]}]")
        elif step.into or element is not None:
            # (two branches: no memory taken from the dead in one alone; a tuple's
            # element is no slot's own tensor)
            src.emit(f"{pad}o{k} = {_empty(src, shape, dt, step.device, device)}")
        else:
            src.emit(f"{pad}o{k} = {_new_output(src, step, k, slot, shape, dt, device)}")
        outs.append(f"o{k}")
    scratch = []
    for k, (shape, dt) in enumerate(step.scratch):
        src.emit(f"{pad}s{k} = {_empty(src, shape, dt, step.device, device)}")
        scratch.append(f"s{k}")
    name = src.name("K", step)
    src.locals.update(args + outs + scratch)
    _call(src, step, name, args + outs + scratch, pad)
    for (slot, element, _, _), o in zip(step.outputs, outs):
        if element is None:
            src.emit(f"{pad}values[{slot}] = {o}")
        else:
            src.emit(f"{pad}{src.name('PE', place_element)}(values, {slot}, "
                     f"{step.tuple_arity[slot]}, {element}, {o})")
    if step.into:
        src.emit("else:")
        src.emit(f"    {name}(values, pool)")
