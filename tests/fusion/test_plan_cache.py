"""The plan cache (fusion/plan_cache.py): hits, misses, bad entries, the knobs."""
import json
import logging
import shutil

import pytest
import torch

import fusionstitch
from fusionstitch.fusion import PLANNERS, make_plan, plan_cache
from fusionstitch.ir.text import parse
from fusionstitch.runtime.cache import clear_memory_caches


def softmax_then_scale(rows: int, cols: int, name: str = "g"):
    return parse(f"""graph {name}(%x: f32[{rows},{cols}]) {{
  %m: f32[{rows},1] = amax.default(%x, [-1], True)
  %s: f32[{rows},{cols}] = sub.Tensor(%x, %m)
  %e: f32[{rows},{cols}] = exp.default(%s)
  %z: f32[{rows},1] = sum.dim_IntList(%e, [-1], True)
  %d: f32[{rows},{cols}] = div.Tensor(%e, %z)
  %y: f32[{rows},{cols}] = mul.Scalar(%d, 3.0)
  return (%y)
}}""")


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSIONSTITCH_PLAN_CACHE", raising=False)
    monkeypatch.delenv("FUSIONSTITCH_FUEL", raising=False)
    clear_memory_caches()
    fusionstitch.reset_stats()
    yield tmp_path
    clear_memory_caches()


def entries(folder) -> list:
    d = folder / "plans"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def counts():
    s = fusionstitch.stats()
    return s["plan_cache_hits"], s["plan_cache_misses"]


def same_groups(a, b):
    return [(g.nodes, g.kind, g.composition) for g in a.groups] == \
        [(g.nodes, g.kind, g.composition) for g in b.groups]


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_second_plan_of_the_same_text_is_a_hit_from_memory_then_from_disk(target,
                                                                          fresh_cache):
    first = make_plan(softmax_then_scale(8, 32, "forward_0"), "stitch", target)
    assert counts() == (0, 1)
    assert "plan_cache" not in dict(first.stages) and "ilp" in dict(first.stages)
    (name,) = entries(fresh_cache)
    assert name.endswith(".json")   # written atomically: no temporary file is left
    # another graph object with the same text, under another name (names are counters)
    again = make_plan(softmax_then_scale(8, 32, "forward_7"), "stitch", target)
    assert counts() == (1, 1)
    assert same_groups(first, again) and again.strategy == "stitch"
    assert again.num_kernels == first.num_kernels and again.graph.name == "forward_7"
    assert list(dict(again.stages)) == ["plan_cache"]
    assert dict(again.stages)["plan_cache"] >= 0
    clear_memory_caches()   # a new process: from disk
    disk = make_plan(softmax_then_scale(8, 32), "stitch", target)
    assert counts() == (2, 1) and same_groups(first, disk)


def test_sizes_strategy_and_target_are_in_the_key(fresh_cache):
    make_plan(softmax_then_scale(8, 32), "stitch", "cpu")
    make_plan(softmax_then_scale(8, 64), "stitch", "cpu")
    make_plan(softmax_then_scale(8, 32), "xla", "cpu")
    make_plan(softmax_then_scale(8, 32), "stitch", "interpret")
    assert counts() == (0, 4)
    assert len(entries(fresh_cache)) == 4
    make_plan(softmax_then_scale(8, 64), "stitch", "cpu")
    assert counts() == (1, 4)


@pytest.mark.parametrize("garbage", [
    "{not json",
    "",
    '{"format": 1}',
    "WRONG_GROUPS",       # valid file, checksum right, groups not a plan of the graph
    "OTHER_KEY",
], ids=["truncated", "empty", "fields-missing", "not-a-plan", "another-key"])
def test_a_bad_entry_is_ignored_and_replanned(garbage, fresh_cache, caplog):
    g = softmax_then_scale(8, 32)
    good = make_plan(g, "stitch", "cpu")
    (name,) = entries(fresh_cache)
    path = fresh_cache / "plans" / name
    entry = json.loads(path.read_text())
    if garbage == "WRONG_GROUPS":
        # every op in one library group: passes the checksum, fails the rebuild
        entry["groups"] = [[["m", "s", "e", "z", "d", "y"], "library", "single"]]
        entry["checksum"] = plan_cache._checksum(entry)
        garbage = json.dumps(entry)
    elif garbage == "OTHER_KEY":
        entry["key"] = "0" * 24
        garbage = json.dumps(entry)
    path.write_text(garbage)
    clear_memory_caches()
    fusionstitch.reset_stats()
    with caplog.at_level(logging.DEBUG, logger="fusionstitch.fusion"):
        again = make_plan(g, "stitch", "cpu")
    assert counts() == (0, 1)
    assert same_groups(good, again) and "ilp" in dict(again.stages)
    if garbage:
        assert "plan cache" in caplog.text
    # planned again and stored again: the next look-up hits
    clear_memory_caches()
    make_plan(g, "stitch", "cpu")
    assert counts() == (1, 1)


def rewrite_groups(cache, g, edit):
    """Plan `g`, then rewrite its cache entry's groups with `edit` (checksum kept valid)."""
    make_plan(g, "stitch", "cpu")
    (name,) = entries(cache)
    path = cache / "plans" / name
    entry = json.loads(path.read_text())
    entry["groups"] = [edit(nodes, kind, comp) for nodes, kind, comp in entry["groups"]]
    entry["checksum"] = plan_cache._checksum(entry)
    path.write_text(json.dumps(entry))
    clear_memory_caches()


def test_a_flipped_group_kind_is_not_trusted(fresh_cache):
    g = softmax_then_scale(8, 32)
    rewrite_groups(fresh_cache, g, lambda nodes, kind, comp:
                   [nodes, "free" if kind == "kernel" else kind, comp])
    plan = make_plan(g, "stitch", "cpu")
    assert counts() == (0, 2) and plan.num_kernels >= 1


def test_an_entry_of_the_wrong_types_is_not_trusted(fresh_cache):
    g = softmax_then_scale(8, 32)
    rewrite_groups(fresh_cache, g, lambda nodes, kind, comp: [nodes, [kind], {"c": comp}])
    make_plan(g, "stitch", "cpu")
    assert counts() == (0, 2)


def test_a_loaded_plan_carries_the_schedules_planning_decided(fresh_cache):
    """The entry stores no schedule: loading gives each kernel group the one planning
    decided (the planner's function, `plan.schedule_of`), which lowering then reads."""
    first = make_plan(softmax_then_scale(8, 32, "forward_0"), "stitch", "cpu")
    clear_memory_caches()   # from disk
    again = make_plan(softmax_then_scale(8, 32, "forward_3"), "stitch", "cpu")
    assert counts() == (1, 1)
    assert [g.schedule for g in again.groups] == [g.schedule for g in first.groups]
    assert all((g.schedule is not None) == (g.kind == "kernel") for g in again.groups)


def test_an_entry_whose_kernel_group_has_no_schedule_is_not_trusted(fresh_cache):
    """A kernel group no schedule covers (rows and columns of one value summed, too large
    to run in stages) cannot be lowered: such an entry is a miss, and planning again
    splits the group."""
    g = parse("""graph g(%x: f32[512,256]) {
  %e: f32[512,256] = exp.default(%x)
  %r: f32[512] = sum.dim_IntList(%e, [1])
  %c: f32[256] = sum.dim_IntList(%e, [0])
  return (%r, %c)
}""")
    make_plan(g, "stitch", "cpu")
    (name,) = entries(fresh_cache)
    path = fresh_cache / "plans" / name
    entry = json.loads(path.read_text())
    entry["groups"] = [[["e", "r", "c"], "kernel", "block"]]
    entry["checksum"] = plan_cache._checksum(entry)
    path.write_text(json.dumps(entry))
    clear_memory_caches()
    fusionstitch.reset_stats()
    plan = make_plan(g, "stitch", "cpu")
    assert counts() == (0, 1)
    assert ("e", "r", "c") not in [grp.nodes for grp in plan.groups]
    assert all(grp.schedule is not None for grp in plan.groups if grp.kind == "kernel")


def test_a_cache_folder_that_cannot_be_made_only_costs_the_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(blocker))
    for _ in range(2):
        plan = make_plan(softmax_then_scale(8, 32), "stitch", "cpu")
    assert plan.num_kernels >= 1
    assert counts() == (1, 1)   # the memory layer still works


@pytest.mark.parametrize("value", ["0", "off", "false"])
def test_the_knob_turns_the_cache_off(value, fresh_cache, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_PLAN_CACHE", value)
    for _ in range(2):
        plan = make_plan(softmax_then_scale(8, 32), "stitch", "cpu")
        assert "ilp" in dict(plan.stages)
    assert counts() == (0, 0) and entries(fresh_cache) == []


def test_fuel_and_a_replaced_planner_bypass_the_cache(fresh_cache, monkeypatch):
    g = softmax_then_scale(8, 32)
    full = make_plan(g, "stitch", "cpu")           # stored
    unfused = make_plan(g, "stitch", "cpu", fuel=0)
    assert unfused.num_kernels > full.num_kernels   # not the stored plan
    monkeypatch.setitem(PLANNERS, "stitch", PLANNERS["none"])
    assert make_plan(g, "stitch", "cpu").num_kernels == unfused.num_kernels
    assert counts() == (0, 1) and len(entries(fresh_cache)) == 1


TARGET = "cpu" if shutil.which("g++") else "interpret"


def test_a_compiled_function_runs_the_same_from_the_cache(fresh_cache):
    lin = torch.nn.Linear(16, 16)

    def f(x):
        return torch.softmax(torch.tanh(lin(x)) * 2, -1).sum(0)

    x = torch.randn(8, 16, requires_grad=True)
    runs = []
    for _ in range(2):   # cold, then a warm start: memory caches cleared, disk kept
        torch._dynamo.reset()
        clear_memory_caches()
        fusionstitch.reset_stats()
        compiled = torch.compile(f, backend=fusionstitch.backend(target=TARGET))
        x.grad = None
        lin.zero_grad()
        out = compiled(x)
        out.sum().backward()
        runs.append((out.detach(), x.grad.clone(), lin.weight.grad.clone(),
                     fusionstitch.stats()))
    (out0, gx0, gw0, s0), (out1, gx1, gw1, s1) = runs
    assert s0["plan_cache_hits"] == 0 and s0["plan_cache_misses"] == 2   # forward, backward
    assert s1["plan_cache_hits"] == 2 and s1["plan_cache_misses"] == 0
    for key in ("kernels_launched", "library_calls", "fallbacks"):
        assert s0[key] == s1[key], key
    assert torch.equal(out0, out1) and torch.equal(gx0, gx1) and torch.equal(gw0, gw1)
    torch.testing.assert_close(out0, f(x).detach())


def test_explain_reports_the_look_up_time_of_a_hit(fresh_cache):
    def f(x):
        return torch.softmax(x, -1) * 2

    x = torch.randn(4, 8)
    torch._dynamo.reset()
    cold = fusionstitch.explain(f, x, target="cpu")
    torch._dynamo.reset()
    warm = fusionstitch.explain(f, x, target="cpu")
    assert "ilp" in cold.graphs[0].stages
    assert list(warm.graphs[0].stages) == ["plan_cache"]
    assert warm.num_kernels == cold.num_kernels and warm.bytes_moved == cold.bytes_moved
    assert 0 < warm.planning_seconds
