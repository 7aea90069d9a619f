"""The stitch planner with the performance library behind it (fusionstitch/tune): the plan
follows planted measured times both ways, ignores other machines' times and the library
under FUSIONSTITCH_TUNE=off, FUSIONSTITCH_TUNE=1 measures once and a warm start in a fresh
process measures nothing and plans the same, and tuned programs compute what eager does."""
import json
import os
import subprocess
import sys

import pytest
import torch

import fusionstitch
from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse
from fusionstitch.runtime.cache import clear_memory_caches
from fusionstitch.tune import library
from fusionstitch.tune.key import PatternKey, pattern_key

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WHOLE, SUB_EXP = frozenset("msezd"), frozenset("se")


def softmax(rows: int = 64, cols: int = 1000):
    return parse(f"""graph softmax(%x: f32[{rows},{cols}]) {{
  %m: f32[{rows},1] = amax.default(%x, [-1], True)
  %s: f32[{rows},{cols}] = sub.Tensor(%x, %m)
  %e: f32[{rows},{cols}] = exp.default(%s)
  %z: f32[{rows},1] = sum.dim_IntList(%e, [-1], True)
  %d: f32[{rows},{cols}] = div.Tensor(%e, %z)
  return (%d)
}}""")


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    for knob in ("FUSIONSTITCH_TUNE", "FUSIONSTITCH_PLAN_CACHE", "FUSIONSTITCH_FUEL"):
        monkeypatch.delenv(knob, raising=False)
    clear_memory_caches()
    fusionstitch.reset_stats()
    yield tmp_path
    clear_memory_caches()


def groups(plan) -> list[frozenset]:
    return [frozenset(g.nodes) for g in plan.groups]


def plant(graph, target: str, pattern, fused: float, split: float) -> None:
    k = pattern_key(graph, pattern)
    library.record(target, [(k, "fused", fused, 9), (k, "split", split, 9)])


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_plan_follows_planted_times_both_ways(target):
    g = softmax()
    assert groups(make_plan(g, "stitch", target)) == [WHOLE]     # the model: one kernel
    # measured: the whole softmax is slower fused than its ops alone, and sub+exp fused
    # is far faster than apart -> the plan splits, and fuses sub+exp (the model did not)
    plant(g, target, WHOLE, fused=1e-3, split=1e-4)
    plant(g, target, SUB_EXP, fused=1e-4, split=1e-2)
    plan = make_plan(g, "stitch", target)   # the plan cache's key holds the library's digest
    assert WHOLE not in groups(plan) and SUB_EXP in groups(plan)
    assert fusionstitch.stats()["tune_hits"] >= 2
    assert fusionstitch.stats()["tune_measurements"] == 0   # TUNE=0: nothing measured


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_plan_keeps_a_fusion_measured_faster(target):
    g = softmax()
    plant(g, target, WHOLE, fused=1e-4, split=1e-3)
    assert groups(make_plan(g, "stitch", target)) == [WHOLE]


def test_times_of_another_machine_or_under_tune_off_are_not_used(monkeypatch):
    g = softmax()
    plant(g, "cpu", WHOLE, fused=1e-3, split=1e-4)
    monkeypatch.setenv("FUSIONSTITCH_TUNE", "off")
    assert groups(make_plan(g, "stitch", "cpu")) == [WHOLE]
    monkeypatch.delenv("FUSIONSTITCH_TUNE")
    assert WHOLE not in groups(make_plan(g, "stitch", "cpu"))
    import sqlite3
    con = sqlite3.connect(library.library_path())
    with con:
        con.execute("UPDATE times SET machine = 'another machine'")
    con.close()
    fusionstitch.reset_stats()
    assert groups(make_plan(g, "stitch", "cpu")) == [WHOLE]
    assert fusionstitch.stats()["tune_hits"] == 0


def test_default_neither_measures_nor_creates_the_library():
    make_plan(softmax(), "stitch", "cpu")
    assert not library.library_path().exists()
    assert fusionstitch.stats()["tune_measurements"] == 0


def test_unknown_tune_value_is_an_error(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_TUNE", "lots")
    with pytest.raises(ValueError, match="FUSIONSTITCH_TUNE"):
        make_plan(softmax(), "stitch", "cpu")


RUN = """
import json, sys, torch, fusionstitch
sys.path.insert(0, "tests/tune")
from test_perflib_planning import softmax
from fusionstitch.fusion import make_plan
from fusionstitch.fusion.plan import plan_none
from fusionstitch.runtime.program import Program
g = softmax(8, 300)
plan = make_plan(g, "stitch", "cpu")
x = [torch.randn(8, 300, generator=torch.Generator().manual_seed(1))]
got, = Program(plan, None, "cpu")(x)
ref, = Program(plan_none(g))(x)
s = fusionstitch.stats()
print(json.dumps({"plan": plan.to_text(), "close": torch.allclose(got, ref, rtol=1e-5, atol=1e-6),
                  "tune": s["tune_measurements"], "hits": s["plan_cache_hits"]}))
"""


def run_fresh(cache, **env) -> dict:
    env = {**os.environ, "FUSIONSTITCH_CACHE_DIR": str(cache), "PYTHONPATH": ROOT,
           "FUSIONSTITCH_STRICT": "1", **env}
    out = subprocess.run([sys.executable, "-c", RUN], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tune_measures_once_and_a_warm_start_measures_nothing(fresh):
    cold = run_fresh(fresh, FUSIONSTITCH_TUNE="1")
    assert cold["tune"] >= 1 and cold["close"]
    # a fresh process that plans again (no plan cache) with the library filled
    warm = run_fresh(fresh, FUSIONSTITCH_TUNE="1", FUSIONSTITCH_PLAN_CACHE="0")
    assert warm["tune"] == 0 and warm["plan"] == cold["plan"] and warm["close"]
    # with the plan cache: the tuned plan was stored under the library as tuning left it
    cached = run_fresh(fresh, FUSIONSTITCH_TUNE="1")
    assert cached["tune"] == 0 and cached["hits"] == 1 and cached["plan"] == cold["plan"]
    # TUNE=0 reads the same library: the same plan
    assert run_fresh(fresh, FUSIONSTITCH_PLAN_CACHE="0")["plan"] == cold["plan"]


def test_tuned_compile_matches_eager(monkeypatch, strict_fresh):
    monkeypatch.setenv("FUSIONSTITCH_TUNE", "1")

    def f(x, y):
        a = torch.sin(x) * y + x
        return torch.softmax(a, dim=-1) * 2.0

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 200, generator=gen), torch.randn(16, 200, generator=gen)
    got = torch.compile(f, backend="fusionstitch")(x, y)
    torch.testing.assert_close(got, f(x, y), rtol=1e-5, atol=1e-6)
    assert fusionstitch.stats()["tune_measurements"] >= 1
    assert fusionstitch.stats()["fallbacks"] == 0


def test_kernels_that_cannot_be_built_are_not_measured(monkeypatch):
    # no compiler: the programs would run their kernel groups through torch, whose times
    # are not the kernels'; nothing is measured or recorded, and the model plans
    monkeypatch.setenv("FUSIONSTITCH_TUNE", "1")
    monkeypatch.setenv("FUSIONSTITCH_CXX", "false")
    monkeypatch.delenv("FUSIONSTITCH_STRICT", raising=False)
    assert groups(make_plan(softmax(), "stitch", "cpu")) == [WHOLE]
    assert fusionstitch.stats()["tune_measurements"] == 0
    assert library.snapshot("cpu").times == {}
