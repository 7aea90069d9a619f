"""drop_kept_dims (passes/keepdim_views.py): a keepdim reduction viewed without exactly
its reduced dims becomes the reduction without them (same values, bit for bit); other
views, shared reductions and graph outputs are left alone."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes.keepdim_views import drop_kept_dims

from helpers_passes import random_inputs, run_graph


def _graph(op="sum.dim_IntList", dims=(0, 1), view=(5,), shape=(2, 3, 5), extra_reader=False,
           output=False):
    b = GraphBuilder()
    x = b.param(shape)
    r = b.op(op, x, list(dims), True)
    v = b.op("view.default", r, list(view))
    outs = [b.op("mul.Scalar", v, 2.0)]
    if extra_reader:
        outs.append(b.op("neg.default", r))
    if output:
        outs.append(r)
    return b.build(*outs)


@pytest.mark.parametrize("op,dims,view,shape", [
    ("sum.dim_IntList", (0, 1), (5,), (2, 3, 5)),
    ("sum.dim_IntList", (-3, -2), (5,), (2, 3, 5)),
    ("mean.dim", (0,), (3, 5), (2, 3, 5)),
    ("amax.default", (2,), (2, 3), (2, 3, 5)),
    ("amin.default", (1,), (2, 5), (2, 3, 5)),
    ("sum.dim_IntList", (0,), (1, 4), (3, 1, 4)),     # a size-1 dim not reduced stays
])
def test_the_view_of_a_keepdim_reduction_is_the_reduction_without_its_dims(op, dims, view,
                                                                          shape):
    g = _graph(op, dims, view, shape)
    r = drop_kept_dims(g)
    assert r is not g
    assert not any(n.op == "view.default" for n in r.nodes)
    folded = [n for n in r.nodes if n.op == op]
    assert len(folded) == 1 and folded[0].args[2] is False
    assert tuple(folded[0].type.shape) == view
    inputs = random_inputs(g, seed=1)
    for a, e in zip(run_graph(r, inputs), run_graph(g, inputs)):
        assert a.shape == e.shape and torch.equal(a, e)


@pytest.mark.parametrize("case", [
    dict(view=(1, 5)),                                 # keeps a reduced dim
    dict(shape=(3, 1, 4), dims=(0,), view=(4,)),       # drops a dim not reduced
    dict(view=(5, 1)),                                 # another order of the same size
    dict(extra_reader=True),
    dict(output=True),
])
def test_other_views_shared_reductions_and_outputs_are_left_alone(case):
    g = _graph(**case)
    assert drop_kept_dims(g) is g


def test_a_compiled_bias_gradient_runs_no_view_and_is_eagers():
    """A linear layer's training step: its bias gradient `view(sum(g, [0], True), [n])`
    comes out of the kernel as [n] (no reshape through torch at the call), equal to
    eager's within a sum's rounding in another order."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 5)
    x = torch.randn(3, 4, 6)
    torch._dynamo.reset()
    comp = torch.compile(lambda x: torch.tanh(lin(x)).sum(),
                         backend=fusionstitch.backend(target="cpu"))
    comp(x).backward()
    ours = lin.bias.grad.clone()
    lin.zero_grad()
    with torch.profiler.profile(record_shapes=True) as prof:
        comp(x).backward()
    lin.zero_grad()
    torch.tanh(lin(x)).sum().backward()
    torch.testing.assert_close(ours, lin.bias.grad, rtol=1e-5, atol=1e-6)
    views = [e for e in prof.events() if e.name in ("aten::reshape", "aten::view")
             and e.input_shapes and list(e.input_shapes[0]) in ([1, 5], [1, 1, 5])]
    assert not views, [(e.name, e.input_shapes) for e in views]
