"""Writing mutated inputs in place.

A step that updates its inputs (an optimizer step, batch-norm running statistics)
reaches us functionalised: AOTAutograd's graph returns each mutated input's new
value as one of its first outputs and then copies it back
(`param.copy_(new_value)` in its mutation epilogue): one more read and write of
every updated tensor, as much memory traffic again as the update itself.

When a generated kernel computes a new value, it may store it straight into the
input's memory instead; the program then returns the input tensor itself as that
output, and the epilogue's `copy_` of a tensor onto itself does nothing. This is
safe when nothing reads the old value after the write:

- plan level: every reader of the input (or of a view of it) runs in the same
  kernel or before it, neither the input nor a view of it is a graph output, and the
  new value (or a view of it) is no other graph output (a tensor saved for backward
  would alias the input, and the epilogue's `copy_` would bump its version);
- kernel level: the kernel reads the input only where it writes the new value,
  at the same element, before writing it (same component; an earlier loop over
  the row, or earlier in the same loop);
- at launch: the input is contiguous, has the output's shape and dtype, and shares
  no memory with the kernel's other inputs; otherwise the output gets its own
  memory as before (and the epilogue copies).

The same three checks let a kernel store an output into the memory of a value it reads
for the last time (`plan_dying_writes`; Inductor's in-place buffers): a batch norm's
result into its convolution's, a residual add's into its GEMM's. There the memory must
be new memory of the call that nothing else sees (a kernel's output or the result of a
library op that never returns a view, no graph output aliasing it, no later reader), and
only outputs of INPLACE_MIN_BYTES or more take part (static programs on the CPU; knob
FUSIONSTITCH_INPLACE=0). Fresh big outputs fault every page in on first touch (three
1x1 convolutions with batch norms: 2281 minor faults a call without, none with).
"""
from __future__ import annotations

import logging
import math

import torch

from ..codegen import expr as E
from ..codegen.kernel import Kernel, Load, Store, bodies, hinted_value
from ..fusion.plan import KERNEL, FusionPlan
from ..ir.graph import ITEMSIZE, Ref, TensorType
from ..ir.ops import lookup, view_root
from ..ir.symbolic import hint

log = logging.getLogger("fusionstitch.runtime")


def mutated_input_pairs(kind: str) -> list[tuple[int, int]]:
    """(graph output, placeholder) pairs of the graph AOTAutograd is compiling now: output
    i is the new value of input j. Call it while the compiler callback runs (the tracing
    context is gone by the first call). Backward graphs mutate nothing of the user's."""
    if kind == "backward":
        return []
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    if meta is None:
        return []
    try:
        out = []
        for i, j in enumerate(meta.mutated_inp_runtime_indices):
            info = meta.input_info[j]
            if info.mutates_data and not info.mutates_metadata and \
                    not getattr(info, "mutates_storage_metadata", False):
                out.append((i, j))
        return out
    except (AttributeError, IndexError, TypeError):   # another torch's metadata layout
        return []


def _users(graph) -> dict[str, list[str]]:
    """value -> the nodes reading it, in graph order (once per plan_writes: building it
    per mutated input made an optimizer step's 120 inputs cost 0.1 s)."""
    users: dict[str, list[str]] = {}
    for n in graph.nodes:
        for i in dict.fromkeys(n.inputs):
            users.setdefault(i, []).append(n.name)
    return users


def _aliases(graph, name: str, users: dict[str, list[str]]) -> set[str]:
    """`name` and every value that is a view of it (through chains of views)."""
    out, todo = {name}, [name]
    while todo:
        for u in users.get(todo.pop(), ()):
            if u not in out and lookup(graph[u].op).view:
                out.add(u)
                todo.append(u)
    return out


def _facts(plan: FusionPlan) -> tuple:
    """(graph, group of each node, position of each group, graph outputs' names, readers
    of each value, position of each node): what the plan-level checks read."""
    graph = plan.graph
    return (graph, {n: g for g in plan.groups for n in g.nodes},
            {g.id: k for k, g in enumerate(plan.groups)},
            {o.name for o in graph.outputs if isinstance(o, Ref)}, _users(graph),
            {n.name: k for k, n in enumerate(graph.nodes)})


def plan_writes(plan: FusionPlan, kernels: dict[int, Kernel],
                pairs: list[tuple[int, int]]) -> dict[int, list[tuple[int, int]]]:
    """Which kernel outputs may be stored into which inputs: {group id: [(output buffer
    position, parameter position)]}. `kernels` are the lowered kernels by group id;
    `pairs` are (graph output, parameter position) pairs."""
    graph, group_of, order, outputs, users, position = _facts(plan)
    out: dict[int, list[tuple[int, int]]] = {}
    for oi, p in pairs:
        if not (0 <= p < len(graph.params)) or oi >= len(graph.outputs):
            continue
        param = graph.params[p].name
        new = graph.outputs[oi]
        if not isinstance(new, Ref) or new.name == param or new.name not in group_of:
            continue
        g = group_of[new.name]
        kernel = kernels.get(g.id)
        if kernel is None:
            continue
        why = _plan_hazard(graph, param, g, group_of, order, outputs, users, position)
        if why is None:
            why = _shared_output(graph, new.name, oi, users)
        pos = next((k for k, b in enumerate(kernel.outputs)
                    if b.value == new.name and b.element is None), None)
        if why is None and pos is None:
            why = "the kernel does not store it whole"
        if why is None:
            why = kernel_hazard(kernel, param, kernel.outputs[pos])
        if why is not None:
            log.debug("%%%s is written to new memory, not into %%%s: %s", new.name, param, why)
            continue
        out.setdefault(g.id, []).append((pos, p))
    return out


# smaller outputs keep their own memory: malloc serves them from warm free lists, and a
# launch that writes into an input cannot join a chain (runtime/wrapper.py)
INPLACE_MIN_BYTES = 128 * 1024


def _nbytes(buf) -> int:
    n = ITEMSIZE[buf.dtype]
    for d in buf.shape:
        n *= int(d)
    return n


# library ops whose result is always new memory, never a view of an argument
FRESH_LIBRARY_OPS = frozenset({"convolution.default", "mm.default", "addmm.default",
                               "bmm.default", "baddbmm.default"})


def plan_dying_writes(plan: FusionPlan, kernels: dict[int, Kernel],
                      param_writes: dict[int, list[tuple[int, int]]]
                      ) -> dict[int, list[tuple[int, str]]]:
    """Which kernel outputs may be stored into the memory of a value the kernel reads
    for the last time (Inductor's in-place buffers: a batch norm's output in its
    convolution's result, a residual add in its GEMM's): {group id: [(output buffer
    position, input value)]}, the input read at the element it writes (`kernel_hazard`).
    The input's memory (its root through views) must be new memory of this call that
    nothing else sees: a kernel's output (not one stored into a parameter,
    `param_writes`) or a result of FRESH_LIBRARY_OPS, no graph output aliases it, every
    reader of it or of a view of it runs in this kernel or before, and no other input of
    the kernel is a view of it. At launch the input must still be contiguous, of the
    output's shape and dtype, and share no memory with the kernel's other inputs
    (`writable`), else the output gets its own memory."""
    facts = _facts(plan)
    in_params = {kernels[gid].outputs[pos].value
                 for gid, pairs in param_writes.items() for pos, _ in pairs}
    out: dict[int, list[tuple[int, str]]] = {}
    for g in plan.groups:
        kernel = kernels.get(g.id)
        if kernel is None:
            continue
        taken = {pos for pos, _ in param_writes.get(g.id, ())}
        used: set[str] = set()
        for pos, ob in enumerate(kernel.outputs):
            if pos in taken or ob.element is not None or _nbytes(ob) < INPLACE_MIN_BYTES:
                continue
            for b in kernel.inputs:
                if b.element is not None or b.value in used or not _same_elements(b, ob) \
                        or b.dtype != ob.dtype:
                    continue
                why = _dying_hazard(facts, b.value, g, kernel, ob, kernels, in_params)
                if why is None:
                    used.add(b.value)
                    out.setdefault(g.id, []).append((pos, b.value))
                    break
                log.debug("%%%s is not stored into %%%s: %s", ob.value, b.value, why)
    return out


# a library op that may add into the memory of its first argument, read for the last time
# there: `addmm(c, a, b)` with beta and alpha 1 and `c` of the result's shape and dtype
# (passes/gemm_accumulate.py makes chains of them), run as `addmm(c, a, b, out=c)`: no
# copy of `c` into new memory first (a [384, 1024] f32 sum: 0.17 ms a call against 0.31)
ACCUMULATING_LIBRARY_OPS = frozenset({"addmm.default"})


def plan_library_writes(plan: FusionPlan) -> frozenset[str]:
    """The library nodes (ACCUMULATING_LIBRARY_OPS) that may store their result into the
    memory of their first argument: that argument has the result's shape and dtype, is the
    result of a library group's op that never returns a view (FRESH_LIBRARY_OPS, so its
    memory is new memory of this call), no graph output aliases it, every reader of it or
    of a view of it runs at this node or before, and no other argument of the node is (a
    view of) it."""
    graph, group_of, order, outputs, users, position = _facts(plan)
    out = set()
    for g in plan.groups:
        if g.kind == KERNEL or len(g.nodes) != 1:
            continue
        node = graph[g.nodes[0]]
        if node.op not in ACCUMULATING_LIBRARY_OPS or node.kwargs or len(node.args) != 3 \
                or not all(isinstance(a, Ref) for a in node.args):
            continue
        into = graph[node.args[0].name]
        producer = group_of.get(into.name)
        if into.type != node.type or into.op not in FRESH_LIBRARY_OPS or producer is None \
                or producer.kind == KERNEL or producer.id == g.id:
            continue
        alias = _aliases(graph, into.name, users)
        if any(a.name in alias for a in node.args[1:]):
            continue
        if _plan_hazard(graph, into.name, g, group_of, order, outputs, users,
                        position) is None:
            out.add(node.name)
    return frozenset(out)


def addmm_into(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`c + a @ b` stored into `c` (its last reader: `plan_library_writes`)."""
    return torch.addmm(c, a, b, out=c)


def _dying_hazard(facts, value: str, g, kernel, out_buf, kernels, in_params) -> str | None:
    graph, group_of, order, outputs, users, position = facts
    root = view_root(graph, value)
    node = graph[root]
    if not isinstance(node.type, TensorType):
        return "a tuple's element"
    producer = group_of.get(root)
    if producer is None or producer.id == g.id:
        return "an input of the graph or of the kernel's own group"
    if producer.kind == KERNEL:
        made = kernels.get(producer.id)
        if made is None or not any(b.value == root and b.element is None
                                   for b in made.outputs):
            return "no kernel output"
        if root in in_params:
            return "it lives in a parameter's memory"
    elif node.op not in FRESH_LIBRARY_OPS:
        return f"{node.op} may return a view of its argument"
    alias = _aliases(graph, root, users)
    if sum(1 for b in kernel.inputs if b.value in alias) != 1:
        return "the kernel reads its memory through another buffer too"
    why = _plan_hazard(graph, root, g, group_of, order, outputs, users, position)
    return why or kernel_hazard(kernel, value, out_buf, reshaped=True)


def may_alias(kernel: Kernel, writes: list[tuple[int, str]]) -> Kernel:
    """`kernel` told which of its buffers may share memory: (output position, parameter
    name) pairs, the output stored into the parameter's memory."""
    import dataclasses
    names = set()
    for pos, param in writes:
        names.add(kernel.outputs[pos].name)
        names.update(b.name for b in kernel.inputs if b.value == param)
    return dataclasses.replace(kernel, may_alias=frozenset(names))


def _plan_hazard(graph, param: str, g, group_of, order, outputs, users,
                 position) -> str | None:
    alias = _aliases(graph, param, users)
    if alias & outputs:
        return "the input (or a view of it) is a graph output"
    readers = {u for a in alias for u in users.get(a, ()) if u not in alias}
    for name in sorted(readers, key=position.__getitem__):
        other = group_of.get(name)
        if other is None or (other.id != g.id and order[other.id] > order[g.id]):
            return f"%{name} reads the old value after the kernel"
    return None


def _shared_output(graph, new: str, oi: int, users) -> str | None:
    """Why `new` may not live in the input's memory: it (or a view of it) is also another
    graph output (a tensor saved for backward, a result the caller keeps). That output would
    alias the input: the epilogue's `copy_` bumps the version of a tensor autograd saved,
    and a later update of the input would change a result the caller holds."""
    alias = _aliases(graph, new, users)
    for k, o in enumerate(graph.outputs):
        if k != oi and isinstance(o, Ref) and o.name in alias:
            return f"%{o.name} is also graph output {k}: it would alias the input"
    return None


def _contiguous(index: E.Expr, buf, sizes: dict[int, E.Expr]) -> E.Expr:
    """`index` with `buf`'s stride syms replaced by its row-major strides."""
    dims = [sizes.get(n, E.Const(n)) for n in buf.shape]
    row_major = {}
    for d, s in enumerate(buf.strides):
        if isinstance(s, E.Sym):
            row_major[s.name] = E.product(dims[d + 1:])

    return E.rewrite(index, lambda e: row_major.get(e.name) if isinstance(e, E.Sym)
                     else None)


def _same_elements(a, b) -> bool:
    """Buffers `a` and `b` hold as many elements, row-major: one shape, or static shapes
    of one size (a GEMM's [512, 2048] result read as [8, 64, 2048])."""
    if a.shape == b.shape:
        return True
    return all(type(d) is int for d in a.shape + b.shape) and \
        math.prod(a.shape) == math.prod(b.shape)


def _linear(index: E.Expr, values: dict[str, int]) -> E.Expr:
    """`index` with each complete unravelling sum(Digit(b, S, k) * m * S[k+1] * ...)
    (row-major, times a common m) as `b * m`, until none is left (a digit of a digit: a
    view of a view): the offsets of two shapes of one size then compare as the same
    element. Coefficients and sizes compared by value (`values`: the syms' constants);
    an unravelling over a size not known is left as it is."""
    def value(e):
        return E.evaluate(e, lambda sym: values.get(sym.name))
    while True:
        terms = index.terms if isinstance(index, E.Add) else (index,)
        groups: dict[tuple, dict[int, tuple[int, int]]] = {}
        for i, t in enumerate(terms):
            factors = t.factors if isinstance(t, E.Mul) else (t,)
            digits = [f for f in factors if isinstance(f, E.Digit)]
            if len(digits) == 1:
                d = digits[0]
                c = value(E.mul(*(f for f in factors if f is not d)))
                if c is not None:
                    groups.setdefault((d.base, d.sizes), {})[d.k] = (i, c)
        for (base, sizes), by_k in groups.items():
            n = [value(z) for z in sizes]
            if None in n:
                continue
            needed = [k for k, v in enumerate(n) if v != 1]
            if not needed or sorted(by_k) != needed:
                continue
            m = by_k[needed[-1]][1]
            if all(by_k[k][1] == math.prod(n[k + 1:]) * m for k in needed):
                done = {i for i, _ in by_k.values()}
                index = E.add(E.mul(base, E.Const(m)),
                              *(t for i, t in enumerate(terms) if i not in done))
                break
        else:
            return index


def kernel_hazard(kernel: Kernel, param: str, out_buf, reshaped: bool = False
                  ) -> str | None:
    """Why storing `out_buf` into the memory of input `param` could change what the kernel
    reads, or None when every read of `param` is of the element being written, earlier.
    `reshaped`: the input may have another shape of the output's size (a contiguous view
    of it), whose reads are then compared as row-major offsets."""
    ins = {b.name: b for b in kernel.inputs if b.value == param}
    if any(b.element is not None or b.dtype != out_buf.dtype or not (
            b.shape == out_buf.shape or (reshaped and _same_elements(b, out_buf)))
           for b in ins.values()):
        return "the input is read as another shape or dtype"
    same = all(b.shape == out_buf.shape for b in ins.values())
    how = dict(kernel.bindings)
    consts = {s.name: how[s.name][1] for s in kernel.syms if how[s.name][0] == "const"}
    sizes = {how[s.name][1]: s for s in kernel.syms if how[s.name][0] == "const"}
    stores = []
    for c, comp in enumerate(kernel.components):
        for b, body in enumerate(bodies(comp)):
            for k, s in enumerate(body):
                if isinstance(s, Store) and s.buffer == out_buf.name:
                    stores.append((c, b, k, s.index, s))
    if len(stores) != 1:
        return f"the new value is stored {len(stores)} times"
    sc, sb, sk, sindex, store = stores[0]
    why = _not_one_to_one(kernel.components[sc], sb, store, out_buf)
    if why is not None:
        return why
    for c, comp in enumerate(kernel.components):
        for b, body in enumerate(bodies(comp)):   # a batch component's stages included
            for k, s in enumerate(body):
                if not (isinstance(s, Load) and s.buffer in ins):
                    continue
                if c != sc:
                    return "another part of the kernel reads the input"
                if (b, k) > (sb, sk):   # a later loop over the row, or later in this one
                    return "the input is read after the new value is written"
                read = _contiguous(s.index, ins[s.buffer], sizes)
                if read != sindex and (same or _linear(read, consts) != _linear(sindex, consts)):
                    return (f"the input is read at {E.to_source(s.index)}, another element "
                            f"than the one written ({E.to_source(sindex)})")
    return None


# the masks a lowering gives a body's statements when nothing narrows them: every
# point of the body's domain (`and` of two of these for a loop over r or a GEMM tile)
_DOMAIN_MASKS = frozenset({"xmask", "rmask", "ymask"})


def _domains(c) -> list[int | None]:
    """How many points run each of `bodies(c)` (hinted sizes); None for a body whose points
    do not map one to one onto its stores' elements as counted here (a GEMM tile, a
    scatter)."""
    x, r = hinted_value(c.xnumel), hinted_value(c.rnumel)
    if c.kind == "flat":
        return [x]
    if c.kind == "reduce":
        return [x * r] * len(c.loops) + [x]
    if c.kind == "batch":
        return [None if n is None else x * n for st in c.stages for n in _domains(st)]
    return [None] * len(bodies(c))


def _not_one_to_one(comp, body: int, store, out_buf) -> str | None:
    """Why the store of the new value might not write each element at exactly one point
    of its body's domain, the point that reads the old element: it runs under a narrower
    mask (an output smaller than the loop, such as a [1] input broadcast over the loop,
    stored by its first point only while every point reads it), or the domain holds
    another number of points than the buffer elements. A store that every point runs and
    that writes the whole buffer with as many points as elements is a bijection."""
    mask = store.mask
    if mask is not None and mask not in _DOMAIN_MASKS:
        stmts = [s for s in bodies(comp)[body] if getattr(s, "var", None) == mask]
        if not (stmts and getattr(stmts[0], "op", None) == "and"
                and set(stmts[0].args) <= _DOMAIN_MASKS):
            return "the new value is stored at some points of the loop only (a broadcast)"
    points = _domains(comp)[body]
    if points is None:
        return "a GEMM tile or a scatter stores it"
    numel = math.prod(hint(d) for d in out_buf.shape)
    if points != numel:
        return f"its loop has {points} points for {numel} elements"
    return None


def storages(tensors: list[torch.Tensor]) -> dict[int, set[int]]:
    """Storage address -> ids of the tensors (of a kernel's inputs) on it."""
    out: dict[int, set[int]] = {}
    for t in tensors:
        out.setdefault(t.untyped_storage().data_ptr(), set()).add(id(t))
    return out


def writable(t: torch.Tensor, shape, dtype: torch.dtype,
             owners: dict[int, set[int]] | None) -> bool:
    """Whether a kernel may store a contiguous `shape`/`dtype` output into `t`: no other
    input of the kernel (`owners`, from `storages`; None: the caller checked) shares its
    memory."""
    if t.dtype != dtype or not t.is_contiguous() or t.numel() == 0 or (
            t.shape != shape and t.numel() != math.prod(shape)):
        return False
    return owners is None or owners.get(t.untyped_storage().data_ptr(), set()) <= {id(t)}
