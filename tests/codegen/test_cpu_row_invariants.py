"""Values the same for every r of a row are printed once per row, before the loop over r
(targets/cpp/reduce.py `invariant`): a layer norm of gathered rows (embedding + position,
GPT-2's first group) read its pivot through a loaded index in every iteration, which
GCC turned into SIMD gathers: 6-10x the kernel time. IR text in, C++ text out, and the
numbers against torch, empty rows included (nothing hoisted runs for them)."""
import re
import shutil

import pytest
import torch

from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse
from fusionstitch.runtime.program import Program

from test_cpu_reduce_text import source

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")

GATHERED_NORM = """
graph g(%ids: i64[4,16], %w: f32[50,32], %g: f32[32]) {
  %e: f32[4,16,32] = embedding.default(%w, %ids)
  %vm: (f32[4,16,1], f32[4,16,1]) = var_mean.correction(%e, [2], correction=0, keepdim=True)
  %v: f32[4,16,1] = getitem(%vm, 0)
  %m: f32[4,16,1] = getitem(%vm, 1)
  %a: f32[4,16,1] = add.Tensor(%v, 1e-05)
  %r: f32[4,16,1] = rsqrt.default(%a)
  %s: f32[4,16,32] = sub.Tensor(%e, %m)
  %n: f32[4,16,32] = mul.Tensor(%s, %r)
  %o: f32[4,16,32] = mul.Tensor(%n, %g)
  return (%o,)
}
"""


def _loops(src: str) -> list[tuple[str, str]]:
    """(before, inside) per loop over r of the dense version: the lines of the guarded
    block before the `for (... r ...)` line, and the loop's own lines."""
    dense = src.split("// dense")[1].split("} else {")[0]
    out = []
    for part in dense.split("// loop ")[1:]:
        # (a row of known length runs in blocks of lanes: `for (int64_t rb = `)
        head, _, body = re.split(r"(for \(int64_t rb? = )", part, maxsplit=1)
        out.append((head, body.split("const float red")[0]))
    return out


def test_a_gathered_rows_pivot_and_index_are_loaded_once_per_row():
    src = source(GATHERED_NORM)
    loops = _loops(src)
    assert len(loops) == 3, "pivoted mean, variance, normalise"
    for before, inside in loops:
        assert before.lstrip().split("\n")[1].strip() == "if (rnumel > 0) {", before
        # the loaded row index (ids[x]) and the pivot w[ids[x] * stride]: before the loop
        assert re.search(r"= \w+ \? in0\[x\] : 0;", before), before
        assert "in0[x]" not in inside, "no load at an x-only index inside the loop"
        assert "__builtin_isinf" not in inside, "the pivot's check runs once per row"
        # (the row's stride a constant: index.fixed_strides)
        assert re.search(r"in1\[\(32 \* \w+\) \+ r\]", inside), "the row read along r"
    # the mean and rstd of the row are computed before the last loop, not per element
    assert "__builtin_sqrtf" in loops[2][0] and "__builtin_sqrtf" not in loops[2][1]


def test_nothing_moves_when_every_value_depends_on_r():
    src = source("""
graph s(%x: f32[8,32]) {
  %e: f32[8,32] = exp.default(%x)
  %s: f32[8] = sum.dim_IntList(%e, [1])
  return (%s,)
}
""")
    assert "if (rnumel > 0) {" not in src.split("// dense")[1].split("} else {")[0]


@needs_cxx
@pytest.mark.parametrize("rows", [16, 1])
@pytest.mark.parametrize("width", [32, 0, 1, 300])
def test_gathered_norms_match_torch(rows, width):
    """Embedding rows normalised, on the cpu target: equal to torch within float32
    rounding of a two-pass variance, for rows of 0 (nothing hoisted may run: the weight
    has no element to load), 1 and 300 elements."""
    text = (GATHERED_NORM.replace("[4,16", f"[4,{rows}").replace("[50,32]", f"[50,{width}]")
            .replace(",32]", f",{width}]").replace("f32[32]", f"f32[{width}]"))
    g = parse(text)
    prog = Program(make_plan(g, "stitch", "cpu"), target="cpu")
    gen = torch.Generator().manual_seed(width)
    ids = torch.randint(0, 50, (4, rows), generator=gen)
    w = torch.randn(50, width, generator=gen) * 3 + 1
    gamma = torch.randn(width, generator=gen)
    want = torch.nn.functional.layer_norm(torch.nn.functional.embedding(ids, w), (width,),
                                          eps=1e-5) * gamma
    for _ in range(2):       # the interpreter, then the generated per-call code
        got = prog([ids, w, gamma])[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_a_buffer_an_output_may_share_stays_read_in_the_loop():
    """A load of a buffer in `Kernel.may_alias` (an output stored into an input's memory)
    is not moved before the loop, nor is anything computed from it: the loop's own
    stores could change what it reads."""
    import dataclasses
    import os
    from unittest import mock
    from fusionstitch.codegen.lower import lower_group
    from fusionstitch.ir.graph import CONSTANT, PARAMETER
    from fusionstitch.targets.cpp.printer import cpp_source
    g = parse(GATHERED_NORM)
    ops = [n.name for n in g.nodes if n.op not in (PARAMETER, CONSTANT)]
    k = lower_group(g, ops, "k")
    ids = next(b.name for b in k.inputs if b.value == "ids")
    k = dataclasses.replace(k, may_alias=frozenset({ids}))
    with mock.patch.dict(os.environ, {"FUSIONSTITCH_CPU_VECMATH": "0"}):
        src = cpp_source(k, "fs_k")
    for before, inside in _loops(src):
        assert "in0[x]" in inside and "in0[x]" not in before
