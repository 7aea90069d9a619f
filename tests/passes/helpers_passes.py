"""A tiny reference evaluator for the pass tests (the real one will live in ir/interp.py).

Imported as `from helpers_passes import run_graph`: pytest puts this folder on
sys.path because the tests folders have no __init__.py.
"""
from __future__ import annotations

import torch

from fusionstitch.ir.graph import PARAMETER, Graph, Ref
from fusionstitch.ir.ops import call_reference


def random_inputs(g: Graph, seed: int = 0) -> list[torch.Tensor]:
    """One random tensor per parameter, reproducible from the seed."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for p in g.params:
        t = p.type
        if t.dtype in ("f64", "f32", "f16", "bf16"):
            out.append(torch.randn(t.shape, generator=gen).to(t.torch_dtype))
        elif t.dtype == "b8":
            out.append(torch.randint(0, 2, t.shape, generator=gen).bool())
        else:
            out.append(torch.randint(-8, 8, t.shape, generator=gen).to(t.torch_dtype))
    return out


def run_graph(g: Graph, inputs) -> list:
    """Evaluate g with eager aten ops; outputs in order (None and ints pass through)."""
    env = {p.name: x for p, x in zip(g.params, inputs, strict=True)}
    for n in g.nodes:
        if n.op != PARAMETER:
            env[n.name] = call_reference(n.op, n.args, n.kwargs, env)
    return [env[o.name] if isinstance(o, Ref) else o for o in g.outputs]


def _equal_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    if torch.equal(a, b):
        return True
    if not a.is_floating_point():
        return False
    nan = a.isnan()  # NaN != NaN, so compare NaN positions and the rest apart
    return torch.equal(nan, b.isnan()) and torch.equal(a[~nan], b[~nan])


def assert_same_results(before: Graph, after: Graph, seeds=(0, 1, 2)) -> None:
    """before and after give bit-identical outputs on random inputs."""
    for seed in seeds:
        xs = random_inputs(before, seed)
        for a, b in zip(run_graph(before, xs), run_graph(after, xs), strict=True):
            if isinstance(a, torch.Tensor):
                assert isinstance(b, torch.Tensor) and a.dtype == b.dtype
                assert a.shape == b.shape and _equal_nan(a, b), f"seed {seed}: results differ"
            else:
                assert a == b


def assert_left_alone(run, build) -> None:
    """`run` (a pass) returns the very graph `build(builder)`'s outputs make: no rewrite."""
    from fusionstitch.frontend.build import GraphBuilder
    b = GraphBuilder()
    g = b.build(*build(b))
    assert run(g) is g
