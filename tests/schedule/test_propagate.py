"""propagate: reduction spaces, one consistent space per component, broadcast operands."""
import pytest

from fusionstitch.ir.graph import Graph, Ref
from fusionstitch.ir.text import parse
from fusionstitch.schedule.propagate import (Inconsistent, Space, component_space,
                                             components, escaping_values, group_spaces,
                                             reduced_dims, reduction_space)

RED = parse("""graph red(%x: f32[4,8,16], %y: f32[8,16], %z: f32[4,1,16]) {
  %row: f32[4] = sum.dim_IntList(%x, [1, 2])
  %last: f32[4,8,1] = amax.default(%x, [-1], True)
  %col: f32[16] = sum.dim_IntList(%y, [0])
  %lead: f32[16] = mean.dim(%x, [0, 1])
  %all: f32[] = sum.default(%x)
  %none: f32[] = sum.dim_IntList(%x, None)
  %mid: f32[4,16] = sum.dim_IntList(%x, [1])
  %outer: f32[8] = sum.dim_IntList(%x, [0, 2])
  %one: f32[4] = sum.dim_IntList(%z, [1, 2])
  %onec: f32[16] = sum.dim_IntList(%z, [0])
  %mx: (f32[8], i64[8]) = max.dim(%y, 1)
  %vr: f32[4,8] = var.correction(%x, [2], correction=1)
  return (%row, %last, %col, %lead, %all, %none, %mid, %outer, %one, %onec, %mx, %vr)
}""")


@pytest.mark.parametrize("name,space", [
    ("row", Space("row", 4, 128, 512)),       # trailing dims
    ("last", Space("row", 32, 16, 512)),      # negative dim, keepdim
    ("col", Space("column", 16, 8, 128)),     # leading dim
    ("lead", Space("column", 16, 32, 512)),
    ("all", Space("row", 1, 512, 512)),       # scalar: one row
    ("none", Space("row", 1, 512, 512)),      # dim=None reduces everything
    ("one", Space("row", 4, 16, 64)),         # a size-1 dim does not break contiguity
    ("onec", Space("column", 16, 4, 64)),
    ("mx", Space("row", 8, 16, 128)),         # tuple-valued reduction
    ("vr", Space("row", 32, 16, 512)),        # dims from args, correction as a kwarg
])
def test_reduction_space(name, space):
    assert reduction_space(RED, RED[name]) == space


@pytest.mark.parametrize("name", ["mid", "outer"])
def test_middle_dim_reduction_is_general(name):
    """Reduced dims between kept ones: a strided gather per block (batch-norm stats)."""
    s = reduction_space(RED, RED[name])
    node = RED[name]
    shape = RED[node.args[0].name].type.shape
    assert s.kind == "general" and s.layout[0] == tuple(shape)
    assert s.blocks * s.row == s.numel


def test_general_reductions_with_other_layouts_are_inconsistent():
    g = parse("""graph m(%x: f32[2,3,4]) {
  %e: f32[2,3,4] = exp.default(%x)
  %a: f32[3] = sum.dim_IntList(%e, [0, 2])
  %b: f32[2,4] = sum.dim_IntList(%e, [1])
  return (%a, %b)
}""")
    with pytest.raises(Inconsistent):
        component_space(g, ["e", "a", "b"])


def test_empty_dim_list_reduces_everything():
    g = parse("""graph e(%x: f32[3,4]) {
  %s: f32[] = sum.dim_IntList(%x, [])
  %a: f32[] = amax.default(%x, [])
  return (%s, %a)
}""")
    assert reduction_space(g, g["s"]) == Space("row", 1, 12, 12)
    assert reduction_space(g, g["a"]) == Space("row", 1, 12, 12)


def test_zero_d_input_has_no_dims_to_reduce():
    """aten takes dim 0 or -1 (and keepdim) on a 0-d tensor: nothing is reduced. Reading
    the dim as an index into the empty shape crashed the lowering of every such sum."""
    g = parse("""graph z(%x: f32[], %y: f32[1]) {
  %s: f32[] = sum.dim_IntList(%x, [0], True)
  %m: f32[] = amax.default(%x, [-1])
  %v: f32[] = var.correction(%x, [0], correction=0)
  %o: f32[1] = sum.dim_IntList(%y, [-1], True)
  return (%s, %m, %v, %o)
}""")
    for name in ("s", "m", "v"):
        assert reduced_dims(g, g[name]) == ((), ())
        assert reduction_space(g, g[name]) == Space("row", 1, 1, 1)
    assert reduced_dims(g, g["o"]) == ((1,), (0,))


SOFTMAX = parse("""graph softmax(%x: f32[4,16]) {
  %m: f32[4,1] = amax.default(%x, [-1], True)
  %s: f32[4,16] = sub.Tensor(%x, %m)
  %e: f32[4,16] = exp.default(%s)
  %t: f32[4,1] = sum.dim_IntList(%e, [-1], True)
  %d: f32[4,16] = div.Tensor(%e, %t)
  return (%d)
}""")


def test_softmax_is_one_row_space():
    assert group_spaces(SOFTMAX, ["m", "s", "e", "t", "d"]) == [Space("row", 4, 16, 64)]


def test_per_block_value_may_escape():
    # the row maxima leave the group: per-block values are part of a row schedule
    g = Graph(SOFTMAX.nodes, (Ref("d"), Ref("m")), "softmax2")
    assert escaping_values(g, ["m", "s", "e", "t", "d"]) == {"m", "d"}
    assert group_spaces(g, ["m", "s", "e", "t", "d"]) == [Space("row", 4, 16, 64)]


def test_row_and_column_sum_of_one_tensor_is_inconsistent():
    # layernorm backward: a row sum (per-row statistics) and a column sum (weight
    # gradient) of the same [B, R] product cannot share one Row or Column schedule
    g = parse("""graph lnb(%dy: f32[8,32], %xhat: f32[8,32]) {
  %p: f32[8,32] = mul.Tensor(%dy, %xhat)
  %rs: f32[8,1] = sum.dim_IntList(%p, [1], True)
  %dw: f32[32] = sum.dim_IntList(%p, [0])
  %o: f32[8,32] = sub.Tensor(%p, %rs)
  return (%o, %dw)
}""")
    with pytest.raises(Inconsistent, match="column"):
        group_spaces(g, ["p", "rs", "dw", "o"])
    assert group_spaces(g, ["p", "rs", "o"]) == [Space("row", 8, 32, 256)]
    assert group_spaces(g, ["p", "dw"]) == [Space("column", 32, 8, 256)]


def test_pure_elementwise_is_flat():
    g = parse("""graph ew(%x: f32[4,8], %y: f32[4,8]) {
  %a: f32[4,8] = add.Tensor(%x, %y)
  %b: f32[4,8] = relu.default(%a)
  %c: f32[4,8] = mul.Scalar(%b, 2.0)
  return (%c)
}""")
    assert group_spaces(g, ["a", "b", "c"]) == [Space("flat", 1, 32, 32)]


def test_flat_kernel_writes_smaller_outputs_over_their_own_range():
    """Thread composition: each output is evaluated over its own index range."""
    g = parse("""graph sel(%x: f32[4,8]) {
  %a: f32[4,8] = exp.default(%x)
  %b: f32[8] = select.int(%a, 0, 0)
  return (%a, %b)
}""")
    assert group_spaces(g, ["a", "b"]) == [Space("flat", 1, 32, 32)]


def test_flat_space_is_the_largest_output():
    g = parse("""graph cat(%x: f32[4,8], %y: f32[4,8]) {
  %a: f32[4,8] = exp.default(%x)
  %c: f32[8,8] = cat.default([%a, %y])
  return (%a, %c)
}""")
    assert group_spaces(g, ["a", "c"]) == [Space("flat", 1, 64, 64)]


def test_components_of_different_sizes_are_separate_flat_spaces():
    g = parse("""graph two(%x: f32[4,8], %y: f32[6]) {
  %a: f32[4,8] = exp.default(%x)
  %b: f32[6] = exp.default(%y)
  %c: f32[4,8] = neg.default(%a)
  return (%c, %b)
}""")
    assert group_spaces(g, ["a", "b", "c"]) == [Space("flat", 1, 32, 32),
                                                Space("flat", 1, 6, 6)]


def test_two_independent_components_give_two_spaces():
    g = parse("""graph pk(%x: f32[4,8], %y: f32[8,16]) {
  %a: f32[4,8] = exp.default(%x)
  %r: f32[8] = sum.dim_IntList(%y, [1])
  %b: f32[4,8] = neg.default(%a)
  return (%b, %r)
}""")
    assert components(g, ["a", "r", "b"]) == [["a", "b"], ["r"]]
    assert group_spaces(g, ["a", "r", "b"]) == [Space("flat", 1, 32, 32),
                                                Space("row", 8, 16, 128)]


BCAST = """graph bc(%x: f32[4,16], %bias: f32[16]) {
  %bb: f32[16] = mul.Scalar(%bias, 2.0)
  %o: f32[4,16] = add.Tensor(%x, %bb)
  return (%o{extra})
}"""


def test_internal_broadcast_operand_is_recomputed():
    g = parse(BCAST.replace("{extra}", ""))
    assert escaping_values(g, ["bb", "o"]) == {"o"}
    assert group_spaces(g, ["bb", "o"]) == [Space("flat", 1, 64, 64)]


def test_escaping_broadcast_operand_is_written_over_its_own_range_in_flat():
    g = parse(BCAST.replace("{extra}", ", %bb"))
    assert group_spaces(g, ["bb", "o"]) == [Space("flat", 1, 64, 64)]
    assert component_space(g, ["bb", "o"]) == Space("flat", 1, 64, 64)


def test_broadcast_operand_in_a_row_space():
    g = parse("""graph rb(%x: f32[4,16], %w: f32[16]) {
  %ww: f32[16] = neg.default(%w)
  %y: f32[4,16] = mul.Tensor(%x, %ww)
  %s: f32[4] = sum.dim_IntList(%y, [1])
  return (%s)
}""")
    assert group_spaces(g, ["ww", "y", "s"]) == [Space("row", 4, 16, 64)]
    g2 = Graph(g.nodes, (Ref("s"), Ref("ww")), "rb2")
    with pytest.raises(Inconsistent, match="%ww"):
        group_spaces(g2, ["ww", "y", "s"])


def test_vector_norm_dims_come_after_ord():
    g = parse("""graph vn(%x: f32[4,8]) {
  %n: f32[4] = linalg_vector_norm.default(%x, 2, [1])
  %f: f32[4] = linalg_vector_norm.default(%x, 2.0, [-1])
  %a: f32[] = linalg_vector_norm.default(%x, 2)
  return (%n, %f, %a)
}""")
    assert reduction_space(g, g["n"]) == Space("row", 4, 8, 32)
    assert reduction_space(g, g["f"]) == Space("row", 4, 8, 32)
    assert reduction_space(g, g["a"]) == Space("row", 1, 32, 32)
