"""compose: packing, thread, warp and block compositions on small groups."""
import pytest

from fusionstitch.ir.text import parse
from fusionstitch.schedule.compose import WARP_ROW_MAX, composition


def _softmax(rows: int, cols: int):
    return parse(f"""graph softmax(%x: f32[{rows},{cols}]) {{
  %m: f32[{rows},1] = amax.default(%x, [-1], True)
  %s: f32[{rows},{cols}] = sub.Tensor(%x, %m)
  %e: f32[{rows},{cols}] = exp.default(%s)
  %t: f32[{rows},1] = sum.dim_IntList(%e, [-1], True)
  %d: f32[{rows},{cols}] = div.Tensor(%e, %t)
  return (%d)
}}""")


def test_elementwise_chain_is_thread():
    g = parse("""graph ew(%x: f32[4,8], %b: f32[8]) {
  %a: f32[4,8] = add.Tensor(%x, %b)
  %r: f32[4,8] = relu.default(%a)
  %v: f32[32] = view.default(%r, [32])
  return (%v)
}""")
    assert composition(g, ["a", "r", "v"]) == "thread"


def test_independent_components_are_packing():
    g = parse("""graph pk(%x: f32[4,8], %y: f32[16]) {
  %a: f32[4,8] = exp.default(%x)
  %b: f32[16] = neg.default(%y)
  return (%a, %b)
}""")
    assert composition(g, ["a", "b"]) == "packing"


def test_packing_wins_even_with_reductions():
    g = parse("""graph pk2(%x: f32[4,8], %y: f32[8,4096]) {
  %a: f32[4] = sum.dim_IntList(%x, [1])
  %b: f32[8] = sum.dim_IntList(%y, [1])
  return (%a, %b)
}""")
    assert composition(g, ["a", "b"]) == "packing"


@pytest.mark.parametrize("cols,expected", [
    (16, "warp"),
    (WARP_ROW_MAX, "warp"),            # the boundary still fits one warp
    (WARP_ROW_MAX + 1, "block"),
    (4 * WARP_ROW_MAX, "block"),
])
def test_row_reduction_warp_or_block_by_row_length(cols, expected):
    assert composition(_softmax(8, cols), ["m", "s", "e", "t", "d"]) == expected


def test_column_reduction_is_block():
    g = parse("""graph col(%x: f32[64,16]) {
  %e: f32[64,16] = exp.default(%x)
  %c: f32[16] = sum.dim_IntList(%e, [0])
  return (%c)
}""")
    assert composition(g, ["e", "c"]) == "block"


def test_long_scalar_reduction_is_block():
    g = parse("""graph sc(%x: f32[64,64]) {
  %e: f32[64,64] = exp.default(%x)
  %s: f32[] = sum.default(%e)
  return (%s)
}""")
    assert composition(g, ["e", "s"]) == "block"


def test_small_batched_gemm_is_block():
    g = parse("""graph bmm(%a: f32[2,8,8], %b: f32[2,8,8]) {
  %m: f32[2,8,8] = bmm.default(%a, %b)
  %r: f32[2,8,8] = relu.default(%m)
  return (%r)
}""")
    assert composition(g, ["m", "r"]) == "block"
