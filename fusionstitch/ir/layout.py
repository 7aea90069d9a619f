"""Memory-format facts torch derives from strides, where the IR's passes need them.

torch picks a 4-D tensor's memory format from its strides (`suggest_memory_format`), and
some of its CPU kernels pick their own layout from it: a convolution run through torch's
own im2col loops (`thnn_conv_use_channels_last`) or oneDNN (`mkldnn_conv_use_channels_last`)
runs channels-last when its input *or its weight* suggests channels-last, and copies the
other operands to match. A 1x1 weight's strides say so only on its size-1 dims
([48, 8, 1, 1] at (8, 1, 8, 8) is channels-last, at (8, 1, 1, 1) it is not), which
"the same layout on every dim longer than 1" cannot tell apart.
"""
from __future__ import annotations


def suggests_channels_last(shape, strides) -> bool:
    """ATen's `is_channels_last_strides_2d` (c10/core/MemoryFormat.h) for a 4-D tensor of
    `shape` at `strides`: the dims in NHWC order (C, W, H, N) have non-decreasing
    strides, each at least the extent of the one before; ambiguous cases (a trivial C,
    an N111 tensor) are NCHW, as there."""
    if len(shape) != 4 or len(strides) != 4 or strides[1] == 0:
        return False
    least = 0
    for d in (1, 3, 2, 0):
        if shape[d] == 0 or strides[d] < least:
            return False
        if d == 0 and least == strides[1]:
            return False
        least = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return True
