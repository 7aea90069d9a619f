"""attention_query_layout (passes/attention_layout.py): a query our kernels compute for
torch's CPU flash attention is stored [B, S, H, D] in memory when the attention output
is read through a heads-inner permute, so that the output's `reshape(B, S, H * D)` is a
view; queries that are views, outputs read otherwise and layouts the caller sees are
left alone. Values are torch's."""
import copy

import pytest
import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes import canonicalize
from fusionstitch.passes.attention_layout import ATTENTION, attention_query_layout

from helpers_passes import random_inputs, run_graph

B, H, S, D = 2, 3, 6, 4


def _attention_graph(query="rotary", read="heads_inner", q_output=False, q_read=False):
    """q (rotary: computed by a kernel from the projection's transposed view; view: the
    transposed view itself), attention, its output read as `read`."""
    b = GraphBuilder()
    x = b.param((B, S, H, D))
    k = b.param((B, H, S, D))
    v = b.param((B, H, S, D))
    cos = b.param((S, D))
    w = b.param((H * D, H * D))
    qt = b.op("permute.default", x, [0, 2, 1, 3])
    q = b.op("add.Tensor", b.op("mul.Tensor", qt, cos), qt) if query == "rotary" else qt
    att = b.op(ATTENTION, q, k, v, scale=0.5)
    o = b.getitem(att, 0)
    lse = b.getitem(att, 1)
    if read == "heads_inner":
        rows = b.op("view.default", b.op("permute.default", o, [0, 2, 1, 3]), [B * S, H * D])
        out = b.op("mm.default", rows, w)         # the output projection
    else:
        out = b.op("mul.Scalar", o, 2.0)
    outs = (out, lse) + ((q,) if q_output else ()) + \
        ((b.op("neg.default", q),) if q_read else ())
    return b.build(*outs)


def _attention_inputs(g):
    return random_inputs(g, seed=3)


def test_a_computed_query_is_stored_heads_inner_and_values_are_torchs():
    g = _attention_graph()
    r = attention_query_layout(g, None, frozenset())
    att = next(n for n in r.nodes if n.op == ATTENTION)
    qb = r[att.args[0].name]
    assert qb.op == "permute.default" and tuple(qb.args[1]) == (0, 2, 1, 3)
    copy_ = r[qb.args[0].name]
    assert copy_.op == "clone.default"
    assert r[copy_.args[0].name].op == "permute.default"
    inputs = _attention_inputs(g)
    for a, e in zip(run_graph(r, inputs), run_graph(g, inputs)):
        torch.testing.assert_close(a, e, rtol=0, atol=0)


@pytest.mark.parametrize("case", [dict(query="view"), dict(read="other"),
                                  dict(q_output=True), dict(q_read=True)])
def test_queries_views_other_readers_and_seen_layouts_are_left_alone(case):
    g = _attention_graph(**case)
    assert attention_query_layout(g, None, frozenset()) is g


def test_a_query_saved_for_the_backward_is_saved_as_its_copy():
    """A free output (saved for the backward) that is the query becomes the copy: the
    producer stores q once, in the attention's layout."""
    g = _attention_graph(q_output=True)
    r = attention_query_layout(g, None, frozenset({2}))
    att = next(n for n in r.nodes if n.op == ATTENTION)
    assert r.outputs[2].name == att.args[0].name
    inputs = _attention_inputs(g)
    for a, e in zip(run_graph(r, inputs), run_graph(g, inputs)):
        torch.testing.assert_close(a, e, rtol=0, atol=0)


def test_the_pipeline_runs_it():
    g = _attention_graph()
    r = canonicalize(g)
    att = next(n for n in r.nodes if n.op == ATTENTION)
    assert r[att.args[0].name].op == "permute.default"


class _RotaryAttention(torch.nn.Module):
    """A llama-style attention: projections, rotary embedding of the query and key,
    torch's attention, the output projection over `transpose(1, 2).reshape`."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(H * D, H * D)
        self.k = torch.nn.Linear(H * D, H * D)
        self.v = torch.nn.Linear(H * D, H * D)
        self.o = torch.nn.Linear(H * D, H * D)

    def forward(self, x, cos, sin):
        def heads(t):
            return t.view(B, S, H, D).transpose(1, 2)

        def rotate(t):
            return torch.cat((-t[..., D // 2:], t[..., :D // 2]), dim=-1)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        q = q * cos + rotate(q) * sin
        k = k * cos + rotate(k) * sin
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(B, S, H * D))


def test_a_compiled_rotary_attention_copies_no_attention_output(one_thread):
    """Training step of a rotary attention: the attention output's reshape for the
    output projection is a view (before: a copy of [B, S, H, D] per call, a reshape that
    copied), and the gradients are eager's within eager's own distance from float64."""
    torch.manual_seed(0)
    net = _RotaryAttention()
    ref, ref64 = copy.deepcopy(net), copy.deepcopy(net).double()
    x = torch.randn(B, S, H * D)
    cos, sin = torch.randn(S, D), torch.randn(S, D)
    torch._dynamo.reset()
    comp = torch.compile(net, backend=fusionstitch.backend(target="cpu"))
    comp(x, cos, sin).sum().backward()                   # compile
    for m in (net, ref, ref64):
        m.zero_grad()
    with torch.profiler.profile(record_shapes=True) as prof:
        comp(x, cos, sin).sum().backward()
    ref(x, cos, sin).sum().backward()
    ref64(x.double(), cos.double(), sin.double()).sum().backward()
    copies = [e for e in prof.events() if e.name == "aten::clone"
              and e.input_shapes and list(e.input_shapes[0]) == [B, S, H, D]]
    assert not copies, [(e.name, e.input_shapes) for e in copies]
    eps = torch.finfo(torch.float32).eps
    for (name, p), q, d in zip(net.named_parameters(), ref.parameters(), ref64.parameters()):
        ours, eager = ((g.grad.double() - d.grad).abs().max() for g in (p, q))
        assert ours <= 4 * max(eager, eps * d.grad.abs().max()), (name, float(ours))
