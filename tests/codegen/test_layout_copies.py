"""Outputs of a flat kernel that hold one value in two orders (codegen/layout_copies.py).

mobilevit_infer: an eval batch norm and SiLU of a channels-last convolution's output,
stored NCHW (for a depthwise convolution) and as NHWC rows (for a 1x1 convolution run as a
GEMM). Each output asked for the value at its own index, so the chain was computed twice
per element, once reading across the grain of the input (10x Inductor's time for the
group). Now the chain is computed once, the loop runs in the order that reads along
memory, and each output is stored from that one value.
"""
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.codegen import expr as E
from fusionstitch.codegen.kernel import Load, Op, Store
from fusionstitch.codegen.layout_copies import access_cost
from fusionstitch.codegen.lower import Lowerer, lower_group
from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse
from fusionstitch.runtime.program import Program

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])

# the group of mobilevit_infer, smaller: %xh is the convolution's NHWC result
_BN_SILU = """graph g(%xh: f32[2,16,20,8], %m: f32[8,1,1], %w: f32[8,1,1]) {{
  %x: f32[2,8,16,20] = permute.default({src}, [0, 3, 1, 2])
  %a: f32[2,8,16,20] = sub.Tensor(%x, %m)
  %b: f32[2,8,16,20] = mul.Tensor(%a, %w)
  %s: f32[2,8,16,20] = sigmoid.default(%b)
  %y: f32[2,8,16,20] = mul.Tensor(%b, %s)
  %p: f32[2,16,20,8] = permute.default(%y, [0, 2, 3, 1])
  %c: f32[2,16,20,8] = clone.default(%p, memory_format=torch.contiguous_format)
  %r: f32[640,8] = view.default(%c, [640, 8])
  return (%y, %r)
}}"""


def _kernel(text):
    g = parse(text)
    names = [n.name for n in g.nodes if n.op != "parameter"]
    return g, lower_group(g, names, "k")


def _check_once(k, along: str, across: str) -> None:
    """One sigmoid per element; output `along` stored at x, `across` elsewhere."""
    (comp,) = k.components
    ops = [st.op for st in comp.body if isinstance(st, Op)]
    assert ops.count("sigmoid") == 1, ops
    outs = {b.value: b.name for b in k.buffers if b.is_output}
    stores = {st.buffer: st.index for st in comp.body if isinstance(st, Store)}
    assert _along_x(stores[outs[along]]) and not _along_x(stores[outs[across]]), stores


def _along_x(index, n=50) -> bool:
    """Whether the store offset `index` is x itself (at sizes' values, x < n)."""
    def at(x):
        def replace(e):
            if isinstance(e, E.Var):
                return E.Const(x)
            if isinstance(e, E.Sym):
                return E.Const(e.value)
            if isinstance(e, E.Digit):
                return E.rewrite(e.expand(), replace)
            return None
        return E.evaluate(E.rewrite(index, replace), lambda s: s.value)
    return all(at(x) == x for x in range(n))


def test_chain_computed_once_in_the_input_order():
    """One sigmoid per element (two before), and the loop runs in the NHWC input's
    order: the rows output is stored at x, the NCHW one across."""
    _, k = _kernel(_BN_SILU.format(src="%xh"))
    _check_once(k, along="r", across="y")


def test_leader_follows_the_input_layout():
    """The same chain over an NCHW input (a permute back of the NHWC one: row-major in
    the logical order) runs in NCHW order: the NCHW output is the one stored at x."""
    text = _BN_SILU.format(src="%xb").replace(
        "graph g(%xh: f32[2,16,20,8],",
        "graph g(%xn: f32[2,8,16,20],").replace(
        "  %x: f32", "  %xh: f32[2,16,20,8] = permute.default(%xn, [0, 2, 3, 1])\n"
                    "  %xb: f32[2,16,20,8] = clone.default(%xh)\n  %x: f32", 1)
    g = parse(text)
    names = [n.name for n in g.nodes if n.op != "parameter" and n.name not in ("xh", "xb")]
    names = ["xh", "xb"] + names
    _check_once(lower_group(g, names, "k"), along="y", across="r")


def test_access_cost_counts_lines_per_window():
    """(loads, stores) per element: a contiguous f32 load costs 4 bytes, a broadcast
    nothing, a transposed read of a large matrix a line per element, and 8 rows read side
    by side (8 channel planes of an NCHW tensor in NHWC order) 8 bytes."""
    from fusionstitch.codegen.kernel import Component
    g = parse("graph g(%a: f32[256,256]) {\n  %b: f32[256,256] = neg.default(%a)\n"
              "  return (%b)\n}")
    L = Lowerer(g, ["b"], "k")
    buf = L.input_buffer("a", None, g["a"].type)
    n = 256 * 256
    x = E.Var("x")
    s0, s1 = buf.strides

    def load(rows, cols, swap=False):
        digits = (E.Digit(x, (E.Const(rows), E.Const(cols)), 0),
                  E.Digit(x, (E.Const(rows), E.Const(cols)), 1))
        i, j = (digits[1], digits[0]) if swap else digits
        comp = Component("flat", E.Const(n), E.ONE, (),
                         (Load("v", buf.name, E.add(E.mul(i, s0), E.mul(j, s1)), None, "f32"),))
        return access_cost(L, comp, n)
    assert load(256, 256) == (4, 0)
    assert load(256, 256, swap=True) == (64, 0)
    assert load(8192, 8, swap=True)[0] == pytest.approx(8, rel=0.2)     # 8 rows side by side
    comp = Component("flat", E.Const(n), E.ONE, (), (Load("v", buf.name, E.Const(7), None, "f32"),))
    assert access_cost(L, comp, n) == (0, 0)


C = 8
CASES = {
    # (function, inputs): every case has outputs holding one value in two or three orders
    "nhwc_copy": (lambda x: ((y := torch.sigmoid(x) * x), y.permute(0, 2, 3, 1).contiguous()),
                  lambda: (torch.randn(2, 6, 5, C).permute(0, 3, 1, 2),)),
    "rows_only_copies": (lambda x: (torch.tanh(x).permute(0, 2, 3, 1).contiguous().view(-1, C),
                                    torch.tanh(x).transpose(1, 2).contiguous()),
                         lambda: (torch.randn(2, C, 6, 5),)),
    "heads": (lambda q: ((z := torch.exp(q) * 0.5), z.transpose(1, 2).contiguous().view(2, 5, -1)),
              lambda: (torch.randn(2, 3, 5, 4),)),
    "t": (lambda a: ((z := torch.erf(a) + 1), z.t().contiguous()),
          lambda: (torch.randn(9, 7),)),
    "three_orders": (lambda x: ((y := torch.sin(x) * 2), y.permute(0, 2, 3, 1).contiguous(),
                                y.permute(3, 1, 0, 2).contiguous()),
                     lambda: (torch.randn(2, 3, 4, 5),)),
    "unsqueeze_view": (lambda x: ((y := torch.cos(x)), y.unsqueeze(1).transpose(0, 2).contiguous()),
                       lambda: (torch.randn(4, 6),)),
    "half": (lambda x: ((y := torch.sigmoid(x) * x), y.permute(0, 2, 3, 1).contiguous()),
             lambda: (torch.randn(2, 6, 5, C).permute(0, 3, 1, 2).half(),)),
}


@pytest.mark.usefixtures("strict_fresh")
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_copies_match_eager(name, dynamic, target):
    fn, inputs = CASES[name]
    args = inputs()
    got = torch.compile(fn, backend=fusionstitch.backend(target=target), dynamic=dynamic)(*args)
    want = fn(*args)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        # each value is one chain of at most two transcendentals: within a few ulp
        tol = dict(rtol=2e-3, atol=1e-3) if w.dtype == torch.float16 else dict(rtol=4e-6, atol=1e-6)
        torch.testing.assert_close(g, w, **tol)
    s = fusionstitch.stats()
    assert s["fallbacks"] == 0, s


@pytest.mark.parametrize("target", TARGETS)
def test_program_runs_the_mobilevit_group(target):
    """The group as its plan runs it: one kernel, both outputs right."""
    g = parse(_BN_SILU.format(src="%xh"))
    plan = make_plan(g, "stitch", target)
    assert plan.num_kernels == 1, str(plan)
    xh, m, w = torch.randn(2, 16, 20, 8), torch.randn(8, 1, 1), torch.randn(8, 1, 1)
    y, r = Program(plan, target=target)([xh, m, w])
    b = (xh.permute(0, 3, 1, 2) - m) * w
    want = b * torch.sigmoid(b)
    torch.testing.assert_close(y, want, rtol=4e-6, atol=1e-6)
    torch.testing.assert_close(r, want.permute(0, 2, 3, 1).reshape(640, 8), rtol=4e-6, atol=1e-6)

