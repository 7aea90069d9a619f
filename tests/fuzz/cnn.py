"""Random convolutional networks for the differential fuzzer: modules, not op lists.

`programs.py` draws torch programs of elementwise ops, reductions and views; it draws no
convolution, batch norm or pooling, so the passes that rewrite those (conv_layout: 1x1
convolutions as GEMMs over NHWC rows and their backward GEMMs, convolutions run
channels-last; saved_layouts: values saved or passed between kernels NHWC;
kept_mutations: batch norm's running statistics stored by our program) were checked only
on the model suite's few networks. Here a `Net` is a small `nn.Module` drawn layer by
layer, the way users write them: convolutions of every kind torch has (1x1, 3x3, strided,
padded or not, dilated, grouped, depthwise, with and without bias), batch norms (affine
or not, tracking running statistics or not), activations, max and average pooling,
residual additions, and sometimes a pooled linear head with a cross-entropy loss; in
NCHW or channels-last (model and input), in training mode (two steps, each a forward
and a backward) or in eval mode under no_grad.

`check(net)` runs it three ways (eager float32, compiled float32, eager float64) and
judges every output, the input's and each parameter's gradient, and each buffer after
each step (`bench.judge.judge_tensors`: 1e-4 of eager norm-wise, or no further from
float64 than 3x eager; integer buffers exactly). A `Net` is data: it travels as one line
of JSON, the repro a failure prints:

    python tests/fuzz/cnn.py '<json>' [--backend inductor]
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field

import hypothesis.strategies as st
import torch
import torch.nn.functional as F

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

ACTS = ("relu", "silu", "gelu", "hardswish", "relu6", "sigmoid")
POOLS = ("max3s2p1", "max2", "avg2", "avg3s1p1")
STEPS = 2   # training steps: the second reads the running statistics the first wrote

# What the generator does not draw, because eager torch itself fails there (so no compiled
# result can be judged): torch 2.13.0+cpu's `convolution_backward` of a 1x1 convolution of
# stride 2 whose input is channels-last (8 -> 16 channels, 3 x 8 x 12 x 12) corrupts the
# heap or raises "could not construct a memory descriptor using a format tag" in eager
# alone, within 30 steps in most runs (grad_weight and grad_bias; grad_input alone is
# fine; 16 -> 32, 4 -> 8 and stride 1 are fine):
#     m = torch.nn.Conv2d(8, 16, 1, 2).to(memory_format=torch.channels_last)
#     x = torch.randn(3, 8, 12, 12).contiguous(memory_format=torch.channels_last)
#     m(x.requires_grad_()).sum().backward()   # repeat; glibc aborts, or oneDNN raises
TORCH_BUGS = ("a training network's 1x1 convolutions have stride 1",)


@dataclass
class Net:
    seed: int
    batch: int
    channels: int          # the input's
    size: int              # the input's height and width
    layers: list = field(default_factory=list)   # dicts, see `Body`
    head: int = 0          # classes of a pooled linear head + cross entropy (0: none)
    channels_last: bool = False
    train: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(line: str) -> "Net":
        return Net(**json.loads(line))


def _out(size: int, k: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


class Body(torch.nn.Module):
    """The module of `net.layers`: each layer a dict with one kind key:
    {"conv": out, "k", "s", "p", "d", "g", "bias"}, {"bn": affine, "track"},
    {"act": name}, {"pool": name}, {"save": 1} (remember the value) and {"add": 1} (add
    the last remembered value, of the same shape, then forget it)."""

    def __init__(self, net: Net):
        super().__init__()
        self.kinds = []
        mods = []
        c = net.channels
        for layer in net.layers:
            if "conv" in layer:
                m = torch.nn.Conv2d(c, layer["conv"], layer["k"], layer["s"], layer["p"],
                                    layer["d"], layer["g"], bias=layer["bias"])
                c = layer["conv"]
            elif "bn" in layer:
                m = torch.nn.BatchNorm2d(c, affine=layer["bn"],
                                         track_running_stats=layer["track"])
            else:
                m = None
            self.kinds.append(layer)
            mods.append(m if m is not None else torch.nn.Identity())
        self.mods = torch.nn.ModuleList(mods)
        self.head = torch.nn.Linear(c, net.head) if net.head else None

    def forward(self, x):
        saved = []
        for layer, m in zip(self.kinds, self.mods):
            if "act" in layer:
                x = _ACT[layer["act"]](x)
            elif "pool" in layer:
                x = _POOL[layer["pool"]](x)
            elif "save" in layer:
                saved.append(x)
            elif "add" in layer:
                x = x + saved.pop()
            else:
                x = m(x)
        if self.head is not None:
            x = self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
        return x


_ACT = {"relu": F.relu, "silu": F.silu, "gelu": F.gelu, "hardswish": F.hardswish,
        "relu6": F.relu6, "sigmoid": torch.sigmoid}
_POOL = {"max3s2p1": lambda x: F.max_pool2d(x, 3, 2, 1), "max2": lambda x: F.max_pool2d(x, 2),
         "avg2": lambda x: F.avg_pool2d(x, 2),
         "avg3s1p1": lambda x: F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)}
_POOL_GEOMETRY = {"max3s2p1": (3, 2, 1), "max2": (2, 2, 0), "avg2": (2, 2, 0),
                  "avg3s1p1": (3, 1, 1)}


@st.composite
def nets(draw, max_layers: int = 10, train: bool | None = None) -> Net:
    """A well-formed `Net`: every layer's sizes fit (no empty output), additions join
    values of one shape (a block that keeps the shape, between `save` and `add`)."""
    net = Net(seed=draw(st.integers(0, 2**31 - 1)), batch=draw(st.integers(1, 3)),
              channels=draw(st.sampled_from([1, 2, 3, 4, 8, 16])),
              size=draw(st.sampled_from([3, 4, 5, 7, 8, 12, 16, 20])), channels_last=draw(st.booleans()),
              train=draw(st.booleans()) if train is None else train)
    c, size = net.channels, net.size
    for _ in range(draw(st.integers(1, max_layers))):
        kind = draw(st.sampled_from(["conv", "conv", "conv", "bn", "bn", "act", "pool",
                                     "block"]))
        if kind == "block":
            # a residual block: save, conv (shape kept) [+ bn] [+ act] [+ conv], add
            net.layers.append({"save": 1})
            for _ in range(draw(st.integers(1, 2))):
                k = draw(st.sampled_from([1, 3]))
                g = draw(st.sampled_from([1, c] if c > 1 else [1]))
                net.layers.append({"conv": c, "k": k, "s": 1, "p": k // 2, "d": 1, "g": g,
                                   "bias": draw(st.booleans())})
                if draw(st.booleans()):
                    net.layers.append({"bn": draw(st.booleans()), "track": True})
                if draw(st.booleans()):
                    net.layers.append({"act": draw(st.sampled_from(ACTS))})
            net.layers.append({"add": 1})
        elif kind == "conv":
            k = draw(st.sampled_from([1, 1, 3, 3, 5]))
            # (torch 2.13's CPU backward of a strided 1x1 convolution of a channels-last
            # input corrupts the heap for some channel counts, eager too: TORCH_BUGS)
            s = draw(st.sampled_from([1, 1, 2] if k > 1 or not net.train else [1]))
            p = draw(st.sampled_from([0, k // 2]))
            d = draw(st.sampled_from([1, 1, 1, 2])) if k > 1 else 1
            if _out(size, k, s, p, d) < 1:
                continue
            groups = [1]
            out_choices = [1, 2, 4, 8, 16]
            if c > 1:
                groups.append(c)                 # depthwise (out a multiple of c)
                if c % 2 == 0:
                    groups.append(2)
            g = draw(st.sampled_from(groups))
            out = draw(st.sampled_from([o for o in out_choices + [c, 2 * c] if o % g == 0]))
            net.layers.append({"conv": out, "k": k, "s": s, "p": p, "d": d, "g": g,
                               "bias": draw(st.booleans())})
            c, size = out, _out(size, k, s, p, d)
        elif kind == "bn":
            net.layers.append({"bn": draw(st.booleans()),
                               "track": draw(st.sampled_from([True, True, True, False]))})
        elif kind == "act":
            net.layers.append({"act": draw(st.sampled_from(ACTS))})
        elif kind == "pool":
            name = draw(st.sampled_from(POOLS))
            k, s, p = _POOL_GEOMETRY[name]
            if _out(size, k, s, p) < 1 or size < k:
                continue
            net.layers.append({"pool": name})
            size = _out(size, k, s, p)
    if not any("conv" in layer for layer in net.layers):   # a 1x1 convolution first
        net.layers.insert(0, {"conv": net.channels, "k": 1, "s": 1, "p": 0, "d": 1, "g": 1,
                              "bias": False})
    net.head = draw(st.sampled_from([0, 0, 3])) if net.train else 0
    return net


# --- running and judging -------------------------------------------------------------------
def _instance(net: Net, dtype: torch.dtype, channels_last: bool):
    torch.manual_seed(net.seed)
    model = Body(net)
    for m in model.modules():   # batch norm's parameters and buffers not at their defaults
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                if m.affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.5, 0.5)
                if m.track_running_stats:
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 1.5)
    g = torch.Generator().manual_seed(net.seed + 1)
    xs = [torch.randn(net.batch, net.channels, net.size, net.size, generator=g,
                      dtype=torch.float64) for _ in range(STEPS)]
    targets = [torch.randint(0, max(net.head, 1), (net.batch,), generator=g)
               for _ in range(STEPS)]
    model = model.to(dtype)
    xs = [x.to(dtype) for x in xs]
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        xs = [x.contiguous(memory_format=torch.channels_last) for x in xs]
    model.train(net.train)
    return model, xs, targets


def run(net: Net, model, fn, xs, targets) -> list[tuple[str, torch.Tensor | None, bool]]:
    """(label, value, is_grad) of every step: outputs, gradients, buffers."""
    got = []
    for step, (x, t) in enumerate(zip(xs, targets)):
        if not net.train:
            with torch.no_grad():
                got.append((f"step {step} output", fn(x).clone(), False))
            continue
        x = x.clone().requires_grad_(True)
        for p in model.parameters():
            p.grad = None
        out = fn(x)
        if net.head:
            loss = F.cross_entropy(out, t)
        else:
            w = torch.randn(out.shape, generator=torch.Generator().manual_seed(net.seed + 2),
                            dtype=torch.float64).to(out.dtype)
            loss = (out * w).sum()
        loss.backward()
        got.append((f"step {step} output", out.detach().clone(), False))
        got.append((f"step {step} grad of the input", x.grad, True))
        for name, p in model.named_parameters():
            got.append((f"step {step} grad of {name}", p.grad, True))
        for name, b in model.named_buffers():
            got.append((f"step {step} buffer {name}", b.detach().clone(), False))
    return got


def check(net: Net, backend=None) -> list[str]:
    """Every way the compiled run of `net` is wrong (empty: right). `backend`: another
    torch.compile backend than fusionstitch's (e.g. "inductor", to compare).

    Eager float32 runs the network in three ways, and each is "eager" for the judge
    (`judge_tensors`' other ways): as drawn, in the other memory format (oneDNN sums a
    channels-last convolution in another order), and through AOTAutograd with torch's
    decompositions (`aot_eager_decomp_partition`: batch norm as float32 sums of aten
    ops; torch's own CPU kernel accumulates its statistics in double, so where a
    gradient is nearly zero in exact arithmetic, as a convolution's weight before a
    batch norm of one channel, any float32 formula is many times further from float64
    than that kernel; Inductor's results are too)."""
    import fusionstitch
    from bench.judge import judge_tensors
    torch._dynamo.reset()
    backend = backend or fusionstitch.backend(target="cpu")
    ways = {"eager": (torch.float32, net.channels_last, None),
            "compiled": (torch.float32, net.channels_last, backend),
            "float64": (torch.float64, net.channels_last, None),
            "other layout": (torch.float32, not net.channels_last, None),
            "decomposed": (torch.float32, net.channels_last, "aot_eager_decomp_partition")}
    results, errors = {}, {}
    for way, (dtype, channels_last, compiler) in ways.items():
        model, xs, targets = _instance(net, dtype, channels_last)
        fn = model if compiler is None else torch.compile(model, backend=compiler)
        try:
            results[way] = run(net, model, fn, xs, targets)
        except Exception as e:   # eager's errors are part of the semantics
            errors[way] = e
        if way == "eager" and way in errors:   # (a batch norm of one value per channel)
            break
    if "eager" in errors or "compiled" in errors:
        e, c = errors.get("eager"), errors.get("compiled")
        if e is None:
            return [f"compiled raised {type(c).__name__}: {c}; eager did not"]
        if c is None:
            model, xs, targets = _instance(net, torch.float32, net.channels_last)
            try:
                run(net, model, torch.compile(model, backend=backend), xs, targets)
            except Exception:
                return []
            return [f"eager raised {type(e).__name__}: {e}; compiled did not"]
        return []
    items = []
    for k, (what, c, is_grad) in enumerate(results["compiled"]):
        e, f = results["eager"][k][1], results["float64"][k][1]
        others = [results[w][k][1] for w in ("other layout", "decomposed")]
        items.append((what, c, e, f, is_grad, others))
    bad = judge_tensors(items)
    # an output comes in eager's memory layout (channels-last stays channels-last) where
    # torch's tracing gives eager's (fake tensors may not: a channels-last batch of one
    # channel, whose layout is also row-major, is pooled channels-last by fake tensors and
    # NCHW by eager; no backend can know those)
    traced = _traced_strides(net)
    for (what, c, _), (_, e, _) in zip(results["compiled"], results["eager"]):
        if what.endswith("output") and c.shape == e.shape and \
                _same(traced, e) and not _same(c.stride(), e):
            bad.append(f"{what}: compiled strides {c.stride()}, eager's {e.stride()}")
    return bad


def _same(strides, t: torch.Tensor) -> bool:
    return strides is not None and all(
        a == b for a, b, d in zip(strides, t.stride(), t.shape) if d > 1)


def _traced_strides(net: Net) -> tuple | None:
    """The output's strides as torch's fake tensors give them (what Dynamo's graph records:
    all a backend knows of eager's layout); None where they cannot run the network."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    model, xs, _ = _instance(net, torch.float32, net.channels_last)
    try:
        with torch.no_grad(), FakeTensorMode(allow_non_fake_inputs=True) as mode:
            return tuple(model(mode.from_tensor(xs[0])).stride())
    except Exception:   # noqa: BLE001 - no reference layout: nothing to check
        return None


def repro_line(net: Net) -> str:
    return f"python tests/fuzz/cnn.py '{net.to_json()}'"


def main(argv: list[str]) -> int:
    net = Net.from_json(argv[0])
    print(Body(net))
    bad = check(net, argv[2] if argv[1:2] == ["--backend"] else None)
    print("\n".join(bad) or "ok: matches eager")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
