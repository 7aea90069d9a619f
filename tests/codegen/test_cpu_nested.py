"""Flat loops in short rows over three or more static sizes run as nested loops, one per
size (targets/cpp/flat.py `nested`): no division per row, and exactly the elements of x."""
import re

import pytest
import torch

import fusionstitch
from fusionstitch.targets.cpp import printer as cpu
from tests.codegen.test_cpu_refine import _fresh, sources  # noqa: F401 (_fresh: autouse)


def compiled_sources(fn, *args, dynamic):
    """The sources of the kernels `fn` compiled (with its launch bindings) runs."""
    sink: list = []
    c = torch.compile(fn, backend=fusionstitch.backend(target="cpu", _sink=sink),
                      dynamic=dynamic)
    c(*args)
    return c, [cpu.cpp_source(k) for cg in sink for spec in cg.specialisations.values()
               for k in spec.program.lowered.kernels.values()]


def patches(x, k=2):
    """A patchify convolution's input as GEMM rows [N * OH * OW, C * k * k]."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // k, k, w // k, k).permute(0, 2, 4, 1, 3, 5) \
        .reshape(-1, c * k * k)


def ln_patches(x, w, b):
    y = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), x.shape[1:2], w, b)
    return patches(y.permute(0, 3, 1, 2)) * 2


def scale_4x4(x, w):
    return torch.nn.functional.layer_norm(x, x.shape[-2:]) * w


def test_patch_rows_run_as_nested_loops_without_divisions():
    # rows of kw = 2: each row paid five divisions of xo and a vector loop's set-up for
    # two elements (0.19 ms, Inductor's nested loops 0.03 ms on [4, 3, 64, 64])
    (src,) = sources(patches, torch.randn(4, 3, 64, 64))
    d = src[src.index("// dense"):].split("} else {")[0]
    assert "nested loops" in d and "collapse(" in d, d
    assert not re.search(r"xo / |xo % ", d), d


CASES = {
    "patches_nchw": (patches, lambda: (torch.randn(2, 3, 8, 12),)),
    "patches_channels_last": (patches, lambda: (
        torch.randn(2, 5, 6, 10).to(memory_format=torch.channels_last),)),
    "patches_slice": (patches, lambda: (torch.randn(2, 3, 8, 24)[..., ::2],)),
    "patches_3x3": (lambda x: patches(x, 3), lambda: (torch.randn(3, 4, 9, 12),)),
    "ln_patches": (ln_patches, lambda: (torch.randn(2, 16, 8, 8), torch.randn(16),
                                        torch.randn(16))),
    "scale_4x4": (scale_4x4, lambda: (torch.randn(300, 4, 4), torch.randn(4))),
    "odd_rows": (lambda x, w: torch.tanh(x + w), lambda: (torch.randn(7, 33, 5),
                                                          torch.randn(5))),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_nested_loops_values(case, threads):
    fn, make = CASES[case]
    args = make()
    before = [a.clone() for a in args]
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        c = torch.compile(fn, backend=fusionstitch.backend(target="cpu"))
        with torch.no_grad():
            got, want = c(*args), fn(*args)
    finally:
        torch.set_num_threads(old)
    # the same operations in the same order per element: equal values
    torch.testing.assert_close(got, want, rtol=1.3e-6, atol=1e-6)
    for a, b in zip(args, before):
        assert torch.equal(a, b)


def test_symbolic_sizes_keep_rows():
    # sizes that change between launches are no loop bounds of their own: the loops
    # would have to cover x exactly at every launch
    _, static = compiled_sources(patches, torch.randn(2, 3, 8, 12), dynamic=False)
    assert any("nested loops" in s for s in static), static
    torch._dynamo.reset()
    c, srcs = compiled_sources(patches, torch.randn(2, 3, 8, 12), dynamic=True)
    assert srcs and not any("nested loops" in s for s in srcs), srcs
    for shape in [(2, 3, 8, 12), (3, 5, 6, 10)]:
        t = torch.randn(*shape)
        torch.testing.assert_close(c(t), patches(t), rtol=0, atol=0)
