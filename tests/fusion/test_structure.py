"""Structural verdicts (fusion/structure.py): a verdict is shared only by sets of the
same structure, a shared refusal names the asker's nodes, and remembering verdicts by
structure never changes a plan (zoo workloads and random DAGs, with and without)."""
import pytest
from hypothesis import HealthCheck, given, settings

from bench.plan_table import capture
from fusionstitch.fusion import make_plan, structure
from fusionstitch.fusion.legality import Decision
from fusionstitch.fusion.stitch import plan_stitch
from fusionstitch.fusion.structure import StructuralMemo
from fusionstitch.ir.text import parse

from test_plan_properties import dags

TWO_CHAINS = parse("""graph two(%x: f32[8,16], %y: f32[8,16], %z: f32[8,16]) {
  %a: f32[8,16] = exp.default(%x)
  %b: f32[8,16] = mul.Tensor(%a, 2.0)
  %c: f32[8,16] = exp.default(%y)
  %d: f32[8,16] = mul.Tensor(%c, 2.0)
  %e: f32[8,16] = exp.default(%z)
  %f: f32[8,16] = mul.Tensor(%e, 2)
  %g: f32[8,16] = exp.default(%z)
  %h: f32[8,16] = mul.Tensor(%g, 2.0)
  %k: f32[8,16] = add.Tensor(%g, %h)
  return (%b, %d, %f, %k)
}""")


def test_same_structure_same_key_other_names():
    memo = StructuralMemo(TWO_CHAINS)
    (ab, placed_ab), (cd, placed_cd) = memo.key({"a", "b"}), memo.key({"c", "d"})
    assert ab == cd and placed_ab[:2] == ["a", "b"] and placed_cd[:2] == ["c", "d"]


@pytest.mark.parametrize("other", [{"e", "f"},    # 2 (an int) where the others have 2.0
                                   {"g", "h"}])   # %g is also read outside the set
def test_what_the_verdict_reads_is_in_the_key(other):
    memo = StructuralMemo(TWO_CHAINS)
    assert memo.key({"a", "b"})[0] != memo.key(other)[0]


def test_a_shared_refusal_names_the_askers_nodes():
    memo = StructuralMemo(TWO_CHAINS)
    calls = []

    def decide(names):
        def run():
            calls.append(names)
            first = sorted(names)[0]
            return Decision.forbid(f"%{first} (exp.default) cannot: because")
        return run

    d1 = memo.verdict(memo.key({"a", "b"}), "q", decide({"a", "b"}))
    d2 = memo.verdict(memo.key({"c", "d"}), "q", decide({"c", "d"}))
    assert calls == [{"a", "b"}]
    assert d1.reason == "%a (exp.default) cannot: because"
    assert d2.reason == "%c (exp.default) cannot: because"
    # another question about the same structure is asked afresh
    memo.verdict(memo.key({"c", "d"}), "other", decide({"c", "d"}))
    assert len(calls) == 2


def test_a_refusal_naming_a_node_outside_its_set_is_not_shared():
    memo = StructuralMemo(TWO_CHAINS)
    n = []

    def decide():
        n.append(1)
        return Decision.forbid("%k reads it")   # %k is in neither set

    memo.verdict(memo.key({"a", "b"}), "q", decide)
    memo.verdict(memo.key({"c", "d"}), "q", decide)
    assert len(n) == 2


def _plans_without_memo(monkeypatch, graph, target, plan=plan_stitch):
    with monkeypatch.context() as m:
        m.setattr(structure.StructuralMemo, "verdict",
                  lambda self, shape, question, decide: decide())
        return plan(graph, target)


def _made(graph, target):
    """The plan that runs (code-generation legality included: its verdicts are shared
    by structure too)."""
    return make_plan(graph, "stitch", target, use_cache=False)


def _same(a, b):
    return ([(g.nodes, g.kind, g.composition) for g in a.groups]
            == [(g.nodes, g.kind, g.composition) for g in b.groups])


@pytest.mark.parametrize("name", ["lstm", "transformer_encoder", "layernorm_softmax_gelu",
                                  "adam", "resnet_bottleneck_train"])
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_zoo_plans_do_not_change(monkeypatch, name, target):
    for graph in capture(name, "small"):
        assert _same(_made(graph, target), _plans_without_memo(monkeypatch, graph, target, _made))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(dags())
def test_random_dag_plans_do_not_change(monkeypatch, graph):
    for target in ("cpu", "cuda"):
        assert _same(plan_stitch(graph, target), _plans_without_memo(monkeypatch, graph, target))
