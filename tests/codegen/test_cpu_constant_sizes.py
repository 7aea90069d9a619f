"""The cpu target prints the sizes of a graph of static shapes as compile-time constants
(targets/cpp/printer.py, `kernel.constant_syms`): the signature keeps every sym (the
launch path passes them all), the body declares the constant ones `constexpr`, strides
stay parameters, and the numbers are torch's at every shape (size-1 and size-0 dims, and
inputs whose strides fail the dense version's test). Symbolic programs keep their sizes as
parameters: tests/frontend/test_dynamic.py."""
import re

import pytest
import torch

import fusionstitch
from fusionstitch.codegen.kernel import constant_syms
from fusionstitch.codegen.lower import lower_group
from fusionstitch.fusion.plan import KERNEL
from fusionstitch.targets.cpp import printer as cpu


pytestmark = pytest.mark.usefixtures("strict_fresh")   # tests/conftest.py


def kernels_of(fn, *args):
    with torch.no_grad():
        rep = fusionstitch.explain(fn, *args, target="cpu")
    return [lower_group(g.plan.graph, grp.nodes, "k")
            for g in rep.graphs for grp in g.plan.groups if grp.kind == KERNEL]


def per_channel(x, w, b):
    """A batch norm's affine part over NCHW: a per-channel parameter broadcast, whose
    index divides by H * W and takes the channel modulo C."""
    return torch.relu(x * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1))


def channel_stats(x):
    return torch.var_mean(x, (0, 2, 3), correction=0)


def rows(x):
    return torch.softmax(x, -1) * x.sum(1, keepdim=True)


def test_static_sizes_are_constants_and_strides_parameters():
    x, w, b = torch.randn(2, 16, 8, 8), torch.randn(16), torch.randn(16)
    [k] = kernels_of(per_channel, x, w, b)
    consts = constant_syms(k)
    assert consts and set(consts.values()) >= {16, 8}
    src = cpu.cpp_source(k)
    head, body = src.split(") {", 1)
    for name, v in consts.items():
        assert f"constexpr int64_t {name} = {v};" in body
        assert f"int64_t /* {name} = {v} */," in head     # its place in the signature
    # no size is a parameter: the only named integer parameters are strides
    named = re.findall(r"int64_t (\w+)[,)]", head)
    assert named and all(re.fullmatch(r"in\d+_s\d+", n) for n in named), named
    # the dense version's test compares the strides with the (constant) sizes
    assert re.search(r"if \(in0_s0 == ks\d+ \* ks\d+ \* ks\d+", body)
    # every sym is still passed at launch, in order
    assert len(re.findall(r"^    int64_t", head, re.M)) == len(k.syms)


def test_a_kernel_without_bindings_keeps_its_syms_as_parameters():
    """A Kernel built by hand (no bindings) is called with sym values its caller chooses."""
    import dataclasses
    [k] = kernels_of(per_channel, torch.randn(2, 4, 3, 3), torch.randn(4), torch.randn(4))
    bare = dataclasses.replace(k, bindings=())
    assert constant_syms(bare) == {}
    assert "constexpr" not in cpu.cpp_source(bare)


SHAPES = [(2, 3, 4, 5), (1, 3, 1, 5), (2, 1, 4, 1), (1, 1, 1, 1), (0, 3, 4, 5), (2, 3, 0, 2)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_numbers_match_torch_at_each_shape(shape):
    n, c, h, w_ = shape
    x, w, b = torch.randn(shape), torch.randn(c), torch.randn(c)
    # the same shape in other layouts: the general version, whose index arithmetic
    # reads the constants and the run-time strides together
    layouts = [x, x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2),
               torch.randn(n, c, h, 2 * w_)[..., ::2]]
    for fn, args in ((per_channel, (w, b)), (channel_stats, ()), (rows, ())):
        for t in layouts:
            torch._dynamo.reset()
            f = torch.compile(fn, backend=fusionstitch.backend(target="cpu"), dynamic=False)
            got, want = f(t, *args), fn(t, *args)
            for g, r in zip(got if isinstance(got, tuple) else (got,),
                            want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5, equal_nan=True)
    # (a reduction over no element is left to torch, counted: not this test's subject)
    if n * c * h * w_:
        assert fusionstitch.stats()["fallbacks"] == 0
    assert fusionstitch.stats()["kernels_launched"] > 0
