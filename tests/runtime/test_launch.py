"""KernelStep's fast paths (runtime/launch.py) against their plain definitions, on the
kernels of real zoo graphs: syms picked from a flat tuple of strides, and the inline
in-place checks of `_outputs_into`."""
import pytest
import torch

import fusionstitch
from bench import workloads as W
from fusionstitch.runtime import launch
from fusionstitch.runtime.inplace import storages, writable

pytestmark = pytest.mark.filterwarnings("ignore")


def launched(name: str) -> list:
    """(KernelStep, its inputs, a copy of the values list) of every launch of one step."""
    seen = []
    orig = launch.KernelStep.__call__

    def spy(self, values, pool=None):
        ins = [values[s] if e is None else values[s][e] for s, e in self.inputs]
        seen.append((self, ins, list(values)))
        return orig(self, values, pool)

    inst = W.make(name, "small")
    fn = torch.compile(inst.fn, backend=fusionstitch.backend(target="cpu"))
    launch.KernelStep.__call__ = spy
    try:
        W.step(inst, fn)
    finally:
        launch.KernelStep.__call__ = orig
        torch._dynamo.reset()
    assert seen
    return seen


@pytest.mark.parametrize("name", ["adam", "mlp", "layernorm_softmax_gelu", "capsule_routing"])
def test_syms_and_in_place_choices_match_their_definitions(name):
    into_seen = 0
    for ks, ins, values in launched(name):
        strides = [t.stride() for t in ins]
        want = [v if i is None else strides[i][v] for i, v in ks.binding]
        assert list(ks._syms(ins)) == want, ks.kernel.name
        if not ks.into:
            continue
        into_seen += 1
        owners = storages(ins)
        outs = ks._outputs_into(values, ins, None)
        for k, ((_, _, shape, _), dt) in enumerate(zip(ks.outputs, ks.torch_dtype)):
            slot = ks.into.get(k)
            t = values[slot] if slot is not None else None
            ok = t is not None and writable(t, torch.Size(shape), dt, owners)
            assert (outs[k] is t) == ok, (ks.kernel.name, k)
    if name == "adam":
        assert into_seen == 1   # the whole step is one kernel writing into its inputs


def test_syms_fall_back_when_an_input_has_another_rank():
    ks, ins, _ = next((ks, ins, v) for ks, ins, v in launched("softmax_chain")
                      if ks.strided and ks._pick is not None)
    i = ks.strided[0]
    odd = list(ins)
    odd[i] = ins[i].unsqueeze(0)   # one more stride than its type says
    strides = [t.stride() for t in odd]
    assert list(ks._syms(odd)) == [v if j is None else strides[j][v] for j, v in ks.binding]


def test_static_steps_work_out_syms_and_in_place_choices_once(monkeypatch):
    """A Program of a graph with static sizes (Dynamo guards them) works out each kernel's
    syms and in-place choices on its first call; later calls reuse them while the inputs
    lie on storages of their own, new ones included (a step's activations are new memory
    at each call); the numbers match eager."""
    calls = {"syms": 0, "choose": 0}
    for name, method in (("syms", "_syms"), ("choose", "_choose_into")):
        real = getattr(launch.KernelStep, method)

        def counted(self, *a, real=real, name=name):
            calls[name] += 1
            return real(self, *a)
        monkeypatch.setattr(launch.KernelStep, method, counted)
    torch._dynamo.reset()
    first = W.make("adam", "small")
    fn = torch.compile(first.fn, backend=fusionstitch.backend(target="cpu"))
    ref = W.make("adam", "small")
    for inst in (first, first, W.make("adam", "small", seed=1)):
        if inst is not first:
            ref = W.make("adam", "small", seed=1)
        got, want = W.step(inst, fn), W.step(ref)
        for g, r in zip(got, want):
            torch.testing.assert_close(g, r)
        if inst is first and calls["syms"] == 1:
            assert calls["choose"] == 1
    # one kernel: syms once, in-place choices once (the new storages are storages of
    # their own too)
    assert calls == {"syms": 1, "choose": 1}
    torch._dynamo.reset()


def test_inputs_sharing_a_storage_are_checked_every_call():
    ks, ins, values = next((ks, ins, v) for ks, ins, v in launched("adam") if ks.into)
    ks.static, ks._static_into = True, None
    # two same-shaped inputs the kernel writes into, moved onto one storage
    by_shape = {}
    for k, slot in ks.into.items():
        by_shape.setdefault(tuple(values[slot].shape), []).append(slot)
    a, b = next(s[:2] for s in by_shape.values() if len(s) >= 2)
    base = torch.stack([values[a], values[b]])
    shared = list(values)
    shared[a], shared[b] = base[0], base[1]
    pos = {slot: i for i, (slot, e) in enumerate(ks.inputs) if e is None}
    shared_ins = list(ins)
    shared_ins[pos[a]], shared_ins[pos[b]] = base[0], base[1]
    ks._outputs_into(shared, shared_ins, None)
    assert ks._static_into is None        # decided, not remembered
    ks._outputs_into(values, ins, None)
    assert ks._static_into is not None    # storages of their own: remembered
