"""Hand-made samples for decompositions that torch's OpInfo samples do not reach.

Each entry calls one aten overload directly: `HAND[name] = builder`, where
`builder(dtype)` returns (args, kwargs) of float `dtype` (tensors that can take a
gradient require one). The normalisation layers and the attention family have several
samples each, as those are what real models run. `META_ONLY` lists ops torch has no CPU
kernel for (cuDNN, MIOpen): only the structure of their decomposition's outputs can be
checked, against the op's meta kernel.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _t(*shape, dtype, lo=-2.0, hi=2.0, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed + 7 * len(shape) + sum(shape))
    x = (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    return x.requires_grad_(grad and dtype.is_floating_point)


def _pos(*shape, dtype, grad=False):
    return _t(*shape, dtype=dtype, lo=0.5, hi=1.5, grad=grad)


def _rnn_params(mode, dtype, layers=1, bidirectional=False, input_size=3, hidden=4):
    gates = {"lstm": 4, "gru": 3}.get(mode, 1)
    params = []
    for layer in range(layers):
        for _ in range(2 if bidirectional else 1):
            width = input_size if layer == 0 else hidden * (2 if bidirectional else 1)
            rows = gates * hidden
            params += [_t(rows, width, dtype=dtype), _t(rows, hidden, dtype=dtype),
                       _t(rows, dtype=dtype), _t(rows, dtype=dtype)]
    return params


def _rnn_input(mode, dtype, bidirectional=False):
    """aten.<mode>.input(input, hx, params, has_biases, num_layers, dropout, train,
    bidirectional, batch_first): 2 layers, (batch 2, time 5, features 3)."""
    dirs = 2 if bidirectional else 1
    x = _t(2, 5, 3, dtype=dtype)
    h = _t(2 * dirs, 2, 4, dtype=dtype)
    hx = [h, _t(2 * dirs, 2, 4, dtype=dtype, seed=1)] if mode == "lstm" else h
    return (x, hx, _rnn_params(mode, dtype, 2, bidirectional), True, 2, 0.0, True,
            bidirectional, True), {}


def _rnn_data(mode, dtype):
    """aten.<mode>.data: a packed batch (lengths 4, 3, 1)."""
    batch_sizes = torch.tensor([3, 2, 2, 1])
    data = _t(8, 3, dtype=dtype)
    h = _t(1, 3, 4, dtype=dtype)
    hx = [h, _t(1, 3, 4, dtype=dtype, seed=1)] if mode == "lstm" else h
    return (data, batch_sizes, hx, _rnn_params(mode, dtype), True, 1, 0.0, True, False), {}


def _bn_args(dtype, shape=(4, 3, 5, 2)):
    c = shape[1]
    return (_t(*shape, dtype=dtype, lo=-1, hi=3), _pos(c, dtype=dtype, grad=True),
            _t(c, dtype=dtype), _t(c, dtype=dtype, grad=False), _pos(c, dtype=dtype))


def _upsample(shape, size):
    return lambda dtype: ((_t(*shape, dtype=dtype), size, None), {})


def _upsample_ac(shape, size, align=False, scales=None):
    return lambda dtype: ((_t(*shape, dtype=dtype), size, align, scales), {})


def _weight_norm_backward(dtype, dim):
    """(grad_w, v, g, norms, dim) as the forward `_weight_norm_interface` saves them."""
    v = _t(4, 3, 2, dtype=dtype, grad=False)   # (a backward op: no gradient of its own)
    shape = [1, 1, 1]
    shape[dim] = v.shape[dim]
    g = _pos(*shape, dtype=dtype)
    _, norms = aten._weight_norm_interface.default(v, g, dim)
    return (_t(4, 3, 2, dtype=dtype, grad=False), v, g, norms, dim), {}


# name -> builder(dtype) -> (args, kwargs); the op is the part of the name before "/"
HAND: dict = {
    # --- normalisation layers: what real models run
    "native_layer_norm.default/affine": lambda dt: (
        (_t(3, 5, 7, dtype=dt, lo=-1, hi=4), [7], _pos(7, dtype=dt, grad=True),
         _t(7, dtype=dt), 1e-5), {}),
    "native_layer_norm.default/no_affine_2d": lambda dt: (
        (_t(4, 3, 6, dtype=dt), [3, 6], None, None, 1e-5), {}),
    "native_batch_norm.default/train": lambda dt: (_bn_args(dt) + (True, 0.1, 1e-5), {}),
    "_native_batch_norm_legit_functional.default/train": lambda dt: (
        _bn_args(dt) + (True, 0.1, 1e-5), {}),
    "_native_batch_norm_legit_functional.default/train_3d": lambda dt: (
        _bn_args(dt, (6, 4, 5)) + (True, 0.3, 1e-3), {}),
    "_native_batch_norm_legit_no_training.default/eval": lambda dt: (
        _bn_args(dt) + (0.1, 1e-5), {}),
    "_native_batch_norm_legit.no_stats/train": lambda dt: (
        (_t(4, 3, 5, dtype=dt), _pos(3, dtype=dt, grad=True), _t(3, dtype=dt), True, 0.1,
         1e-5), {}),
    "native_group_norm.default/4d": lambda dt: (
        (_t(2, 6, 3, 4, dtype=dt, lo=-1, hi=3), _pos(6, dtype=dt, grad=True), _t(6, dtype=dt),
         2, 6, 12, 3, 1e-5), {}),
    "native_group_norm.default/3d_no_affine": lambda dt: (
        (_t(3, 4, 5, dtype=dt), None, None, 3, 4, 5, 2, 1e-5), {}),
    "native_group_norm.default/one_group": lambda dt: (
        (_t(2, 4, 5, dtype=dt), _pos(4, dtype=dt, grad=True), None, 2, 4, 5, 1, 1e-5), {}),
    "_fused_rms_norm.default/affine": lambda dt: (
        (_t(3, 4, 8, dtype=dt), [8], _pos(8, dtype=dt, grad=True), 1e-6), {}),
    "_fused_rms_norm.default/no_weight": lambda dt: ((_t(5, 6, dtype=dt), [6], None, None), {}),
    "_weight_norm_interface.default/dim0": lambda dt: (
        (_t(4, 3, 2, dtype=dt), _pos(4, 1, 1, dtype=dt, grad=True), 0), {}),
    "_weight_norm_interface.default/dim2": lambda dt: (
        (_t(4, 3, 2, dtype=dt), _pos(1, 1, 2, dtype=dt, grad=True), 2), {}),
    "_weight_norm_interface_backward.default/dim0": lambda dt: _weight_norm_backward(dt, 0),
    "_weight_norm_interface_backward.default/dim2": lambda dt: _weight_norm_backward(dt, 2),
    # --- recurrent layers, whole
    "lstm.input/bidirectional": lambda dt: _rnn_input("lstm", dt, bidirectional=True),
    "gru.input/2_layers": lambda dt: _rnn_input("gru", dt),
    "rnn_tanh.input/2_layers": lambda dt: _rnn_input("rnn_tanh", dt),
    "rnn_relu.input/2_layers": lambda dt: _rnn_input("rnn_relu", dt),
    "lstm.data/packed": lambda dt: _rnn_data("lstm", dt),
    "gru.data/packed": lambda dt: _rnn_data("gru", dt),
    "rnn_tanh.data/packed": lambda dt: _rnn_data("rnn_tanh", dt),
    "rnn_relu.data/packed": lambda dt: _rnn_data("rnn_relu", dt),
    # --- resampling
    "upsample_nearest1d.vec/size": _upsample((2, 3, 5), [9]),
    "upsample_nearest3d.vec/size": _upsample((1, 2, 3, 2, 4), [5, 3, 6]),
    "upsample_nearest2d.default/size": lambda dt: ((_t(1, 2, 3, 4, dtype=dt), [5, 7]), {}),
    "upsample_nearest3d.default/size": lambda dt: ((_t(1, 2, 3, 2, 4, dtype=dt), [5, 3, 6]), {}),
    "_upsample_nearest_exact1d.vec/size": _upsample((2, 3, 5), [9]),
    "_upsample_nearest_exact2d.vec/size": _upsample((1, 2, 3, 4), [5, 7]),
    "_upsample_nearest_exact2d.default/size": lambda dt: (
        (_t(1, 2, 3, 4, dtype=dt), [5, 7]), {}),
    "_upsample_nearest_exact3d.vec/size": _upsample((1, 2, 3, 2, 4), [5, 3, 6]),
    "_upsample_nearest_exact3d.default/size": lambda dt: (
        (_t(1, 2, 3, 2, 4, dtype=dt), [5, 3, 6]), {}),
    "upsample_linear1d.vec/align": _upsample_ac((2, 3, 5), [9], True),
    "upsample_bicubic2d.vec/scales": _upsample_ac((1, 2, 4, 5), None, False, [1.5, 2.0]),
    "upsample_trilinear3d.vec/size": _upsample_ac((1, 2, 3, 2, 4), [5, 3, 6]),
    "_upsample_bilinear2d_aa.vec/down": _upsample_ac((1, 2, 8, 9), [3, 4]),
    "_upsample_bicubic2d_aa.vec/down": _upsample_ac((1, 2, 8, 9), [3, 4]),
    "_upsample_lanczos2d_aa.vec/down": _upsample_ac((1, 2, 8, 9), [3, 4]),
    "affine_grid_generator.default/2d": lambda dt: (
        (_t(2, 2, 3, dtype=dt), [2, 3, 4, 5], False), {}),
    # --- indexing, shapes, creation
    "_unsafe_index.Tensor/rows": lambda dt: (
        (_t(5, 4, dtype=dt), [torch.tensor([0, 3, 3, 1])]), {}),
    "_unsafe_index_put.default/accumulate": lambda dt: (
        (_t(5, 4, dtype=dt), [torch.tensor([0, 3, 3])], _t(3, 4, dtype=dt), True), {}),
    "_reshape_alias.default/basic": lambda dt: ((_t(3, 4, dtype=dt), [4, 3], [3, 1]), {}),
    "broadcast_tensors.default/three": lambda dt: (
        ([_t(3, 1, dtype=dt), _t(1, 4, dtype=dt), _t(4, dtype=dt)],), {}),
    "unsafe_split_with_sizes.default/dim1": lambda dt: ((_t(3, 7, dtype=dt), [2, 5], 1), {}),
    "squeeze_copy.dims/two": lambda dt: ((_t(1, 3, 1, 2, dtype=dt), [0, 2]), {}),
    "resize_as.default/same_numel": lambda dt: (
        (_t(3, 4, dtype=dt, grad=False), _t(4, 3, dtype=dt, grad=False)), {}),
    "pad_sequence.default/batch_first": lambda dt: (
        ([_t(4, 2, dtype=dt), _t(2, 2, dtype=dt), _t(3, 2, dtype=dt)], True, -1.0), {}),
    "one_hot.default/classes": lambda dt: ((torch.tensor([0, 3, 1, 3]), 5), {}),
    "hann_window.default/len": lambda dt: ((7,), {"dtype": dt}),
    "hann_window.periodic/false": lambda dt: ((6, False), {"dtype": dt}),
    "zero.default/basic": lambda dt: ((_t(3, 4, dtype=dt),), {}),
    "fill.Tensor/scalar_tensor": lambda dt: (
        (_t(3, 4, dtype=dt), torch.tensor(1.5, dtype=dt)), {}),
    "_euclidean_dist.default/batched": lambda dt: (
        (_t(2, 5, 3, dtype=dt), _t(2, 4, 3, dtype=dt)), {}),
    "log_sigmoid_forward.default/wide": lambda dt: ((_t(3, 4, dtype=dt, lo=-30, hi=30),), {}),
    # --- scalar overloads
    "clamp_max.default/scalar": lambda dt: ((_t(3, 4, dtype=dt), 0.5), {}),
    "floor_divide.Scalar/scalar": lambda dt: ((_t(3, 4, dtype=dt, grad=False), 0.7), {}),
    "xlogy.Scalar_Other/scalar": lambda dt: ((_t(3, 4, dtype=dt), 2.5), {}),
    "xlogy.Scalar_Self/scalar": lambda dt: ((1.5, _pos(3, 4, dtype=dt, grad=True)), {}),
    "special_xlog1py.other_scalar/scalar": lambda dt: ((_t(3, 4, dtype=dt), 2.5), {}),
    "special_xlog1py.self_scalar/scalar": lambda dt: ((1.5, _pos(3, 4, dtype=dt, grad=True)), {}),
    "isin.Scalar_Tensor/hit": lambda dt: ((2, torch.tensor([1, 2, 5])), {}),
    "isin.Tensor_Scalar/hit": lambda dt: ((torch.tensor([[1, 2], [2, 7]]), 2), {}),
    "norm.Scalar/p3": lambda dt: ((_t(3, 4, dtype=dt), 3), {}),
    "norm.ScalarOpt_dtype/p2": lambda dt: ((_t(3, 4, dtype=dt), 2), {"dtype": dt}),
    "norm.ScalarOpt_dim_dtype/p1": lambda dt: ((_t(3, 4, dtype=dt), 1, [1], True), {"dtype": dt}),
    "matmul.default/batched": lambda dt: ((_t(2, 3, 4, dtype=dt), _t(4, 5, dtype=dt)), {}),
    # --- spectral
    "stft.center/reflect": lambda dt: (
        (_t(2, 40, dtype=dt), 8, 2, 8, _pos(8, dtype=dt), True, "reflect", False, True, True),
        {}),
    "istft.default/roundtrip": lambda dt: (
        (torch.stft(_t(2, 40, dtype=dt, grad=False), 8, 2, 8, torch.hann_window(8, dtype=dt),
                    return_complex=True).requires_grad_(), 8, 2, 8,
         torch.hann_window(8, dtype=dt)), {}),
}


def _cudnn_bn(dt):
    x, w, b, rm, rv = _bn_args(dt)
    return (x, w, b, rm, rv, True, 0.1, 1e-5), {}


def _cudnn_bn_backward(dt):
    x, w, _, rm, rv = _bn_args(dt)
    c = x.shape[1]
    return (x, _t(*x.shape, dtype=dt), w, rm, rv, _t(c, dtype=dt), _pos(c, dtype=dt), 1e-5,
            torch.empty(0, dtype=torch.uint8)), {}


def _miopen_bn_backward(dt):
    args, _ = _cudnn_bn_backward(dt)
    return args[:-1], {}


# ops without a CPU kernel (cuDNN, MIOpen, CUDA-only overloads): the decomposition's
# output structure against the meta kernel
META_ONLY: dict = {
    "cudnn_batch_norm.default": _cudnn_bn,
    "cudnn_batch_norm_backward.default": _cudnn_bn_backward,
    "miopen_batch_norm_backward.default": _miopen_bn_backward,
    "_fused_rms_norm_backward.default": lambda dt: (
        (_t(3, 4, 8, dtype=dt), _t(3, 4, 8, dtype=dt), [8], _pos(3, 4, 1, dtype=dt),
         _pos(8, dtype=dt), [True, True]), {}),
    "baddbmm.dtype": lambda dt: (
        (_t(2, 3, 5, dtype=dt), _t(2, 3, 4, dtype=dt), _t(2, 4, 5, dtype=dt), dt),
        {"beta": 0.5, "alpha": 2.0}),
}


def overload(name: str):
    """The OpOverload of a sample name `packet.overload/variant`."""
    packet, over = name.split("/")[0].split(".")
    return getattr(getattr(aten, packet), over)
