"""bench/judge.py's rules on made-up tensors: what they let through (rounding, a gradient
that is zero in exact arithmetic) and what they catch (a real difference, an error much
larger than eager's own, infinities in other places, a missing gradient)."""
import sys
from pathlib import Path

import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench.judge import judge_step, judge_tensors  # noqa: E402

G = torch.Generator().manual_seed(0)


def _exact(*shape):
    return torch.randn(*shape, generator=G, dtype=torch.float64)


def _rounded(f, rel=2e-7):
    """f in fp32, with an extra error of `rel` (norm-wise) of its size."""
    noise = torch.randn(f.shape, generator=G, dtype=torch.float64)
    return (f + rel * f.norm() * noise / noise.norm()).float()


def test_rounding_passes_and_real_differences_are_caught():
    f = _exact(50)
    e = _rounded(f)
    assert judge_tensors([("x", _rounded(f), e, f, False)]) == []
    off = judge_tensors([("x", _rounded(f, 1e-3), e, f, False)])
    assert len(off) == 2 and "from eager" in off[0] and "from float64" in off[1]
    # within 1e-4 of eager but 10x further from float64 than eager: the 3x rule
    e_close = f.float()
    [line] = judge_tensors([("x", _rounded(f, 5e-6), e_close, f, False)])
    assert "from float64" in line


def test_gradient_zero_in_exact_arithmetic_is_judged_against_the_largest():
    big = _exact(20)
    zero = torch.zeros(8, dtype=torch.float64)
    noise_e = (1e-7 * big.norm() * torch.randn(8, generator=G, dtype=torch.float64)).float()
    noise_c = (1e-7 * big.norm() * torch.randn(8, generator=G, dtype=torch.float64)).float()
    items = [("big", _rounded(big), _rounded(big), big, True),
             ("zero", noise_c, noise_e, zero, True)]
    assert judge_tensors(items) == []      # per tensor, noise_c vs noise_e is O(1) off
    items[1] = ("zero", noise_c * 1e4, noise_e, zero, True)
    assert [ln.split(":")[0] for ln in judge_tensors(items)] == ["zero", "zero"]


def test_structure():
    f = _exact(4)
    e = f.float()
    inf = torch.tensor([float("-inf"), 1.0])
    assert judge_tensors([("m", inf.clone(), inf, inf.double(), False)]) == []
    assert "infinities" in judge_tensors([("m", torch.tensor([0.0, 1.0]), inf,
                                           inf.double(), False)])[0]
    assert "no gradient" in judge_tensors([("g", None, e, f, True)])[0]
    assert "a gradient where eager has none" in judge_tensors([("g", e, None, None, True)])[0]
    assert "eager torch.float32[4]" in judge_tensors([("x", e[:3].contiguous().expand(3),
                                                       e, f, False)])[0]
    assert judge_step([e, e, e], [e, e, e], [f, f, f], n_grads=1, n_buffers=1) == []
    assert "tensors" in judge_step([e], [e, e], [f, f], 0, 0)[0]


def test_a_result_nearer_exact_than_eager_is_not_off():
    """convnext_train on an H100: eager's TF32 convolutions are 8e-4 from float64, ours
    8e-7; the distance from eager is eager's own error, and nothing was wrong."""
    f = _exact(50)
    e_tf32 = _rounded(f, 8e-4)
    assert judge_tensors([("x", _rounded(f), e_tf32, f, False)]) == []
    # as far from eager, but further from exact than eager: still caught
    off = judge_tensors([("x", _rounded(f, 2e-3), e_tf32, f, False)])
    assert off and "from eager" in off[0]


def test_eager_in_its_other_layout_is_a_reference_too():
    """A tensor may come with eager's values of another way to run the step (a
    convolutional network channels-last): the nearer of eager's values for the rule
    against eager, the farther from float64 for the slack rule. A real difference is
    still caught."""
    f = _exact(50)
    e_lucky, e_other = f.float(), _rounded(f, 3e-6)
    ours = _rounded(f, 3e-6)
    assert len(judge_tensors([("x", ours, e_lucky, f, False)])) == 1   # 3x a lucky eager
    assert judge_tensors([("x", ours, e_lucky, f, False, (e_other,))]) == []
    off = judge_tensors([("x", _rounded(f, 1e-3), e_lucky, f, False, (e_other,))])
    assert len(off) == 2 and "from eager" in off[0] and "from float64" in off[1]
    # no other value (a model without a twin, or a missing gradient there) changes nothing
    assert judge_tensors([("x", ours, e_lucky, f, False, (None,))]) == \
        judge_tensors([("x", ours, e_lucky, f, False)])


def test_a_nearly_cancelling_gradient_is_judged_at_the_steps_gradient_scale():
    """A gradient of norm 1e-6 beside one of norm 30 (a scale before a batch norm: zero in
    exact arithmetic but for the norm's epsilon): float32 sums of terms of the step's
    scale leave it ~1e-6 of rounding, which eager's double-accumulating batch norm does
    not show (tests/fuzz/cnn.py). Within 3 x 16 u x 30 of float64 it passes; a gradient
    of the step's scale is held to the usual rules, and an error beyond that floor is
    caught."""
    big, small = _exact(64) * 30 / 8, _exact(8) * 1e-6
    eager_big, eager_small = _rounded(big), (small + 2e-7 * _exact(8) / 3).float()
    ours_small = (small + 6e-6 * _exact(8) / 3).float()
    assert judge_tensors([("big", _rounded(big), eager_big, big, True),
                          ("small", ours_small, eager_small, small, True)]) == []
    wrong_small = (small + 3e-4 * _exact(8) / 3).float()
    assert len(judge_tensors([("big", _rounded(big), eager_big, big, True),
                              ("small", wrong_small, eager_small, small, True)])) == 2
    # not a gradient: its own scale
    assert judge_tensors([("small", ours_small, eager_small, small, False)])
