"""Capturing the fusion groups of a program for the per-group A/B (bench/groups.py).

    cases = capture(run_step, compiled_sink, source="zoo:cartpole")

A program is compiled with fusionstitch on a target (cpu unless told; its backend's sink
keeps every compiled graph), run once to compile, then once more with each generated kernel step
wrapped so that the inputs it is given are copied as they are (same sizes, strides and
storage offsets: the kernel's dense-or-general choice depends on them). Each kernel group
becomes a `GroupCase`:

* `run_ours()`: the generated kernel through its `KernelStep` (the launch a Program makes:
  its outputs allocated, its syms bound, its in-place writes);
* `gm`: the group's IR nodes as an FX graph of aten calls (every IR op is an aten overload
  with aten's arguments), its placeholders the kernel's inputs and its outputs the
  kernel's outputs: run eagerly it is "the same ops unfused through torch", compiled by
  `torch._inductor.compile` it is "Inductor compiling the same subgraph";
* `ir_text`: the group as an IR graph of its own (its inputs as parameters), `schedule`:
  its composition and implementation template, `cls`: the group's class (bench/groups.py
  sums the A/B per class).

Identical groups (an unrolled RNN repeats one kernel per step) are captured once, with a
count: same C++ source and same input layouts.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Callable

import torch

from fusionstitch.codegen.kernel import Load, Op, Reduce, bodies, template
from fusionstitch.fusion.plan import KERNEL
from fusionstitch.ir.graph import (CONSTANT, GETITEM, PARAMETER, Graph, Node, Ref, TensorLiteral,
                                    TensorType)
from fusionstitch.ir.ops import resolve_overload
from fusionstitch.runtime.cache import digest

_VIEWS = frozenset({"view.default", "_unsafe_view.default"})

# kernel-IR ops that are transcendental functions (a libm / vector-math call each)
TRANSCENDENTAL = frozenset({"exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos",
                            "tan", "tanh", "erf", "pow", "sigmoid", "sqrt", "rsqrt", "asin",
                            "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erfc",
                            "log10", "atan2", "hypot"})
MASKING = frozenset({"where", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not"})


@dataclass
class GroupCase:
    """One kernel group of one compiled graph, with the inputs it was called with."""

    source: str                      # "zoo:cartpole", "corpus:chain-L32/4M", ...
    graph: str                       # the compiled graph's name (forward_3, inference_0)
    group_id: int
    cls: str                         # the group's class (kernel_class, or the corpus's)
    n_ops: int                       # IR ops in the group
    numel: int                       # elements of its largest input or output
    step: object                     # the runtime's KernelStep
    inputs: list                     # one tensor per kernel input, in order
    gm: torch.fx.GraphModule         # the group's ops as aten calls
    ir_text: str
    schedule: str
    cpp: str                         # our generated source: C++ (cpu), Triton (cuda, interpret)
    count: int = 1                   # identical groups in the program
    sizes: dict = field(default_factory=dict)     # a symbolic program's size slots: values
    results: dict = field(default_factory=dict)   # filled by bench/groups.py

    def run_ours(self) -> Callable[[], None]:
        """A function launching our kernel on the captured inputs, as a Program does."""
        step = self.step
        n = 1 + max([s for s, _ in step.inputs] + [o[0] for o in step.outputs])
        n = max([n, *(s + 1 for s in self.sizes)])
        values: list = [None] * n
        for slot, v in self.sizes.items():      # the sizes a symbolic kernel reads
            values[slot] = v
        for (slot, element), t in zip(step.inputs, self.inputs):
            if element is None:
                values[slot] = t
            else:       # a tuple's element: KernelStep reads values[slot][element]
                if not isinstance(values[slot], dict):
                    values[slot] = {}
                values[slot][element] = t
        self._values = values

        def run():
            step(values, None)
        return run

    def our_outputs(self) -> list[torch.Tensor]:
        """The outputs of the last `run_ours()` call, in the kernel's order."""
        out = []
        for slot, element, _, _ in self.step.outputs:
            v = self._values[slot]
            out.append(v if element is None else v[element])
        return out


def copy_as_is(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` on storage of its own with the same sizes, strides and offset (a view
    into a larger buffer stays such a view; clone() would make it dense)."""
    storage = t.untyped_storage()
    new = torch.empty(storage.nbytes(), dtype=torch.uint8, device=t.device)
    new.untyped_storage().copy_(storage)
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    out.set_(new.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    return out


class _Recorder:
    """Stands in for a KernelStep in a Program's steps: copies its inputs (and the values of
    a symbolic program's size slots, which its kernels read), then runs it."""

    def __init__(self, step):
        self.step = step
        self.seen: list = []        # each call's inputs, copied
        self.sizes: dict = {}       # of the first call, as seen[0]

    def __call__(self, values: list, pool=None) -> None:
        ins = []
        for slot, element in self.step.inputs:
            v = values[slot]
            ins.append(copy_as_is(v if element is None else v[element]))
        if not self.seen:
            self.sizes = {i: v for i, v in enumerate(values) if type(v) is int}
        self.seen.append(ins)
        self.step(values, pool)


def size_value(e) -> int:
    """A kernel size expression's value at the sizes it was lowered for."""
    if hasattr(e, "value"):          # Const, Sym
        return e.value
    if hasattr(e, "factors"):
        return math.prod(size_value(f) for f in e.factors)
    if hasattr(e, "terms"):
        return sum(size_value(t) for t in e.terms)
    return 0


def kernel_class(kernel) -> str:
    """A size-free name of what a kernel computes: its components' kinds (reductions with
    their number of loops over r, `scalar` for reductions to one value), then tags for
    transcendental functions, masks and selects, and broadcast (loads that do not move
    with every loop variable). Groups of one class should be fast or slow together."""
    parts, tags = [], set()
    sizes = {b.name: math.prod(b.shape) for b in kernel.buffers}

    def numel(c) -> int:     # elements a flat component writes, rows of a reduction read
        x, r = size_value(c.xnumel), size_value(c.rnumel)
        return x if c.kind == "flat" else x * r
    for c in kernel.components:
        if c.kind == "flat":
            parts.append("flat")
        elif c.kind == "reduce":
            kinds = sorted({s.kind for b in bodies(c) for s in b if isinstance(s, Reduce)})
            one = size_value(c.xnumel) == 1
            parts.append(f"{'scalar-' if one else ''}reduce[{'+'.join(kinds)}]x{len(c.loops)}")
        else:
            parts.append(c.kind)
        for body in bodies(c):
            for s in body:
                if isinstance(s, Op) and s.op in TRANSCENDENTAL:
                    tags.add("transc")
                elif isinstance(s, Op) and s.op in MASKING:
                    tags.add("mask")
                elif isinstance(s, Load) and sizes.get(s.buffer, 0) < numel(c):
                    tags.add("bcast")
    name = "|".join(parts) if len(parts) <= 2 else f"packed{len(parts)}[{parts[0]}..]"
    return name + "".join(f"+{t}" for t in sorted(tags))


def _fx_value(value, env: dict, gm_root: torch.nn.Module, consts: list):
    """An IR argument as an FX argument: Refs to nodes, tuples to lists (aten takes
    int[] and Tensor[] as lists), tensor literals to attributes of the module."""
    if isinstance(value, Ref):
        return env[value.name]
    if isinstance(value, TensorLiteral):
        name = f"_lit{len(consts)}"
        gm_root.register_buffer(name, value.value)
        consts.append(name)
        return ("__attr__", name)
    if isinstance(value, tuple):
        return [_fx_value(v, env, gm_root, consts) for v in value]
    return value


def group_fx(graph: Graph, names, kernel) -> torch.fx.GraphModule:
    """The group `names` of `graph` as an FX graph of aten calls: placeholders for the
    kernel's inputs (in order), outputs the kernel's outputs (in order)."""
    root = torch.nn.Module()
    fx = torch.fx.Graph()
    env: dict = {}
    elements: dict[tuple, torch.fx.Node] = {}
    for i, b in enumerate(kernel.inputs):
        p = fx.placeholder(f"in{i}")
        if b.element is None:
            env[b.value] = p
        else:
            elements[(b.value, b.element)] = p
    consts: list = []
    inside = set(names)

    def attr(v):
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "__attr__":
            return fx.get_attr(v[1])
        if isinstance(v, list):
            return [attr(x) for x in v]
        return v
    for name in names:
        node = graph[name]
        for i in node.inputs:            # constants outside the group, read by value
            if i not in inside and i not in env and graph[i].op == CONSTANT:
                root.register_buffer(f"_c_{i}", graph[i].kwarg("value").value)
                env[i] = fx.get_attr(f"_c_{i}")
            elif i not in inside and i not in env and isinstance(graph[i].type, TensorType):
                # read for its shape alone (zeros_like in a backward): the kernel takes no
                # buffer of it, so the subgraph makes one of its type
                t = graph[i].type
                env[i] = fx.call_function(torch.ops.aten.zeros.default, (list(t.shape),),
                                          {"dtype": t.torch_dtype})
        if node.op == GETITEM:
            src, k = node.args[0].name, node.args[1]
            env[name] = elements[(src, k)] if (src, k) in elements else \
                fx.call_function(operator.getitem, (env[src], k))
            continue
        args = attr(_fx_value(node.args, env, root, consts))
        kwargs = {k: attr(_fx_value(v, env, root, consts)) for k, v in node.kwargs}
        # a view of the IR may read a value whose layout here is not the graph's (a
        # permuted input): as the runtime does (program._RESHAPING), a reshape
        fn = torch.ops.aten.reshape.default if node.op in _VIEWS else resolve_overload(node.op)
        env[name] = fx.call_function(fn, tuple(args), kwargs)
    outs = []
    for b in kernel.outputs:
        v = env[b.value]
        outs.append(v if b.element is None else fx.call_function(operator.getitem,
                                                                 (v, b.element)))
    fx.output(tuple(outs))
    return torch.fx.GraphModule(root, fx)


def group_ir(graph: Graph, names, kernel) -> str:
    """The group as an IR graph of its own: the kernel's inputs as parameters."""
    inside = set(names)
    params, seen = [], set()
    for b in kernel.inputs:
        if b.value not in seen and b.value not in inside:
            seen.add(b.value)
            params.append(Node(b.value, PARAMETER, type=graph[b.value].type))
    for name in names:
        for i in graph[name].inputs:
            if i not in inside and i not in seen:
                seen.add(i)
                n = graph[i]
                params.append(n if n.op == CONSTANT else Node(i, PARAMETER, type=n.type))
    nodes = tuple(params) + tuple(graph[n] for n in names)
    outs = tuple(dict.fromkeys(Ref(b.value) for b in kernel.outputs))
    return str(Graph(nodes, outs, name="group"))


def _numel(kernel) -> int:
    return max([math.prod(b.shape) for b in kernel.buffers if not b.scratch] or [0])


def _schedule(group, kernel) -> str:
    return f"{group.composition} {template(kernel)}"


def capture(run_step: Callable[[], None], sink: list, source: str,
            cls: str | None = None, target: str = "cpu") -> list[GroupCase]:
    """The kernel groups of every graph in `sink` (a fusionstitch backend's `_sink`, filled
    by compiling and running `run_step` once already), with the inputs one more
    `run_step()` gives them. `cls`: the class of every group (the corpus names its
    programs' classes); else each group's `kernel_class`. `target`: the programs' target
    (`cpu`, `cuda`, `interpret`); the cases hold its source (C++ or Triton)."""
    from fusionstitch.targets.cpp.printer import cpp_source
    from fusionstitch.targets.triton.printer import triton_source
    if target == "cpu":
        source_of = cpp_source
    else:
        def source_of(k):
            return triton_source(k, interpret=target == "interpret")[1]
    wrapped = []      # (program, original steps, [(group, step, its recorder)])
    programs = set()  # graphs of the same structure share one Program: wrapped once
    for cg in sink:
        for spec in cg.specialisations.values():
            program = getattr(spec, "program", None)
            if program is None or program.target != target or id(program) in programs:
                continue
            programs.add(id(program))
            kernel_groups = [g for g in spec.plan.groups if g.kind == KERNEL]
            by_step = {id(s): gid for gid, s in program.kernel_steps.items()}
            original = list(program.steps)
            entries = []
            for i, (kind, payload) in enumerate(program.steps):
                if kind != "generated":
                    continue
                step, dead = payload
                recorder = _Recorder(step)
                program.steps[i] = (kind, (recorder, dead))
                gid = by_step[id(step)]
                group = next(g for g in kernel_groups if g.id == gid)
                entries.append((group, step, recorder))
            # the generated per-call code launches kernels inline, past program.steps:
            # the interpreter runs the recording call
            generating = program.generating
            program.use_generated(False)
            wrapped.append((cg.name, spec, program, original, entries, generating))
    try:
        run_step()
    finally:
        for _, _, program, original, _, generating in wrapped:
            program.steps[:] = original
            program.use_generated(generating)
    cases: dict[tuple, GroupCase] = {}
    for gname, spec, _, _, entries, _ in wrapped:
        for group, step, recorder in entries:
            seen = recorder.seen
            if not seen:
                continue
            k = step.kernel
            cpp = source_of(k)
            key = (digest(cpp), tuple((tuple(t.shape), t.stride(), t.dtype, t.storage_offset())
                                      for t in seen[0]))
            if key in cases:
                cases[key].count += 1
                continue
            cases[key] = GroupCase(
                source=source, graph=gname, group_id=group.id,
                cls=cls or kernel_class(k), n_ops=len(group.nodes), numel=_numel(k),
                step=step, inputs=seen[0], sizes=recorder.sizes,
                gm=group_fx(spec.graph, group.nodes, k),
                ir_text=group_ir(spec.graph, group.nodes, k), schedule=_schedule(group, k),
                cpp=cpp)
    return list(cases.values())
