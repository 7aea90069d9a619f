"""A flat group's outputs with fewer elements than its space (codegen/lower._lower_flat):
a component of their own per size, not masked into the large loop (mobilenet_v2_train:
the masked statistics made codegen/pieces.py split the large loop at their bound, and
the rest of the loop read its activation by a division and a remainder of x + 48 per
element: 17x Inductor's time for that group)."""
import shutil

import torch

from fusionstitch.codegen.kernel import Store
from fusionstitch.codegen.lower import lower_group
from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse
from fusionstitch.runtime.program import Program

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])

# a training batch norm's epilogue (mobilenet_v2_train): per-channel outputs of 8 values
# beside the normalised, clamped and padded activation of 1600
_STATS_AND_PAD = """graph g(%v: f32[1,8,1,1], %m: f32[1,8,1,1], %c: f32[2,8,9,9]) {
  %e: f32[1,8,1,1] = add.Tensor(%v, 0.001)
  %r: f32[1,8,1,1] = rsqrt.default(%e)
  %s: f32[2,8,9,9] = sub.Tensor(%c, %m)
  %y: f32[2,8,9,9] = mul.Tensor(%s, %r)
  %h: f32[2,8,9,9] = hardtanh.default(%y, 0.0, 6.0)
  %p: f32[2,8,10,10] = constant_pad_nd.default(%h, [0, 1, 0, 1], 0.0)
  return (%r, %p)
}"""


def test_smaller_outputs_get_their_own_component():
    """The 8 statistics are stored by a component of their own; the padded activation's
    loop starts at 0 (masked into it, `x < 8` had split the large loop at 8, and its
    rest read the activation by a division and a remainder of x + 8 per element)."""
    g = parse(_STATS_AND_PAD)
    k = lower_group(g, [n.name for n in g.nodes if n.op != "parameter"], "k")
    outs = {b.name: b.value for b in k.buffers if b.is_output}
    stored = [{outs[st.buffer] for st in c.body if isinstance(st, Store)} for c in k.components]
    assert {"r"} in stored and not any(s == {"r", "p"} for s in stored), stored
    (small,) = [c for c, s in zip(k.components, stored) if s == {"r"}]
    assert small.xnumel.value == 8          # (a Const or a sym bound to 8)
    for target in TARGETS:
        plan = make_plan(g, "stitch", target)
        v, m, c = torch.rand(1, 8, 1, 1) + 0.5, torch.randn(1, 8, 1, 1), torch.randn(2, 8, 9, 9)
        r, p = Program(plan, target=target)([v, m, c])
        want_r = torch.rsqrt(v + 0.001)
        torch.testing.assert_close(r, want_r, rtol=4e-6, atol=0)
        want_p = torch.nn.functional.pad(torch.clamp((c - m) * want_r, 0, 6), [0, 1, 0, 1])
        torch.testing.assert_close(p, want_p, rtol=4e-6, atol=1e-6)
