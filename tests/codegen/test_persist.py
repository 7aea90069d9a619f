"""codegen/persist.py: what a persistent reduce program emits per loop, and the Triton
source of both variants (no kernel is run here; test_triton_persistent.py runs them)."""
import pytest
import torch

import fusionstitch
from fusionstitch.codegen import expr as E
from fusionstitch.codegen.kernel import Component, Load, Loop, Op, Reduce, Store, template
from fusionstitch.codegen.lower import lower_group
from fusionstitch.codegen.persist import persistent_loops
from fusionstitch.targets.triton.printer import triton_source


def _kernel(fn, *args):
    rep = fusionstitch.explain(fn, *args, strategy="none", target="interpret")
    g = rep.graphs[0].plan.graph
    names = [n.name for n in g.nodes if n.op not in ("parameter", "constant")]
    return lower_group(g, names, "k")


def _softmax(x):
    return torch.softmax(x, -1)


def test_softmax_loads_the_row_once_and_computes_exp_once():
    (c,) = _kernel(_softmax, torch.randn(4, 32)).components
    bodies = persistent_loops(c)
    assert len(bodies) == len(c.loops) == 3
    loads = [[s for s in b if isinstance(s, Load)] for b in bodies]
    assert [len(ls) for ls in loads] == [1, 0, 0]
    exps = [s for b in bodies for s in b if isinstance(s, Op) and s.op == "exp"]
    assert len(exps) == 1
    # the last loop divides the first loop's exp by the sum and stores, nothing else
    div, store = bodies[2]
    assert isinstance(div, Op) and div.op == "truediv" and div.args[0] == exps[0].var
    assert isinstance(store, Store) and store.value == div.var
    assert store.mask == loads[0][0].mask          # the first loop's mask, renamed


def _row(buffer, index, mask="m"):
    return Load(f"ld_{buffer}", buffer, index, mask, "f32")


def _component(*loops):
    return Component("reduce", E.Sym("ks0", 4), E.Sym("ks1", 8),
                     tuple(Loop(tuple(body)) for body in loops), ())


def test_a_load_after_a_store_that_may_alias_it_is_read_again():
    r = E.Var("r")
    mask = Op("m", "and", ("xmask", "rmask"), "b8")
    loop0 = [mask, Load("a", "in0", r, "m", "f32"), Store("out0", r, "a", "m"),
             Reduce("s0", "sum", "a", "f32")]
    loop1 = [Op("m2", "and", ("xmask", "rmask"), "b8"), Load("b", "in0", r, "m2", "f32"),
             Op("c", "mul", ("b", "s0"), "f32"), Reduce("s1", "sum", "c", "f32")]
    shared = persistent_loops(_component(loop0, loop1))
    assert [type(s).__name__ for s in shared[1]] == ["Op", "Reduce"]
    assert shared[1][0].args == ("a", "s0")
    # out0 may share memory with in0 (an in-place update): loop 1 reads in0 again
    aliased = persistent_loops(_component(loop0, loop1), frozenset({"in0", "out0"}))
    assert [type(s).__name__ for s in aliased[1]] == ["Load", "Op", "Reduce"]
    assert aliased[1][0].mask == "m"


def test_gathered_loads_are_shared_through_their_renamed_index():
    r = E.Var("r")

    def loop(tag, last):
        return [Op(f"m{tag}", "and", ("xmask", "rmask"), "b8"),
                Load(f"i{tag}", "in0", r, f"m{tag}", "i64"),
                Load(f"g{tag}", "in1", E.Value(f"i{tag}"), f"m{tag}", "f32"),
                Op(f"e{tag}", last, (f"g{tag}",), "f32"),
                Reduce(f"s{tag}", "sum", f"e{tag}", "f32")]
    shared = persistent_loops(_component(loop(0, "exp"), loop(1, "exp"), loop(2, "neg")))
    assert [type(s).__name__ for s in shared[1]] == ["Reduce"]
    assert shared[1][0].value == "e0"
    assert [(s.op, s.args) for s in shared[2] if isinstance(s, Op)] == [("neg", ("g0",))]


def _branches(src: str) -> tuple[str, str]:
    """The persistent and the looped branch of a one-component source."""
    head, rest = src.split("if PERSISTENT0:", 1)
    persistent, looped = rest.split("\n    else:", 1)
    return persistent, looped


def test_source_has_both_variants_and_the_persistent_one_has_no_r_loop():
    k = _kernel(lambda x: torch.nn.functional.layer_norm(x, (x.shape[-1],)),
                torch.randn(4, 32))
    for interpret in (True, False):
        src = triton_source(k, interpret)[1]
        assert "PERSISTENT0: tl.constexpr" in src
        persistent, looped = _branches(src)
        # the row is loaded once; besides it, each loop reads the variance's pivot, the row's
        # first element (reductions._variance_passes), with an index that has no r
        row_loads = [ln for ln in persistent.splitlines() if "tl.load(" in ln and "r *" in ln]
        assert "for roffset" not in persistent and len(row_loads) == 1
        assert looped.count("for roffset") == len(k.components[0].loops)
        row_loads = [ln for ln in looped.splitlines() if "tl.load(" in ln and "r *" in ln]
        assert len(row_loads) == len(k.components[0].loops)


def test_template_says_persistent_when_the_target_keeps_the_row():
    k = _kernel(_softmax, torch.randn(4, 32))
    assert "loop r<ks1 x3" in template(k)
    assert "persistent r<ks1 x3" in template(k, lambda c: True)


@pytest.mark.parametrize("persistent", [True, False])
def test_both_variants_compile_for_sm90(persistent, monkeypatch):
    """No GPU here: Triton still compiles the cuda source (the variant the sizes pick) to a
    cubin, which catches type errors the interpreter lets through."""
    from fusionstitch.targets.triton import printer as T
    from tests.codegen._sm90 import compile_sm90
    if not persistent:
        monkeypatch.setattr(T, "PERSISTENT_RNUMEL", -1)

    def f(x, w):
        v, m = torch.var_mean(x, -1, keepdim=True)
        y = torch.softmax(x * w, -1) + (x - m) * torch.rsqrt(v + 1e-5)
        return y * x.amax(-1, keepdim=True) + torch.log_softmax(x, -1)
    for dtype in (torch.float32, torch.float16):
        k = _kernel(f, torch.randn(4, 40, dtype=dtype), torch.randn(40, dtype=dtype))
        assert [T.runs_persistent(c, False) for c in k.components] == [persistent]
        src, out = compile_sm90(k)
        assert "cubin" in out.asm
