"""Devices: every value a generated kernel reads or writes lives on the graph's device.

The IR has no devices: a plan's kernels all run on the device of the program (the
graph's GPU, else the CPU). An FX graph from Dynamo may hold values on other devices all
the same, each recorded in its node's `val`:

- a CPU scalar (a 0-dim tensor) read by an op on the GPU, which eager allows (torch's
  CPU-scalar rule: the value is read on the host and passed to the GPU kernel);
- a transfer, `x.to("cpu")` or `cpu_tensor.to("cuda")` (`_to_copy` with a device);
- library ops that return CPU tensors (flash attention's RNG seed and offset).

`place(gm, device)` rewrites such a graph so that no kernel-kind op (one a plan may fuse
into a generated kernel) touches another device: a transfer becomes
`prims.device_put` (a library op, run by torch) with any dtype change done as a cast on
the GPU side; a CPU scalar read by a kernel-kind op on `device` is moved there first by a
`prims.device_put`, and so is 0-dim arithmetic on CPU scalars (`s > 0`, an optimizer's
`step + 1`), done on the GPU then (a result the graph returns is moved back to the
CPU); a host factory whose tensor only moves to the GPU (`arange(n).to("cuda")`) is
made there. Library ops, views and getitems keep their inputs as they are (torch runs them).
What cannot be placed so, a kernel-kind op that computes on another device (arithmetic
on CPU tensors inside a GPU graph) or reads a larger tensor from one, raises
`Unsupported` with the op and the devices: the graph then runs through torch, counted
and logged (never a kernel reading memory of another device).
"""
from __future__ import annotations

import torch
import torch.fx

from ..ir.ops import Category, lookup, op_name
from .fx_to_ir import Unsupported


def main_device(values) -> torch.device | None:
    """The device a graph with these inputs computes on: the first tensor's device that
    is not the CPU, else the CPU (None without tensors). A CPU scalar passed before the
    GPU tensors does not make the graph a CPU graph."""
    first = None
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.device.type != "cpu":
                return v.device
            first = first or v.device
    return first


def graph_device(gm: torch.fx.GraphModule, args) -> torch.device | None:
    """The device graph `gm` computes on when called with `args`: `main_device(args)`
    unless that is the CPU or nothing, and then the first device other than the CPU that
    a value of the graph lives on (a graph without GPU inputs that makes its tensors on
    the GPU: an attention mask from `arange(..., device="cuda")`), else the CPU when a
    tensor of the graph lives there, else None (no tensors at all)."""
    device = main_device(args)
    if device is not None and device.type != "cpu":
        return device
    for n in gm.graph.nodes:
        for d in _devices(n):
            if d is not None:
                if d.type != "cpu":
                    return d
                device = device or d
    return device


# node.meta key of the devices of a node whose `val` holds meta tensors (a graph from
# frontend/graph_cache.py): a device, or a tuple of them shaped as the value
DEVICE_KEY = "fusionstitch_device"


def _val(node) -> object:
    """node's value: AOTAutograd's `val`, else Dynamo's `example_value` (the graph a
    backend is handed, before AOTAutograd traces it)."""
    if not isinstance(node, torch.fx.Node):
        return None
    v = node.meta.get("val")
    return node.meta.get("example_value") if v is None else v


def _devices(node) -> list:
    """The devices of node's tensors (None for one whose device is unknown)."""
    v = _val(node)
    kept = node.meta.get(DEVICE_KEY) if isinstance(node, torch.fx.Node) else None
    vals = v if isinstance(v, (tuple, list)) else (v,)
    kept = kept if isinstance(kept, (tuple, list)) else (kept,) * len(vals)
    out = []
    for t, d in zip(vals, kept):
        if isinstance(t, torch.Tensor):
            dev = t.device if t.device.type != "meta" else d
            out.append(dev if isinstance(dev, torch.device) else None)
    return out


def _device(node) -> torch.device | None:
    """Where node's tensor value lives; None when unknown (no value, several, or a meta
    tensor with no device beside it)."""
    v = _val(node)
    if not isinstance(v, torch.Tensor):
        return None
    return _devices(node)[0]


def _kernel_kind(target) -> bool:
    """Whether a plan may put this op into a generated kernel."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    try:
        d = lookup(op_name(target))
    except KeyError:
        return False
    return not (d.is_library or d.view or d.fallback
                or d.category in (Category.TUPLE, Category.RESHAPE))


def _same(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def needs_placing(gm: torch.fx.GraphModule, device: torch.device) -> bool:
    """Whether some node of `gm` holds a tensor on another device than `device`."""
    return any(d is not None and not _same(d, device)
               for n in gm.graph.nodes for d in _devices(n))


def place(gm: torch.fx.GraphModule, device: torch.device | None) -> torch.fx.GraphModule:
    """`gm`, or a copy of it rewritten as the module docstring says, for a graph that
    computes on `device`."""
    if device is None or not needs_placing(gm, device):
        return gm
    graph = torch.fx.Graph()
    env: dict = {}
    graph.output(graph.graph_copy(gm.graph, env))
    moved: dict = {}   # CPU node -> its device_put node

    def put(src: torch.fx.Node, where: torch.fx.Node) -> torch.fx.Node:
        if src in moved:
            return moved[src]
        with graph.inserting_before(where):   # (its first reader: later ones follow it)
            n = graph.call_function(torch.ops.prims.device_put.default, (src, device))
        _place_val(n, _val(src), device)
        moved[src] = n
        return n

    for node in list(graph.nodes):
        if node.op != "call_function" or not _kernel_kind(node.target):
            continue
        op = op_name(node.target)
        out = _device(node)
        if op == "_to_copy.default" and "device" in node.kwargs:
            _transfer(graph, node, device)
            continue
        if out is not None and not _same(out, device) and _made_for(node, device):
            # a factory whose tensor only moves to the graph's device (`arange(n).to(
            # "cuda")`, `torch.tensor(...)` on the host) is made there instead
            _place_val(node, _val(node), device)
            node.kwargs = {**node.kwargs, "device": device}
            continue
        if out is not None and not _same(out, device):
            if not _scalar_step(node):
                raise Unsupported(f"op {op} ({node.name}) computes on {out} in a graph on "
                                  f"{device}: the graph runs through torch")
            # scalar arithmetic on the host (`s > 0` of a CPU scalar, an optimizer's
            # `step + 1`): done on the GPU, from its inputs moved there (same values);
            # a graph output is moved back to where eager has it
            home = _val(node)
            _place_val(node, home, device)
            if "device" in node.kwargs:    # a factory (scalar_tensor): made there
                node.kwargs = {**node.kwargs, "device": device}
            outputs = [u for u in node.users if u.op == "output"]
            if outputs:
                with graph.inserting_after(node):
                    back = graph.call_function(torch.ops.prims.device_put.default,
                                               (node, out))
                _place_val(back, home, out)
                for u in outputs:
                    u.replace_input_with(node, back)
        for x in node.all_input_nodes:
            d = _device(x)
            if d is None or _same(d, device) or x.op == "get_attr":
                continue   # (constants: the program makes them on its device)
            v = _val(x)
            copied = op == "copy.default" and len(node.args) > 1 and node.args[1] is x
            if v.dim() != 0 and not copied:   # (copy_ takes a source on any device)
                raise Unsupported(f"op {op} ({node.name}) on {device} reads {x.name}, a "
                                  f"{tuple(v.shape)} tensor on {d}: the graph runs through "
                                  "torch")
            node.replace_input_with(x, put(x, node))
    graph.lint()
    return torch.fx.GraphModule(gm, graph)


def _made_for(node: torch.fx.Node, device: torch.device) -> bool:
    """Whether `node` is a factory (no tensor inputs, a device argument, no RNG) whose
    every reader moves it to `device` (`_to_copy` with that device)."""
    d = lookup(op_name(node.target))
    if d.category != Category.SOURCE or d.random or node.all_input_nodes \
            or "device" not in node.kwargs or not node.users:
        return False
    for u in node.users:
        dev = u.kwargs.get("device") if u.op == "call_function" else None
        if not (u.target is torch.ops.aten._to_copy.default and dev is not None
                and _same(torch.device(dev), device)):
            return False
    return True


def _scalar_step(node: torch.fx.Node) -> bool:
    """Whether `node` computes a 0-dim value from 0-dim tensors (and numbers): computed
    on another device, it has the same value."""
    v = _val(node)
    if not isinstance(v, torch.Tensor) or v.dim() != 0:
        return False
    return all(isinstance(_val(x), torch.Tensor) and _val(x).dim() == 0
               for x in node.all_input_nodes)


def _place_val(node: torch.fx.Node, v, device: torch.device) -> None:
    """Give `node` the value `v` on `device` (its `val`, and the device beside a meta
    one)."""
    node.meta["val"] = _moved(v, device)
    node.meta[DEVICE_KEY] = device


def _moved(v, device: torch.device):
    """The `val` of `v` moved to `device`: a fake tensor (Dynamo's) moves in its own mode,
    without memory or a device; anything else is kept (only its shape and dtype are read
    after this)."""
    mode = getattr(v, "fake_mode", None)
    if mode is None:
        return v
    with mode:
        return v.to(device)


def _transfer(graph: torch.fx.Graph, node: torch.fx.Node, device: torch.device) -> None:
    """`_to_copy(x, dtype=?, device=d, ...)` between devices -> a `prims.device_put`, with
    the cast (if any) on the `device` side of the move."""
    src = node.args[0]
    src_dev, dst_dev = _device(src), _device(node)
    if src_dev is None or dst_dev is None or _same(src_dev, dst_dev):
        kwargs = {k: v for k, v in node.kwargs.items() if k != "device"}
        node.kwargs = kwargs    # a plain cast (or copy) on one device
        return
    kwargs = {k: v for k, v in node.kwargs.items() if k not in ("device", "non_blocking")}
    val = _val(node)
    if _same(dst_dev, device):      # onto the graph's device: move, then cast there
        with graph.inserting_before(node):
            moved = graph.call_function(torch.ops.prims.device_put.default, (src, dst_dev))
        _place_val(moved, _val(src), dst_dev)
        node.replace_input_with(src, moved)
        node.kwargs = kwargs
        return
    # off the graph's device: cast here, then move
    with graph.inserting_before(node):
        cast = graph.call_function(torch.ops.aten._to_copy.default, (src,), kwargs)
    _place_val(cast, val, src_dev)
    node.target = torch.ops.prims.device_put.default
    node.args = (cast, dst_dev)
    node.kwargs = {}
