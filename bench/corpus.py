"""A generated corpus of small torch programs for the per-group A/B (bench/groups.py).

Programs nobody tuned the compiler on, in the classes where a fusion compiler's code
generator shows its quality, each at several sizes (1k to 16M elements):

* `chain-L<n>`: an elementwise chain of n ops over two inputs, transcendental functions
  (sin, cos, exp, tanh, sigmoid, erf, log, sqrt) mixed with arithmetic; `-mask` adds
  comparisons and `where` selects, clamps and relus;
* `sim-T<n>`: a batched simulation loop (the issue's example): four state vectors of a
  few thousand environments, n unrolled steps of sin/cos, products and `where` resets,
  the final state stacked and a reward summed over the steps;
* `reduce-<kind>-d<dim>`: a sum / amax / mean / var over one dim of a rank-3 tensor,
  with an elementwise prologue and a broadcast epilogue (x - r); `softmax-d<dim>` and
  `layernorm` (over the last dim, with weight and bias);
* `bcast-<kind>`: broadcasts of a row vector, a column vector, an outer product, and a
  middle dim, under a transcendental;
* `layout-<kind>`: layout changes with a little arithmetic, the result contiguous: a
  random permutation of a rank-4 (`perm4`) or rank-6 tensor of short dims (`perm6`),
  an image's k x k patches gathered as the GEMM rows of a patchify convolution
  (`patches-k2`, `patches-k4`), and the sum of two channels-last images read as NCHW
  (`residual-cl`).

`programs(sizes, seed)` lists them (deterministic: the same seed gives the same programs
and inputs); `CorpusProgram.build()` returns `(fn, args)`. All are inference programs
(the zoo and the model suite hold the training steps).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable

import torch

SIZES = {"1k": 1 << 10, "16k": 1 << 14, "256k": 1 << 18, "1M": 1 << 20, "4M": 1 << 22,
         "16M": 1 << 24}
DEFAULT_SIZES = ("16k", "256k", "4M", "16M")
# a program runs at a size only when ops x elements stays under this (a 128-op chain of
# 16M elements takes seconds a call unfused, and the corpus must run on 2 cores)
MAX_WORK = 1 << 28


@dataclass(frozen=True)
class CorpusProgram:
    name: str            # "chain-L32-mask/4M"
    cls: str             # "chain-L32-mask": the size-free class the A/B sums over
    numel: int
    build: Callable[[], tuple]     # () -> (fn, args)


# --- elementwise chains -----------------------------------------------------------------
_UNARY = [
    lambda v: torch.sin(v), lambda v: torch.cos(v), lambda v: torch.tanh(v),
    lambda v: torch.sigmoid(v), lambda v: torch.erf(v),
    lambda v: torch.exp(v.clamp(-8, 8)), lambda v: torch.log(v.abs() + 1),
    lambda v: torch.sqrt(v.abs() + 0.5),
]
_ARITH = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
          lambda a, b: a * 0.5 + b, lambda a, b: a / (b.abs() + 1)]
_MASKS = [lambda a, b: torch.where(a > b, a, b * 0.5), lambda a, b: torch.relu(a) - b,
          lambda a, b: torch.where(a.abs() < 1.0, a, b), lambda a, b: a.clamp(-2, 2) + b,
          lambda a, b: torch.where((a > 0) & (b < 0.5), a * b, a + b)]


def _chain(rng: random.Random, length: int, masks: bool) -> Callable:
    """A chain of `length` ops: each reads the last value and one earlier one."""
    plan = []
    for i in range(length):
        kind = rng.random()
        if masks and kind < 0.3:
            plan.append(("m", rng.randrange(len(_MASKS)), rng.randrange(i + 2)))
        elif kind < 0.6:
            plan.append(("u", rng.randrange(len(_UNARY)), 0))
        else:
            plan.append(("b", rng.randrange(len(_ARITH)), rng.randrange(i + 2)))

    def chain(x, y):
        vals = [x, y]
        for kind, k, j in plan:
            last = vals[-1]
            if kind == "u":
                vals.append(_UNARY[k](last))
            elif kind == "b":
                vals.append(_ARITH[k](last, vals[j]))
            else:
                vals.append(_MASKS[k](last, vals[j]))
        return vals[-1], vals[len(vals) // 2]     # two outputs: the chain and its middle
    return chain


# --- the batched simulation ---------------------------------------------------------------
def simulation(steps: int) -> Callable:
    """`steps` Euler steps of a driven pendulum on a cart for each environment; one that
    leaves the track is reset to the start (a `where`), and the reward counts the steps
    each environment stayed on it; also the mean reward and each environment's energy."""
    def sim(state, force):
        x, v, th, om = state.unbind(1)
        reward = torch.zeros_like(x)
        for t in range(steps):
            s, c = torch.sin(th), torch.cos(th)
            f = force[t] * (1.0 + 0.1 * torch.cos(0.3 * t + x))
            acc_th = (9.8 * s - c * (f + 0.05 * om * om * s)) / (0.5 + 0.1 * c * c)
            acc_x = f - 0.05 * acc_th * c
            x, v = x + 0.02 * v, v + 0.02 * acc_x
            th, om = th + 0.02 * om, (om + 0.02 * acc_th).clamp(-8.0, 8.0)
            out = (x.abs() > 2.4) | (th.abs() > 0.8)
            x, v = torch.where(out, 0.0, x), torch.where(out, 0.0, v)
            th, om = torch.where(out, 0.05 * s, th), torch.where(out, 0.0, om)
            reward = reward + (~out).to(x.dtype)
        final = torch.stack([x, v, th, om], 1)
        # a scalar and a per-environment reduction of the chain's results too
        return final, reward, reward.mean(), (final * final).sum(1)
    return sim


# --- reductions and broadcasts -----------------------------------------------------------
def _shape3(rng: random.Random, numel: int) -> tuple[int, int, int]:
    """A rank-3 shape of `numel` elements (powers of two), no dim below 4."""
    bits = int(math.log2(numel))
    a = rng.randint(2, max(2, bits - 4))
    b = rng.randint(2, max(2, bits - a - 2))
    return (1 << a, 1 << b, 1 << (bits - a - b))


def reduction(kind: str, dim: int) -> Callable:
    def fn(x, w):
        y = torch.exp(-x * x) * w                       # w broadcast along the last dim
        if kind == "sum":
            r = y.sum(dim, keepdim=True)
        elif kind == "amax":
            r = y.amax(dim, keepdim=True)
        elif kind == "mean":
            r = y.mean(dim, keepdim=True)
        else:
            r = y.var(dim, keepdim=True)
        return (y - r) * 2.0, r
    return fn


def softmax(dim: int) -> Callable:
    return lambda x, w: torch.softmax(x * w, dim)


def layernorm(x, w):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w, w * 0.5)


def broadcast(kind: str) -> Callable:
    def fn(x, w):
        if kind == "row":        # a vector along the last dim
            return torch.tanh(x + w)
        if kind == "col":        # a vector along the first dim
            return torch.sigmoid(x * x[:, :1, :1])
        if kind == "mid":        # a vector along the middle dim
            return torch.sin(x * x[:1, :, :1])
        return torch.exp(-(x[:, :1, :1] * w) ** 2) + x    # outer: [a,1,1] * [c]
    return fn


def _factor(rng: random.Random, numel: int, rank: int, least: int = 2) -> tuple[int, ...]:
    """A random shape of `rank` powers of two (each at least `least`) holding `numel`."""
    bits = int(math.log2(numel))
    dims = [least.bit_length() - 1] * rank
    for _ in range(bits - sum(dims)):
        dims[rng.randrange(rank)] += 1
    return tuple(1 << d for d in dims)


def permuted(order: tuple[int, ...]) -> Callable:
    return lambda x, w: (x.permute(*order) * 2.0 + 1.0).contiguous()


def patches(k: int) -> Callable:
    """The rows [N * H/k * W/k, C * k * k] of a stride-k k x k convolution's patches."""
    def fn(x, w):
        n, c, h, ww = x.shape
        p = x.reshape(n, c, h // k, k, ww // k, k).permute(0, 2, 4, 1, 3, 5)
        return (p * w.view(1, 1, 1, 1, 1, -1)).reshape(-1, c * k * k)
    return fn


def residual_cl(a, b):
    return (a.permute(0, 3, 1, 2) + 0.5 * b.permute(0, 3, 1, 2)).contiguous()


def _inputs(seed: int, *shapes) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


def programs(sizes=DEFAULT_SIZES, seed: int = 0, classes=None) -> list[CorpusProgram]:
    """The corpus at `sizes` (names of SIZES), every class unless `classes` (prefixes of
    class names) narrows it."""
    out: list[CorpusProgram] = []

    def add(cls: str, size: str, ops: int, build: Callable) -> None:
        n = SIZES[size]
        if ops * n > MAX_WORK:
            return
        if classes and not any(cls.startswith(c) for c in classes):
            return
        out.append(CorpusProgram(f"{cls}/{size}", cls, n, build))

    for size in sizes:
        n = SIZES[size]
        for length, masks in ((8, False), (32, False), (128, False), (32, True),
                              (128, True)):
            cls = f"chain-L{length}{'-mask' if masks else ''}"
            rng = random.Random(f"{seed}/{cls}/{size}")
            fn = _chain(rng, length, masks)
            add(cls, size, length, lambda fn=fn, n=n, s=rng.randrange(1 << 30):
                (fn, _inputs(s, (n // 64, 64), (n // 64, 64))))
        envs = max(8, n // 4)
        for steps in (10, 40):
            add(f"sim-T{steps}", size, 30 * steps, lambda envs=envs, steps=steps, n=n:
                (simulation(steps), [_inputs(seed, (envs, 4))[0] * 0.05,
                                     _inputs(seed + 1, (steps, envs))[0]]))
        def x_w(cls: str, n=n, size=size):
            """Inputs of a rank-3 class: x of a shape drawn per class and size, w over
            x's last dim."""
            rng = random.Random(f"{seed}/{cls}/{size}")
            shape = _shape3(rng, n)
            return lambda: _inputs(rng.randrange(1 << 30), shape, shape[-1:])
        for kind in ("sum", "amax", "mean", "var"):
            for dim in range(3):
                cls = f"reduce-{kind}-d{dim}"
                add(cls, size, 8, lambda kind=kind, dim=dim, xw=x_w(cls):
                    (reduction(kind, dim), xw()))
        for dim in (0, 2):
            cls = f"softmax-d{dim}"
            add(cls, size, 8, lambda dim=dim, xw=x_w(cls): (softmax(dim), xw()))
        add("layernorm", size, 10, lambda xw=x_w("layernorm"): (layernorm, xw()))
        for kind in ("row", "col", "outer", "mid"):
            cls = f"bcast-{kind}"
            add(cls, size, 4, lambda kind=kind, xw=x_w(cls): (broadcast(kind), xw()))
        for rank in (4, 6):
            cls = f"layout-perm{rank}"
            rng = random.Random(f"{seed}/{cls}/{size}")
            shape = _factor(rng, n, rank)
            order = tuple(rng.sample(range(rank), rank))
            while order == tuple(range(rank)):
                order = tuple(rng.sample(range(rank), rank))
            add(cls, size, 3, lambda shape=shape, order=order, s=rng.randrange(1 << 30):
                (permuted(order), _inputs(s, shape, (1,))))
        for k in (2, 4):
            cls = f"layout-patches-k{k}"
            rng = random.Random(f"{seed}/{cls}/{size}")
            c = rng.choice((3, 4, 8, 16))
            batch = 4 if n >= 64 * c * k * k else 1
            hw = max(k, int(math.sqrt(n // (c * batch))) // k * k)
            shape = (batch, c, hw, hw)
            add(cls, size, 2, lambda shape=shape, k=k, s=rng.randrange(1 << 30):
                (patches(k), _inputs(s, shape, (k,))))
        cls = "layout-residual-cl"
        rng = random.Random(f"{seed}/{cls}/{size}")
        nhwc = _factor(rng, n, 4, least=4)
        add(cls, size, 3, lambda nhwc=nhwc, s=rng.randrange(1 << 30):
            (residual_cl, _inputs(s, nhwc, nhwc)))
    return out
