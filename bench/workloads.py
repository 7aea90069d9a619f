"""Model zoo of fusion benchmarks for fusionstitch.

Each workload is a small PyTorch program taken from one of the papers this
project reproduces (FusionStitching 2019's micro-benchmarks and production
models, the MXNet NVRTC pointwise-fusion RFC, the XLA fusion analyses) or a
synthetic memory-bound chain.  Every workload is written with plain PyTorch ops
so that it traces under ``torch.compile`` (Dynamo + AOTAutograd with core-aten
decompositions):

* no data-dependent Python control flow on tensor values and no ``.item()``;
* recurrent models are unrolled Python loops over explicit cell math (no
  ``nn.RNN``/``nn.LSTM``/``nn.TransformerEncoderLayer`` fused kernels);
* no dropout and no in-graph randomness: every random sample (NCE negatives,
  VAE epsilon, routing-logit init, ...) is drawn once in :func:`make` from a
  local ``torch.Generator`` and passed in as an input.

Usage::

    inst = make("lstm", size="full", steps=400)
    eager = step(inst)
    compiled = step(make("lstm", size="full", steps=400),
                    torch.compile(inst.fn, backend="fusionstitch"))
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["Workload", "Instance", "WORKLOADS", "names", "make", "make_from", "registry",
           "workload", "step", "loss_of"]


# --------------------------------------------------------------------------- #
# Public data types
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Workload:
    """A benchmark program; :func:`make` turns it into a runnable :class:`Instance`.

    ``build(params, device, dtype)`` returns ``(fn, args, grad_params)`` or
    ``(fn, args, grad_params, mutated)``; ``params`` is a size dict plus a
    ``"seed"`` entry.
    """

    name: str
    mode: str  # "train" or "inference"
    description: str
    sizes: dict = field(hash=False)  # {"small": {...}, "full": {...}}
    build: Callable = field(hash=False, repr=False)
    # no GEMM or convolution: time is memory traffic (and launches), so the bench reports
    # the bandwidth each variant achieved against the device's copy bandwidth
    memory_bound: bool = False
    # a train step backpropagates the first output alone (a model's loss); the others
    # are outputs to compare (bench/models.py); otherwise it backpropagates the sum of all
    loss_first: bool = False


@dataclass
class Instance:
    """A built workload: call ``fn(*args)`` (or use :func:`step`)."""

    workload: Workload
    fn: Callable
    args: tuple
    grad_params: list
    mutated: list
    params: dict = field(default_factory=dict)  # the resolved size dict (incl. seed)


WORKLOADS: dict[str, Workload] = {}


def _register(name: str, mode: str, description: str, small: dict, full: dict,
              memory_bound: bool = False):
    """Decorator adding a build function to :data:`WORKLOADS` (definition order)."""
    assert mode in ("train", "inference")

    def deco(build):
        WORKLOADS[name] = Workload(name, mode, description, {"small": small, "full": full}, build,
                                   memory_bound)
        return build

    return deco


# --------------------------------------------------------------------------- #
# Deterministic initialisation helpers (local generator, CPU, float32)
# --------------------------------------------------------------------------- #
def _gen(params: dict) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(int(params.get("seed", 0)))


def _randn(g, *shape, scale=1.0):
    return torch.randn(shape, generator=g) * scale


def _uniform(g, *shape, lo=0.0, hi=1.0):
    return torch.rand(shape, generator=g) * (hi - lo) + lo


def _randint(g, high, *shape):
    return torch.randint(0, high, shape, generator=g, dtype=torch.int64)


def _zipf(g, vocab, *shape, power=0.75):
    """Word ids from a unigram^0.75 (Zipf) distribution, as word2vec samples them."""
    probs = (1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)) ** power
    n = math.prod(shape)
    return torch.multinomial(probs, n, replacement=True, generator=g).view(shape)


@torch.no_grad()
def _init_module(mod: nn.Module, g: torch.Generator) -> nn.Module:
    """Overwrite every parameter/BN buffer of ``mod`` from ``g`` (order = registration)."""
    for name, p in mod.named_parameters():
        if p.dim() >= 2:  # weights / embeddings: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            bound = 1.0 / math.sqrt(p[0].numel())
            p.copy_(_uniform(g, *p.shape, lo=-bound, hi=bound))
        elif name.endswith("weight"):  # norm scales around 1
            p.copy_(1.0 + _randn(g, *p.shape, scale=0.1))
        else:  # biases
            p.copy_(_randn(g, *p.shape, scale=0.1))
    for name, b in mod.named_buffers():
        if name.endswith("running_mean"):
            b.copy_(_randn(g, *b.shape, scale=0.1))
        elif name.endswith("running_var"):
            b.copy_(_uniform(g, *b.shape, lo=0.8, hi=1.2))
    return mod


class _Place:
    """Moves freshly generated CPU/fp32 tensors and modules to (device, dtype)."""

    def __init__(self, device, dtype):
        self.device, self.dtype = torch.device(device), dtype

    def f(self, t):  # floating input
        return t.to(device=self.device, dtype=self.dtype)

    def i(self, t):  # integer / bool input: keep its dtype
        return t.to(device=self.device)

    def m(self, mod, g, train):  # module: init, move, set mode
        return _init_module(mod, g).to(device=self.device, dtype=self.dtype).train(train)


# --------------------------------------------------------------------------- #
# 1. logreg
# --------------------------------------------------------------------------- #
class LogReg(nn.Module):
    """Logistic regression: linear -> log-softmax -> NLL (TensorFlow-Examples)."""

    def __init__(self, features, classes):
        super().__init__()
        self.linear = nn.Linear(features, classes)

    def forward(self, x, labels):
        return F.nll_loss(F.log_softmax(self.linear(x), dim=-1), labels)


@_register("logreg", "train",
           "Logistic regression on MNIST-like data (FusionStitching 2019 micro-benchmark 'logistic')",
           small=dict(batch=4, features=16, classes=5),
           full=dict(batch=128, features=784, classes=10))
def _build_logreg(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(LogReg(p["features"], p["classes"]), g, train=True)
    x = P.f(_randn(g, p["batch"], p["features"]))
    y = P.i(_randint(g, p["classes"], p["batch"]))
    return mod, (x, y), list(mod.parameters())


# --------------------------------------------------------------------------- #
# 2. word2vec
# --------------------------------------------------------------------------- #
class SkipGram(nn.Module):
    """Skip-gram with negative sampling (NCE-style logsigmoid loss)."""

    def __init__(self, vocab, dim):
        super().__init__()
        self.inp = nn.Embedding(vocab, dim)  # centre-word vectors
        self.out = nn.Embedding(vocab, dim)  # context-word vectors

    def forward(self, centre, context, negatives):
        v = self.inp(centre)  # (B, E)
        u = self.out(context)  # (B, E)
        n = self.out(negatives)  # (B, K, E)
        pos = F.logsigmoid((v * u).sum(-1))  # (B,)
        neg = F.logsigmoid(-torch.bmm(n, v.unsqueeze(-1)).squeeze(-1)).sum(-1)  # (B,)
        return -(pos + neg).mean()


@_register("word2vec", "train",
           "Skip-gram word2vec with K pre-sampled negatives (FusionStitching 2019 micro-benchmark 'word2vec')",
           small=dict(batch=4, vocab=50, dim=8, negatives=3),
           full=dict(batch=128, vocab=50000, dim=200, negatives=64))
def _build_word2vec(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(SkipGram(p["vocab"], p["dim"]), g, train=True)
    b, v = p["batch"], p["vocab"]
    centre = P.i(_zipf(g, v, b))
    context = P.i(_zipf(g, v, b))
    negatives = P.i(_zipf(g, v, b, p["negatives"]))  # sampled once, here
    return mod, (centre, context, negatives), list(mod.parameters())


# --------------------------------------------------------------------------- #
# 3. mlp
# --------------------------------------------------------------------------- #
class MLP(nn.Module):
    """Multilayer perceptron, alternating ReLU/GELU, cross-entropy loss."""

    def __init__(self, features, hidden, classes, layers):
        super().__init__()
        dims = [features] + [hidden] * (layers - 1) + [classes]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x, labels):
        for i, lin in enumerate(self.layers):
            x = lin(x)
            if i < len(self.layers) - 1:
                x = F.relu(x) if i % 2 == 0 else F.gelu(x)
        return F.cross_entropy(x, labels)


@_register("mlp", "train",
           "Multilayer perceptron classifier (FusionStitching 2019 micro-benchmark 'perceptron')",
           small=dict(batch=4, features=16, hidden=32, classes=5, layers=4),
           full=dict(batch=128, features=784, hidden=1024, classes=10, layers=4))
def _build_mlp(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(MLP(p["features"], p["hidden"], p["classes"], p["layers"]), g, train=True)
    x = P.f(_randn(g, p["batch"], p["features"]))
    y = P.i(_randint(g, p["classes"], p["batch"]))
    return mod, (x, y), list(mod.parameters())


# --------------------------------------------------------------------------- #
# 4. vae
# --------------------------------------------------------------------------- #
class VAE(nn.Module):
    """Variational autoencoder: MLP encoder, reparametrisation, sigmoid decoder."""

    def __init__(self, features, hidden, latent):
        super().__init__()
        self.enc = nn.Linear(features, hidden)
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec1 = nn.Linear(latent, hidden)
        self.dec2 = nn.Linear(hidden, features)

    def forward(self, x, eps):
        h = torch.tanh(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.exp(0.5 * logvar) * eps  # eps ~ N(0, 1) is an input
        r = torch.sigmoid(self.dec2(F.relu(self.dec1(z))))
        r = r.clamp(1e-6, 1.0 - 1e-6)
        bce = -(x * torch.log(r) + (1.0 - x) * torch.log(1.0 - r)).sum(-1)
        kl = -0.5 * (1.0 + logvar - mu * mu - torch.exp(logvar)).sum(-1)
        return (bce + kl).mean()


@_register("vae", "train",
           "Variational autoencoder on MNIST-like data (FusionStitching 2019 micro-benchmark 'var-encoder')",
           small=dict(batch=4, features=16, hidden=16, latent=2),
           full=dict(batch=128, features=784, hidden=512, latent=20))
def _build_vae(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(VAE(p["features"], p["hidden"], p["latent"]), g, train=True)
    x = P.f(_uniform(g, p["batch"], p["features"]))  # pixel intensities in [0, 1)
    eps = P.f(_randn(g, p["batch"], p["latent"]))
    return mod, (x, eps), list(mod.parameters())


# --------------------------------------------------------------------------- #
# 5. birnn
# --------------------------------------------------------------------------- #
class BiRNN(nn.Module):
    """Bidirectional tanh RNN, unrolled; mean of concatenated outputs -> classifier."""

    def __init__(self, features, hidden, classes):
        super().__init__()
        self.ih_f, self.hh_f = nn.Linear(features, hidden), nn.Linear(hidden, hidden, bias=False)
        self.ih_b, self.hh_b = nn.Linear(features, hidden), nn.Linear(hidden, hidden, bias=False)
        self.head = nn.Linear(2 * hidden, classes)

    @staticmethod
    def _run(xs, ih, hh):
        h = xs[0].new_zeros(xs[0].shape[0], hh.weight.shape[0])
        outs = []
        for x_t in xs:
            h = torch.tanh(ih(x_t) + hh(h))
            outs.append(h)
        return outs

    def forward(self, x, labels):  # x: (B, T, F)
        xs = x.unbind(1)
        fwd = self._run(xs, self.ih_f, self.hh_f)
        bwd = self._run(xs[::-1], self.ih_b, self.hh_b)[::-1]
        out = torch.stack([torch.cat([f, b], -1) for f, b in zip(fwd, bwd)], 1)  # (B, T, 2H)
        return F.cross_entropy(self.head(out.mean(1)), labels)


@_register("birnn", "train",
           "Bidirectional RNN over MNIST rows, unrolled (FusionStitching 2019 micro-benchmark 'rnn')",
           small=dict(batch=3, steps=4, features=8, hidden=8, classes=5),
           full=dict(batch=128, steps=28, features=28, hidden=256, classes=10))
def _build_birnn(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(BiRNN(p["features"], p["hidden"], p["classes"]), g, train=True)
    x = P.f(_randn(g, p["batch"], p["steps"], p["features"]))
    y = P.i(_randint(g, p["classes"], p["batch"]))
    return mod, (x, y), list(mod.parameters())


# --------------------------------------------------------------------------- #
# 6. lstm
# --------------------------------------------------------------------------- #
class UnrolledLSTM(nn.Module):
    """LSTM as explicit cell math: one [x, h] @ W matmul per step, then gates."""

    def __init__(self, features, hidden, out):
        super().__init__()
        self.hidden = hidden
        self.w = nn.Parameter(torch.empty(features + hidden, 4 * hidden))
        self.b = nn.Parameter(torch.empty(4 * hidden))
        self.head = nn.Linear(hidden, out)

    def forward(self, x, target):  # x: (T, B, F), target: (T, B, out)
        h = x.new_zeros(x.shape[1], self.hidden)
        c = torch.zeros_like(h)
        hs = []
        for x_t in x.unbind(0):
            gates = torch.addmm(self.b, torch.cat([x_t, h], 1), self.w)
            i, f, gg, o = gates.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
        y = self.head(torch.stack(hs, 0))
        return F.mse_loss(y, target)


@_register("lstm", "train",
           "Unrolled LSTM language-model-style regression (FusionStitching 2019 'rnn'/'aiwriter'; XLA fusion analyses)",
           small=dict(batch=2, steps=3, features=8, hidden=8, out=4),
           full=dict(batch=32, steps=50, features=128, hidden=256, out=16))
def _build_lstm(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(UnrolledLSTM(p["features"], p["hidden"], p["out"]), g, train=True)
    x = P.f(_randn(g, p["steps"], p["batch"], p["features"]))
    target = P.f(_randn(g, p["steps"], p["batch"], p["out"], scale=0.5))
    return mod, (x, target), list(mod.parameters())


# --------------------------------------------------------------------------- #
# 7. gru_residual
# --------------------------------------------------------------------------- #
class ResidualGRU(nn.Module):
    """MXNet ``ResidualCell(GRUCell(n))`` unrolled over the given inputs.

    GRU (MXNet gate order r, z, n): r = sig(i_r + h_r), z = sig(i_z + h_z),
    n = tanh(i_n + r * h_n), h' = (1 - z) * n + z * h; residual output h' + x.
    """

    def __init__(self, hidden):
        super().__init__()
        self.i2h = nn.Linear(hidden, 3 * hidden)
        self.h2h = nn.Linear(hidden, 3 * hidden)

    def forward(self, x0, x1, h):
        outs = []
        for x in (x0, x1):
            i_r, i_z, i_n = self.i2h(x).chunk(3, -1)
            h_r, h_z, h_n = self.h2h(h).chunk(3, -1)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            h = (1.0 - z) * n + z * h
            outs.append(h + x)  # residual connection; the state stays h
        return tuple(outs)


@_register("gru_residual", "inference",
           "Residual GRU cell unrolled twice (MXNet pointwise-fusion NVRTC RFC benchmark)",
           small=dict(batch=4, hidden=8),
           full=dict(batch=100, hidden=500))
def _build_gru_residual(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(ResidualGRU(p["hidden"]), g, train=False)
    x0 = P.f(_randn(g, p["batch"], p["hidden"]))
    x1 = P.f(_randn(g, p["batch"], p["hidden"]))
    h0 = P.f(torch.zeros(p["batch"], p["hidden"]))  # MXNet begin_state: zeros
    return mod, (x0, x1, h0), []


# --------------------------------------------------------------------------- #
# 8. resnet bottleneck (train + inference)
# --------------------------------------------------------------------------- #
class Bottleneck(nn.Module):
    """ResNet-50 bottleneck unit: 1x1 -> 3x3 -> 1x1 convs with BN/ReLU, identity skip."""

    def __init__(self, planes):
        super().__init__()
        c = 4 * planes
        self.conv1 = nn.Conv2d(c, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + x)


def _build_bottleneck(p, device, dtype, train):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(Bottleneck(p["planes"]), g, train=train)
    x = P.f(_randn(g, p["batch"], 4 * p["planes"], p["hw"], p["hw"]))
    if not train:
        return mod, (x,), []
    # training-mode BatchNorm updates its running statistics in place
    stats = [b for n, b in mod.named_buffers() if n.endswith(("running_mean", "running_var"))]
    return mod, (x,), list(mod.parameters()), stats


_BOTTLENECK_SMALL = dict(batch=2, planes=4, hw=8)
_BOTTLENECK_FULL = dict(batch=8, planes=64, hw=56)  # ResNet-50 conv2_x


@_register("resnet_bottleneck_train", "train",
           "ResNet-50 bottleneck unit, training with BatchNorm batch stats (MXNet NVRTC RFC ResNet-50; XLA fusion analyses)",
           small=_BOTTLENECK_SMALL, full=_BOTTLENECK_FULL)
def _build_bottleneck_train(p, device, dtype):
    return _build_bottleneck(p, device, dtype, train=True)


@_register("resnet_bottleneck_infer", "inference",
           "ResNet-50 bottleneck unit, inference with folded-able BatchNorm (MXNet NVRTC RFC ResNet-50; XLA fusion analyses)",
           small=dict(_BOTTLENECK_SMALL), full=dict(_BOTTLENECK_FULL))
def _build_bottleneck_infer(p, device, dtype):
    return _build_bottleneck(p, device, dtype, train=False)


# --------------------------------------------------------------------------- #
# 9. transformer_encoder
# --------------------------------------------------------------------------- #
class EncoderLayer(nn.Module):
    """Post-LN transformer encoder layer with explicit multi-head self-attention."""

    def __init__(self, d_model, heads, ffn):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.o = nn.Linear(d_model, d_model)
        self.ln1 = nn.LayerNorm(d_model)
        self.ff1, self.ff2 = nn.Linear(d_model, ffn), nn.Linear(ffn, d_model)
        self.ln2 = nn.LayerNorm(d_model)

    def forward(self, x, pad_mask):  # x: (B, S, D); pad_mask: (B, S) bool, True = padding
        b, s, d = x.shape
        h, dh = self.heads, d // self.heads

        def heads(t):  # (B, S, D) -> (B, H, S, Dh)
            return t.view(b, s, h, dh).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
        scores = scores.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(attn, v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(F.relu(self.ff1(x))))


@_register("transformer_encoder", "inference",
           "Transformer encoder layer at small batch, NMT inference (FusionStitching 2019 production model 'nmt')",
           small=dict(batch=2, seq=5, d_model=16, heads=2, ffn=32),
           full=dict(batch=8, seq=64, d_model=512, heads=8, ffn=2048))
def _build_transformer(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(EncoderLayer(p["d_model"], p["heads"], p["ffn"]), g, train=False)
    b, s = p["batch"], p["seq"]
    x = P.f(_randn(g, b, s, p["d_model"]))
    lengths = _randint(g, s - s // 2, b) + s // 2 + 1  # every sentence has >= 1 token
    lengths[0] = s  # at least one unpadded sentence
    pad = P.i(torch.arange(s)[None, :] >= lengths[:, None])
    return mod, (x, pad), []


# --------------------------------------------------------------------------- #
# 10. capsule_routing
# --------------------------------------------------------------------------- #
def _squash(z, eps=1e-9):
    """Capsule squash: |z|^2 / (1 + |z|^2) * z / |z|."""
    sq = (z * z).sum(-1, keepdim=True)
    return z * (sq / (1.0 + sq) * torch.rsqrt(sq + eps))


class CapsuleRouting(nn.Module):
    """Multi-interest extractor: behaviour capsules -> K interest capsules by dynamic routing."""

    def __init__(self, vocab, dim, interests, cap_dim, iters):
        super().__init__()
        self.iters = iters
        self.emb = nn.Embedding(vocab, dim)
        self.w = nn.Parameter(torch.empty(interests, dim, cap_dim))  # per-interest bilinear map

    def forward(self, items, mask, logits):  # (B, L) int64, (B, L) float, (B, K, L) float
        e = self.emb(items)  # (B, L, D)
        u_hat = torch.matmul(e.unsqueeze(1), self.w.unsqueeze(0))  # batched GEMM: (B, K, L, C)
        b = logits
        for _ in range(self.iters):
            w = torch.softmax(b, dim=1) * mask.unsqueeze(1)  # route each behaviour over K
            z = torch.matmul(w.unsqueeze(-2), u_hat).squeeze(-2)  # weighted sum: (B, K, C)
            v = _squash(z)
            b = b + torch.matmul(u_hat, v.unsqueeze(-1)).squeeze(-1)  # agreement: (B, K, L)
        return v


@_register("capsule_routing", "inference",
           "Multi-interest capsule dynamic routing (FusionStitching 2019 production model 'multi-interests')",
           small=dict(batch=2, seq=6, vocab=20, dim=8, interests=3, cap_dim=8, iters=3),
           full=dict(batch=128, seq=50, vocab=10000, dim=64, interests=4, cap_dim=64, iters=3))
def _build_capsule(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(CapsuleRouting(p["vocab"], p["dim"], p["interests"], p["cap_dim"], p["iters"]),
              g, train=False)
    b, L = p["batch"], p["seq"]
    items = P.i(_randint(g, p["vocab"], b, L))
    lengths = _randint(g, L, b) + 1
    mask = P.f((torch.arange(L)[None, :] < lengths[:, None]).float())
    logits = P.f(_randn(g, b, p["interests"], L))  # MIND: routing logits init ~ N(0, 1)
    return mod, (items, mask, logits), []


# --------------------------------------------------------------------------- #
# 11. cartpole
# --------------------------------------------------------------------------- #
_GRAVITY, _MASSCART, _MASSPOLE, _LENGTH = 9.8, 1.0, 0.1, 0.5
_TOTAL_MASS = _MASSCART + _MASSPOLE
_POLEMASS_LENGTH = _MASSPOLE * _LENGTH
_FORCE_MAG, _TAU = 10.0, 0.02
_X_LIMIT, _THETA_LIMIT = 2.4, 12 * 2 * math.pi / 360


def cartpole(state, actions):
    """Batched OpenAI-gym cart-pole, Euler integration for ``actions.shape[0]`` steps.

    state: (B, 4) float [x, x_dot, theta, theta_dot]; actions: (T, B) int64 in {0, 1}.
    Environments that fail stay frozen (``where``); returns (final state, reward).
    """
    x, x_dot, theta, theta_dot = state.unbind(1)
    alive = torch.ones_like(x, dtype=torch.bool)
    reward = torch.zeros_like(x)
    for t in range(actions.shape[0]):
        force = _FORCE_MAG * (2 * actions[t] - 1).to(x.dtype)
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + _POLEMASS_LENGTH * theta_dot * theta_dot * sin) / _TOTAL_MASS
        theta_acc = (_GRAVITY * sin - cos * temp) / (
            _LENGTH * (4.0 / 3.0 - _MASSPOLE * cos * cos / _TOTAL_MASS))
        x_acc = temp - _POLEMASS_LENGTH * theta_acc * cos / _TOTAL_MASS
        x = torch.where(alive, x + _TAU * x_dot, x)
        x_dot = torch.where(alive, x_dot + _TAU * x_acc, x_dot)
        theta = torch.where(alive, theta + _TAU * theta_dot, theta)
        theta_dot = torch.where(alive, (theta_dot + _TAU * theta_acc).clamp(-10.0, 10.0), theta_dot)
        alive = alive & (x.abs() <= _X_LIMIT) & (theta.abs() <= _THETA_LIMIT)
        reward = reward + alive.to(reward.dtype)
    return torch.stack([x, x_dot, theta, theta_dot], 1), reward


@_register("cartpole", "inference",
           "Batched cart-pole physics simulation, pure elementwise (XLA operator-fusion analysis)",
           small=dict(envs=8, steps=5),
           full=dict(envs=65536, steps=50))
def _build_cartpole(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    state = P.f(_uniform(g, p["envs"], 4, lo=-0.05, hi=0.05))
    actions = P.i(_randint(g, 2, p["steps"], p["envs"]))
    return cartpole, (state, actions), []


# --------------------------------------------------------------------------- #
# 12. adam
# --------------------------------------------------------------------------- #
def _adam_shapes(n, w):
    """``n`` parameter shapes of mixed kinds (linear, bias, conv, ...) for width ``w``."""
    kinds = [(w, w), (w,), (4 * w, w), (max(w // 4, 1), max(w // 4, 1), 3, 3), (4 * w,)]
    return [kinds[i % len(kinds)] for i in range(n)]


def _make_adam(n, lr, beta1, beta2, eps, weight_decay):
    """Returns ``adam_step(*params, *grads, *exp_avgs, *exp_avg_sqs, step)`` (AdamW, in place)."""

    def adam_step(*args):
        ps, gs, ms, vs = (args[k * n:(k + 1) * n] for k in range(4))
        step_count = args[4 * n]  # python int
        bc1 = 1.0 - beta1 ** step_count
        bc2 = 1.0 - beta2 ** step_count
        for p, g, m, v in zip(ps, gs, ms, vs):
            if weight_decay:
                p.mul_(1.0 - lr * weight_decay)
            m.mul_(beta1).add_(g, alpha=1.0 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
            denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
            p.addcdiv_(m, denom, value=-lr / bc1)

    return adam_step


@_register("adam", "inference",
           "One multi-tensor Adam(W) step over many parameters, horizontal fusion (FusionStitching 2019 / XLA analyses)",
           small=dict(n_params=6, width=8, step=3, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                      weight_decay=0.01),
           full=dict(n_params=40, width=256, step=3, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                     weight_decay=0.01), memory_bound=True)
def _build_adam(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    shapes = _adam_shapes(p["n_params"], p["width"])
    params = [P.f(_randn(g, *s)) for s in shapes]
    grads = [P.f(_randn(g, *s, scale=0.1)) for s in shapes]
    exp_avgs = [P.f(_randn(g, *s, scale=0.01)) for s in shapes]
    exp_avg_sqs = [P.f(_uniform(g, *s, lo=0.0, hi=1e-4)) for s in shapes]
    fn = _make_adam(len(shapes), p["lr"], p["beta1"], p["beta2"], p["eps"], p["weight_decay"])
    args = (*params, *grads, *exp_avgs, *exp_avg_sqs, int(p["step"]))
    return fn, args, [], params + exp_avgs + exp_avg_sqs


# --------------------------------------------------------------------------- #
# 13. layernorm_softmax_gelu
# --------------------------------------------------------------------------- #
class LNSoftmaxGELU(nn.Module):
    """Memory-bound chain: LayerNorm -> Linear -> GELU -> softmax gate -> residual -> LayerNorm."""

    def __init__(self, dim):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)

    def forward(self, x, target):
        h = F.gelu(self.fc(self.ln1(x)))
        a = torch.softmax(h, dim=-1)
        y = self.ln2(x + a * h * h.shape[-1])
        return F.mse_loss(y, target)


@_register("layernorm_softmax_gelu", "train",
           "LayerNorm/GELU/softmax memory-bound chain (FusionStitching 2019 Fig. 1 style pattern; XLA analyses)",
           small=dict(batch=2, seq=4, dim=16),
           full=dict(batch=32, seq=128, dim=512))
def _build_ln_chain(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    mod = P.m(LNSoftmaxGELU(p["dim"]), g, train=True)
    x = P.f(_randn(g, p["batch"], p["seq"], p["dim"]))
    target = P.f(_randn(g, p["batch"], p["seq"], p["dim"]))
    return mod, (x, target), list(mod.parameters())


# --------------------------------------------------------------------------- #
# 14. softmax_chain
# --------------------------------------------------------------------------- #
def softmax_chain(scores, mask, gate):
    """Attention-score chain: scale, + mask, softmax, * gate, then mean/var/rsqrt normalise.

    scores: (B, H, S, S); mask: (B, 1, 1, S) additive (0 or -1e4); gate: (1, H, 1, S).
    """
    s = scores.shape[-1]
    p = torch.softmax(scores * (1.0 / math.sqrt(s)) + mask, dim=-1)
    y = p * gate * s
    mu = y.mean(-1, keepdim=True)
    var = ((y - mu) * (y - mu)).mean(-1, keepdim=True)
    out = (y - mu) * torch.rsqrt(var + 1e-5)
    return out, mu.squeeze(-1)


@_register("softmax_chain", "inference",
           "Attention-score softmax + normalisation memory-bound chain (FusionStitching 2019 'nmt'-style pattern)",
           small=dict(batch=2, heads=2, seq=8),
           full=dict(batch=16, heads=8, seq=128), memory_bound=True)
def _build_softmax_chain(p, device, dtype):
    g, P = _gen(p), _Place(device, dtype)
    b, h, s = p["batch"], p["heads"], p["seq"]
    scores = P.f(_randn(g, b, h, s, s, scale=2.0))
    lengths = _randint(g, s, b) + 1
    mask = P.f(torch.where(torch.arange(s)[None, :] < lengths[:, None], 0.0, -1e4).view(b, 1, 1, s))
    gate = P.f(_uniform(g, 1, h, 1, s, lo=0.5, hi=1.5))
    return softmax_chain, (scores, mask, gate), []


# --------------------------------------------------------------------------- #
# Public functions
# --------------------------------------------------------------------------- #
def names(mode: str | None = None) -> list[str]:
    """Workload names in registration order, optionally only ``"train"``/``"inference"`` ones."""
    if mode not in (None, "train", "inference"):
        raise ValueError(f"mode must be None, 'train' or 'inference', not {mode!r}")
    return [n for n, w in WORKLOADS.items() if mode is None or w.mode == mode]


def make(name: str, size: str = "small", device="cpu", dtype=torch.float32, seed: int = 0,
         **overrides) -> Instance:
    """Build workload ``name`` at ``size``; ``overrides`` replace entries of the size dict.

    Deterministic: everything random comes from a local generator seeded with ``seed``
    (the global RNG state is left untouched).
    """
    return make_from(registry(name), name, size, device, dtype, seed, **overrides)


def registry(name: str) -> dict:
    """The registry holding workload ``name``: this zoo's, or the real models' of
    bench/models.py (``gpt2_train``, ...); this zoo's when neither has it."""
    if name not in WORKLOADS:
        from bench import models
        if name in models.WORKLOADS:
            return models.WORKLOADS
    return WORKLOADS


def workload(name: str) -> Workload:
    """The :class:`Workload` called ``name``, in the zoo or among the models."""
    reg = registry(name)
    if name not in reg:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)} and the "
                       "models of bench/models.py")
    return reg[name]


def make_from(registry: dict, name: str, size: str, device, dtype, seed: int,
              **overrides) -> Instance:
    """:func:`make` for the workloads of ``registry`` (this zoo, or bench/models.py's)."""
    if name not in registry:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(registry)}")
    w = registry[name]
    if size not in w.sizes:
        raise KeyError(f"unknown size {size!r} for {name!r}; known: {', '.join(w.sizes)}")
    params = dict(w.sizes[size])
    unknown = set(overrides) - set(params)
    if unknown:
        raise TypeError(f"{name}: unknown override(s) {sorted(unknown)}; sizes take {sorted(params)}")
    params.update(overrides)
    params["seed"] = seed
    # nn.Module constructors draw default inits from the global RNG; isolate it.
    with torch.random.fork_rng(devices=[]):
        built = w.build(params, device, dtype)
    fn, args, grad_params = built[:3]
    mutated = list(built[3]) if len(built) > 3 else []
    return Instance(w, fn, tuple(args), list(grad_params), mutated, params)


def loss_of(workload: Workload, out) -> torch.Tensor:
    """What a train step backpropagates: the output when it is a scalar, the first output
    for a ``loss_first`` workload, else the sum of every floating output."""
    if isinstance(out, torch.Tensor) and out.dim() == 0:
        return out
    if workload.loss_first:
        return out[0]
    return sum(o.float().sum() for o in _flatten(out) if o.is_floating_point())


def _flatten(out) -> list:
    from fusionstitch.report.explain import flat_tensors
    return flat_tensors(out)


def step(inst: Instance, fn: Callable | None = None) -> list[torch.Tensor]:
    """Run one step of ``inst`` with ``fn`` (default ``inst.fn``) and return tensors to compare.

    Inference runs under ``torch.no_grad()``; training backpropagates the output (or the
    sum of all floating outputs) with fresh ``.grad``s.  Returns outputs, then the grads
    of ``inst.grad_params``, then clones of ``inst.mutated``.
    """
    fn = inst.fn if fn is None else fn
    if inst.workload.mode == "inference":
        with torch.no_grad():
            outs = _flatten(fn(*inst.args))
        grads = []
    else:
        for p in inst.grad_params:
            p.grad = None
        out = fn(*inst.args)
        outs = _flatten(out)
        loss_of(inst.workload, out).backward()
        grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                 for p in inst.grad_params]
    outs = [o.detach().clone() for o in outs]
    return outs + grads + [m.detach().clone() for m in inst.mutated]
