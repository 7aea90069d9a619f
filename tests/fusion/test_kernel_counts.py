"""Kernel-count goldens per zoo workload and strategy (small size), and planning targets.

Regenerate the goldens after an intended planner change with
    FUSIONSTITCH_UPDATE_GOLDENS=1 pytest tests/fusion/test_kernel_counts.py
and say in the commit why the counts moved.

The goldens are made with CI's torch (PINNED). Another torch version traces some
graphs differently (other decompositions: on 2.11, word2vec's embedding backward and
adam's in-place updates give the unfused strategies other counts), so its differences
live in ``golden_kernel_counts_torch<X.Y>.json`` beside the main file, written by the
same command run under that torch.
"""
import json
import os
from functools import lru_cache

import pytest
import torch

from bench import workloads as W
from bench.plan_table import capture, geomean
from fusionstitch.analysis.cost import plan_bytes
from fusionstitch.fusion import make_plan

GOLDEN = os.path.join(os.path.dirname(__file__), "golden_kernel_counts.json")
STRATEGIES = ("none", "xla", "stitch")
PINNED = "2.13"   # CI's torch (requirements-dev.txt): the main golden file's
TORCH = ".".join(torch.__version__.split(".")[:2])


def override_path(version: str = TORCH) -> str:
    return GOLDEN.replace(".json", f"_torch{version}.json")


@lru_cache(maxsize=None)
def graphs(name):
    return tuple(capture(name, "small"))


@lru_cache(maxsize=None)
def plans(name, strategy):
    return tuple(make_plan(g, strategy, "cuda") for g in graphs(name))


@lru_cache(maxsize=None)
def counts(name, strategy):
    plans_ = plans(name, strategy)
    return (sum(p.num_kernels for p in plans_), sum(p.num_library_calls for p in plans_),
            sum(plan_bytes(p) for p in plans_))


def _read(path):
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def load_golden(version: str = TORCH):
    """The main goldens, with this torch version's differences (if any) laid over them."""
    golden = _read(GOLDEN)
    if version != PINNED:
        for name, by_strategy in _read(override_path(version)).items():
            golden.setdefault(name, {}).update(by_strategy)
    return golden


def test_goldens():
    got = {name: {s: list(counts(name, s)[:2]) for s in STRATEGIES} for name in W.names()}
    if os.environ.get("FUSIONSTITCH_UPDATE_GOLDENS"):
        if TORCH == PINNED:
            path, data = GOLDEN, got
        else:   # only what differs from the main goldens
            main = _read(GOLDEN)
            path, data = override_path(), {
                n: {s: c for s, c in by.items() if main.get(n, {}).get(s) != c}
                for n, by in got.items()}
            data = {n: by for n, by in data.items() if by}
        with open(path, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        pytest.skip(f"goldens rewritten: {os.path.basename(path)}")
    golden = load_golden()
    diffs = [f"{n}/{s}: golden {golden.get(n, {}).get(s)} now {got[n][s]}"
             for n in got for s in STRATEGIES if golden.get(n, {}).get(s) != got[n][s]]
    assert not diffs, "kernel counts changed:\n" + "\n".join(diffs)


def test_planning_targets_small():
    """The issue's targets, checked on the small zoo (bench/results has full size)."""
    rows = {n: {s: counts(n, s) for s in STRATEGIES} for n in W.names()}
    for n, r in rows.items():
        assert r["xla"][0] < r["none"][0], f"{n}: xla does not beat none"
        assert r["stitch"][2] <= r["xla"][2], f"{n}: stitch moves more bytes than xla"
    for n, r in rows.items():
        assert r["stitch"][0] <= r["xla"][0], f"{n}: stitch plans more kernels than xla"
    ratio = geomean([r["stitch"][0] / max(r["xla"][0], 1) for r in rows.values()])
    # Plans are what the code generators can lower (fusion/codegen_legal.py); for target
    # cuda that includes small GEMMs inside kernels (block composition, codegen/batch.py).
    # Issue 3's target is 0.5; 0.314 is achieved (0.68 while GEMMs were library calls).
    assert ratio <= 0.32, f"geomean stitch/xla kernels {ratio:.3f} > 0.32"


def test_every_kernel_group_carries_the_schedule_the_analysis_gives():
    """The schedule a plan decided for each kernel group (`Group.schedule`, which lowering
    reads) is the analysis' (schedule/propagate.py's `group_schedule`), on every zoo
    workload and strategy; other groups carry none."""
    from fusionstitch.schedule.propagate import group_schedule
    for name in W.names():
        for strategy in STRATEGIES:
            for p in plans(name, strategy):
                for g in p.groups:
                    want = group_schedule(p.graph, g.nodes) if g.kind == "kernel" else None
                    assert g.schedule == want, f"{name}/{strategy}: group #{g.id}"


@pytest.mark.parametrize("strategy", ["xla", "stitch"])
def test_plans_are_deterministic(strategy):
    for name in ("layernorm_softmax_gelu", "resnet_bottleneck_train", "adam"):
        for g in graphs(name):
            assert make_plan(g, strategy, "cuda").to_text() == \
                make_plan(g, strategy, "cuda").to_text()


def test_stitch_plan_text_is_identical_across_processes():
    """No dependence on hash randomisation: two processes, two hash seeds, same bytes."""
    import subprocess
    import sys
    code = ("from bench.plan_table import capture\n"
            "from fusionstitch.fusion import make_plan\n"
            "for g in capture('layernorm_softmax_gelu', 'small'):\n"
            "    print(make_plan(g, 'stitch', 'cuda').to_text())\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    outs = [subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                           text=True, timeout=300,
                           env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": root}).stdout
            for seed in ("0", "12345")]
    assert outs[0] and outs[0] == outs[1]
