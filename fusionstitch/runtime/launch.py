"""Launching a generated kernel inside a Program: buffers in, outputs allocated, syms bound."""
from __future__ import annotations

from typing import Callable

import torch

from ..codegen.kernel import Kernel


class KernelStep:
    """One kernel group of a plan: reads its inputs' slots, fills its outputs' slots."""

    def __init__(self, kernel: Kernel, run: Callable, slot_of: dict[str, int],
                 tuple_arity: dict[str, int], device: torch.device):
        self.kernel = kernel
        self.run = run
        self.device = device
        self.inputs = [(slot_of[b.value], b.element) for b in kernel.inputs]
        self.outputs = [(slot_of[b.value], b.element, b.shape, b.dtype) for b in kernel.outputs]
        self.tuple_arity = {slot_of[v]: n for v, n in tuple_arity.items()}
        pos = {b.name: i for i, b in enumerate(kernel.inputs)}
        bindings = dict(kernel.bindings)
        self.binding = []
        for sym in kernel.syms:
            how = bindings[sym.name]
            if how[0] == "const":
                self.binding.append((None, how[1]))
            else:
                self.binding.append((pos[how[1]], how[2]))
        from ..ir.graph import DTYPES
        self.torch_dtype = [DTYPES[o[3]] for o in self.outputs]
        # output position -> slot of the input it may be stored into (runtime/inplace.py)
        self.into: dict[int, int] = {}
        # block composition's per-program intermediates (batch components), per launch
        self.scratch = [(b.shape, DTYPES[b.dtype]) for b in kernel.scratch]

    def __call__(self, values: list) -> None:
        ins = []
        for slot, element in self.inputs:
            v = values[slot]
            ins.append(v if element is None else v[element])
        syms = [v if i is None else ins[i].stride(v) for i, v in self.binding]
        outs = [torch.empty(shape, dtype=dt, device=self.device)
                for (_, _, shape, _), dt in zip(self.outputs, self.torch_dtype)] \
            if not self.into else self._outputs_into(values, ins)
        scratch = [torch.empty(shape, dtype=dt, device=self.device) for shape, dt in self.scratch]
        self.run(ins + outs + scratch, syms)
        self._place(values, outs)

    def _outputs_into(self, values: list, ins: list) -> list[torch.Tensor]:
        from . import counters
        from .inplace import storages, writable
        owners = storages(ins)
        outs = []
        written = 0
        for k, ((_, _, shape, _), dt) in enumerate(zip(self.outputs, self.torch_dtype)):
            slot = self.into.get(k)
            t = values[slot] if slot is not None else None
            if t is not None and writable(t, shape, dt, owners):
                written += 1
            else:
                t = torch.empty(shape, dtype=dt, device=self.device)
            outs.append(t)
        counters.bump("inplace_writes", written)
        return outs

    def _place(self, values: list, outs: list) -> None:
        for (slot, element, _, _), t in zip(self.outputs, outs):
            if element is None:
                values[slot] = t
            else:
                cur = values[slot]
                if not isinstance(cur, list):
                    cur = values[slot] = [None] * self.tuple_arity[slot]
                cur[element] = t
