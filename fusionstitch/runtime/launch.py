"""Launching a generated kernel inside a Program: buffers in, outputs allocated, syms bound."""
from __future__ import annotations

import math
from itertools import chain
from operator import itemgetter
from typing import Callable

import torch

from ..codegen.kernel import Kernel
from ..ir.graph import DTYPES, ITEMSIZE
from ..ir.symbolic import is_symbolic
from . import counters, recycle
from .inplace import storages, writable

_stride = torch.Tensor.stride
_untyped_storage = torch.Tensor.untyped_storage
_storage_ptr = torch.UntypedStorage.data_ptr


# a binding's marker: the sym is a size of a symbolic program, read from its size slot
_SIZE = "size"


def _shape_template(shape, sizes) -> tuple:
    """A shape with each symbolic size replaced by its slot: (slot or None, int) per dim."""
    return tuple((sizes(d), 0) if is_symbolic(d) else (None, int(d)) for d in shape)


def _shape(template: tuple, values: list) -> tuple:
    return tuple(d if s is None else values[s] for s, d in template)


class KernelStep:
    """One kernel group of a plan: reads its inputs' slots, fills its outputs' slots."""

    def __init__(self, kernel: Kernel, run: Callable, slot_of: dict[str, int],
                 tuple_arity: dict[str, int], device: torch.device, sizes=None):
        """`sizes`: a symbolic program's SizeSlots (runtime/program.py): the kernel's size
        syms and its outputs' shapes are read from those slots at each launch."""
        self.kernel = kernel
        self.run = run
        self.device = device
        self.inputs = [(slot_of[b.value], b.element) for b in kernel.inputs]
        self.outputs = [(slot_of[b.value], b.element, b.shape, b.dtype) for b in kernel.outputs]
        self.tuple_arity = {slot_of[v]: n for v, n in tuple_arity.items()}
        pos = {b.name: i for i, b in enumerate(kernel.inputs)}
        bindings = dict(kernel.bindings)
        self.binding = []
        # a symbolic program's kernel: sizes come from the program's size slots
        self.symbolic = sizes is not None and (
            any(how[0] == "expr" for how in bindings.values()) or
            any(is_symbolic(d) for b in kernel.buffers for d in b.shape))
        for sym in kernel.syms:
            how = bindings[sym.name]
            if how[0] == "const":
                self.binding.append((None, how[1]))
            elif how[0] == "expr":
                self.binding.append((_SIZE, sizes.of_expr(how[1])))
            else:
                self.binding.append((pos[how[1]], how[2]))
        if self.symbolic:
            self._shapes = [_shape_template(b.shape, sizes) for b in kernel.outputs]
            self._scratch_shapes = [_shape_template(b.shape, sizes) for b in kernel.scratch]
        # inputs whose strides are syms: stride() once each (stride(d) parses its argument:
        # twice the cost, paid per bound dim; an optimizer step binds 300)
        self.strided = sorted({i for i, _ in self.binding if i is not None and i is not _SIZE})
        # the syms picked in C from (constants..., strides of self.strided...): a third of
        # the cost of a comprehension; an input's stride tuple has its type's rank
        consts = tuple(v for i, v in self.binding if i is None)
        start, at = {}, len(consts)
        for i in self.strided:
            start[i], at = at, at + len(kernel.inputs[i].shape)
        where, c = [], 0
        for i, v in self.binding:
            if i is None:
                where.append(c)
                c += 1
            elif i is not _SIZE:
                where.append(start[i] + v)
        self._consts, self._flat_len = consts, at
        self._pick = itemgetter(*where) if len(where) > 1 and not self.symbolic else None
        self.torch_dtype = [DTYPES[o[3]] for o in self.outputs]
        # output position -> slot of the input it may be stored into (runtime/inplace.py)
        self.into: dict[int, int] = {}
        self.into_views: dict[int, torch.Size] = {}
        self._into_items: list[tuple] = []      # what write_into derives from `into`
        # block composition's per-program intermediates (batch components), per launch
        self.scratch = [(b.shape, DTYPES[b.dtype]) for b in kernel.scratch]
        # output position -> its bytes, for outputs big enough to take recycled memory
        nbytes = [math.prod(b.shape) * ITEMSIZE[b.dtype] for b in kernel.outputs]
        # (a symbolic program's outputs have no one size: they are not recycled)
        self.pooled = {} if self.symbolic else \
            {k: n for k, n in enumerate(nbytes) if n >= recycle.MIN_BYTES}
        # the Program's inputs come with the sizes and strides of its first call (a graph
        # of static sizes: Dynamo guards them), so every value's layout is the same each
        # call: the syms, and the in-place choices for inputs on the same storages, are
        # worked out once (an optimizer step: 0.1 ms of Python a call)
        self.static = False
        self._static_syms: tuple | list | None = None
        # the in-place choice: ((output, input slot), ...), and the slots among them the
        # kernel does not read (see `fixed_into`)
        self._static_into: tuple | None = None

    def __call__(self, values: list, pool: dict | None = None) -> None:
        ins = []
        for slot, element in self.inputs:
            v = values[slot]
            ins.append(v if element is None else v[element])
        if self.symbolic:
            self._launch_symbolic(ins, values)
            return
        if self.static:
            syms = self._static_syms
            if syms is None:
                syms = self._static_syms = self._syms(ins)
        else:
            syms = self._syms(ins)
        if self.into:
            outs = self._outputs_into(values, ins, pool)
        elif pool and self.pooled:
            outs = [self._fresh(k, shape, dt, pool)
                    for k, ((_, _, shape, _), dt) in enumerate(zip(self.outputs,
                                                                   self.torch_dtype))]
        else:
            outs = [torch.empty(shape, dtype=dt, device=self.device)
                    for (_, _, shape, _), dt in zip(self.outputs, self.torch_dtype)]
        scratch = [torch.empty(shape, dtype=dt, device=self.device) for shape, dt in self.scratch]
        self.run(ins + outs + scratch, syms)
        self._place(values, outs)

    def fixed_syms(self) -> tuple | list | None:
        """The syms of every launch of a static step, once its first launch worked them
        out (None before, or when they are worked out per launch)."""
        return self._static_syms if self.static else None

    def fixed_into(self) -> tuple | None:
        """(((output, input slot), ...), the input slots among them the kernel does not
        read): the in-place choice a static step remembered (None: none). It holds for
        any call whose inputs lie on storages of their own and whose unread slots lie on
        none of theirs (`_choose_into` decides from nothing else: the sizes, strides and
        dtypes are Dynamo's guards), wherever those storages are: the activations a
        step reads are new memory at each call."""
        return self._static_into if self.static else None

    def _launch_symbolic(self, ins: list, values: list) -> None:
        """A launch of a symbolic program's kernel: syms and shapes from the size slots."""
        strides = {i: ins[i].stride() for i in self.strided}
        syms = [v if i is None else values[v] if i is _SIZE else strides[i][v]
                for i, v in self.binding]
        device = self.device
        outs = [torch.empty(_shape(shape, values), dtype=dt, device=device)
                for shape, dt in zip(self._shapes, self.torch_dtype)]
        scratch = [torch.empty(_shape(shape, values), dtype=dt, device=device)
                   for shape, (_, dt) in zip(self._scratch_shapes, self.scratch)]
        self.run(ins + outs + scratch, syms)
        self._place(values, outs)

    def _syms(self, ins: list) -> tuple | list:
        """The values of the kernel's syms for these inputs."""
        if self._pick is not None:
            flat = self._consts + tuple(chain.from_iterable(
                map(_stride, map(ins.__getitem__, self.strided))))
            if len(flat) == self._flat_len:
                return self._pick(flat)
        strides = {i: ins[i].stride() for i in self.strided}
        return [v if i is None else strides[i][v] for i, v in self.binding]

    def write_into(self, into: dict[int, int]) -> None:
        """Outputs that may be stored into inputs' memory: output position -> input slot."""
        self.into = dict(into)
        read = {slot for slot, element in self.inputs if element is None}
        # (output, input slot, its torch.Size, dtype, whether the kernel reads the input);
        # an empty output never goes into an input
        self._into_items = [
            (k, slot, torch.Size(self.outputs[k][2]), self.torch_dtype[k], slot in read)
            for k, slot in sorted(self.into.items()) if math.prod(self.outputs[k][2]) > 0]
        # outputs stored into an input of another shape of their size (a GEMM's [512,
        # 2048] result read as [8, 64, 2048]): output position -> its shape, the view of
        # the input's memory it becomes
        shapes = {slot: b.shape for (slot, _), b in zip(self.inputs, self.kernel.inputs)}
        self.into_views = {k: torch.Size(self.outputs[k][2]) for k, slot in self.into.items()
                           if tuple(shapes.get(slot, ())) != tuple(self.outputs[k][2])}

    def _fresh(self, k: int, shape, dt: torch.dtype, pool: dict | None) -> torch.Tensor:
        """Output k's memory: recycled from `pool` when it is big enough to take part."""
        nbytes = self.pooled.get(k)
        if pool and nbytes is not None:
            return recycle.take(pool, shape, dt, nbytes)
        return torch.empty(shape, dtype=dt, device=self.device)

    def _outputs_into(self, values: list, ins: list, pool: dict | None = None
                      ) -> list[torch.Tensor]:
        # When no two inputs share a storage (an optimizer step's 160 parameters and
        # states: the common case), an output may go into its input unless the input is
        # not contiguous, or (when the kernel does not read it) lives on an input's storage:
        # no per-output storage sets. Otherwise `writable` checks each against `storages`.
        ptrs = list(map(_storage_ptr, map(_untyped_storage, ins)))
        outs: list = [None] * len(self.outputs)
        memo = self._static_into
        distinct = set(ptrs)
        if memo is not None and len(distinct) == len(ptrs) and not any(
                _storage_ptr(values[slot].untyped_storage()) in distinct for slot in memo[1]):
            views = self.into_views
            for k, slot in memo[0]:     # what `_choose_into` would choose again
                outs[k] = values[slot] if k not in views else values[slot].view(views[k])
            written = len(memo[0])
        else:
            written = self._choose_into(values, ins, ptrs, outs)
        if written < len(outs):
            for k, ((_, _, shape, _), dt) in enumerate(zip(self.outputs, self.torch_dtype)):
                if outs[k] is None:
                    outs[k] = self._fresh(k, shape, dt, pool)
        counters.bump("inplace_writes", written)
        return outs

    def _choose_into(self, values: list, ins: list, ptrs: list, outs: list) -> int:
        """Put into `outs` the inputs each output may be stored into; how many. A static
        step whose inputs are all on storages of their own remembers the choice
        (`fixed_into`: it holds while they are; inputs sharing a storage are checked every
        call: where in it each lies may differ)."""
        distinct = set(ptrs)
        owners = storages(ins) if len(distinct) != len(ptrs) else None
        written = 0
        chosen = []
        for k, slot, size, dt, read in self._into_items:
            t = values[slot]
            if t is None:
                continue
            if owners is not None:
                ok = writable(t, size, dt, owners)
            else:   # writable(t, size, dt, None), inline: 120 outputs per optimizer step
                ok = (t.shape == size or t.numel() == size.numel() > 0) and t.dtype == dt \
                    and t.is_contiguous() and (
                        read or t.untyped_storage().data_ptr() not in distinct)
            if ok:
                outs[k] = t if t.shape == size else t.view(size)
                written += 1
                chosen.append((k, slot))
        if self.static and owners is None:   # shared storages: offsets matter, not kept
            reads = {slot: read for _, slot, _, _, read in self._into_items}
            self._static_into = (tuple(chosen),
                                 frozenset(slot for _, slot in chosen if not reads[slot]))
        return written

    def _place(self, values: list, outs: list) -> None:
        for (slot, element, _, _), t in zip(self.outputs, outs):
            if element is None:
                values[slot] = t
            else:
                place_element(values, slot, self.tuple_arity[slot], element, t)


def place_element(values: list, slot: int, arity: int, element: int, t) -> None:
    """values[slot][element] = t, the list made first: the tuple result of a multi-output
    op (var_mean) is a list of its elements, which one or several steps store."""
    cur = values[slot]
    if not isinstance(cur, list):
        cur = values[slot] = [None] * arity
    cur[element] = t
