"""Tests for the timing benchmark: ``bench/run.py``, ``bench/timing.py``, ``fusionstitch bench``.

Small workloads, few runs: these check the plumbing (JSON fields, ratios, kernel
counts, errors, the picture, the CLI), not the speed.
"""
import json
import math
import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import run as R  # noqa: E402
from bench.timing import percentile, time_interleaved, time_step, versions  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FAST = dict(repeat=3, min_time=0.0)


def _check_files(result):
    data = json.loads(Path(result["json_path"]).read_text())
    assert Path(result["png_path"]).read_bytes()[:8] == PNG_MAGIC
    assert Path(result["png_path"]).with_suffix(".json") == Path(result["json_path"])
    return data


@pytest.fixture(scope="module")
def eager_only(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    return R.run(["softmax_chain", "adam"], "small", "cpu", ("eager",), out_dir=str(out), **FAST)


def test_json_meta(eager_only):
    data = _check_files(eager_only)
    meta = data["meta"]
    assert meta["target"] == "cpu" and meta["size"] == "small"
    assert meta["variants"] == ["eager", "fusionstitch"]
    assert meta["command"].startswith("python -m bench.run --workloads softmax_chain,adam")
    assert meta["date"].endswith("+00:00")  # UTC, ISO
    v = meta["versions"]
    for key in ("torch", "python", "fusionstitch", "cpu", "torch_threads", "date"):
        assert v[key], key
    assert Path(eager_only["json_path"]).name == f"bench_cpu_small_{meta['date'][:10]}.json"


def test_rows_have_medians_ratios_kernels_errors(eager_only):
    data = _check_files(eager_only)
    rows = {r["workload"]: r for r in data["rows"]}
    assert list(rows) == ["softmax_chain", "adam"]
    for name, row in rows.items():
        eager, fs = row["variants"]["eager"], row["variants"]["fusionstitch"]
        for e in (eager, fs):
            assert e["runs"] >= 3
            assert 0 < e["p10_s"] <= e["median_s"] <= e["p90_s"]
            assert e["first_call_s"] > 0
        assert row["speedup"]["fusionstitch_vs_eager"] == pytest.approx(
            eager["median_s"] / fs["median_s"])
        assert row["speedup"]["inductor_vs_eager"] is None  # not requested
        assert fs["kernels"] >= 1 and fs["library_calls"] == 0 and fs["fallbacks"] == 0
        assert eager["ops"] > fs["kernels"]  # the whole chain is fused
        assert fs["max_rel_err"] <= 1e-4 and fs["max_rel_err_f64"] <= 1e-4
        assert fs["warm_start_s"] > 0   # a second compile, kernels from the disk cache
        assert fs["warm_start_kernels_compiled"] == 0
        assert fs["warm_start_graph_cache_hits"] == 1   # inference graphs skip AOTAutograd
        # with torch's caching precompile, Dynamo's tracing is skipped too
        assert fs["warm_start_precompiled_loads"] == 1 and fs["warm_start_precompiled_s"] > 0
    # on the cpu target the recompute limit (Target.max_recompute, targets/cpp.py) splits the
    # chain of five softmaxes where recomputing across row loops would cost more than it saves
    assert rows["softmax_chain"]["variants"]["fusionstitch"]["kernels"] <= 3
    s = data["summary"]
    assert s["fusionstitch_matches_eager"] and not s["failed"]
    assert s["geomean_speedup_fusionstitch_vs_eager"] > 0


def test_table_lists_every_workload(eager_only):
    text = R.table(eager_only["rows"], eager_only["meta"]["variants"])
    assert "softmax_chain" in text and "adam" in text and "fs/eager" in text


def test_table_with_cuda_graphs_but_no_inductor(eager_only):
    # --against eager --cuda-graphs on: no Inductor columns to compare the graphs with (the
    # table raised ValueError on the H100 on 2026-11-27, after the timings were taken)
    variants = ["eager", "fusionstitch", "fusionstitch_cudagraphs"]
    text = R.table(eager_only["rows"], variants)
    assert "fusionstitch_cudagraphs ms" in text and "fs+cg/ind+cg" not in text
    text = R.table(eager_only["rows"], variants[:1] + ["inductor", "inductor_cudagraphs"]
                   + variants[1:])
    assert "fs+cg/ind+cg" in text and "best fs/best ind" in text


def test_cli_bench(tmp_path, capsys):
    from fusionstitch.cli import main
    rc = main(["bench", "--workloads", "softmax_chain", "--size", "small", "--target", "cpu",
               "--against", "eager", "--repeat", "3", "--min-time", "0", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr()
    assert "softmax_chain" in out.out and "geomean" in out.out
    assert "softmax_chain fusionstitch" in out.err  # one progress line per variant
    [path] = tmp_path.glob("bench_cpu_small_*.json")
    data = json.loads(path.read_text())
    assert data["meta"]["command"].startswith("fusionstitch bench --workloads softmax_chain")
    assert path.with_suffix(".png").read_bytes()[:8] == PNG_MAGIC


def test_unknown_workload_is_an_error(tmp_path):
    with pytest.raises(KeyError, match="no_such"):
        R.run(["no_such"], "small", "cpu", ("eager",), out_dir=str(tmp_path), **FAST)


def test_time_step_and_percentile():
    calls = []
    t = time_step(lambda: calls.append(1), warmup=2, repeat=5)
    assert len(calls) == 7 and t["runs"] == 5
    assert 0 <= t["min_s"] <= t["p10_s"] <= t["median_s"] <= t["p90_s"]
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([0.0, 10.0], 10) == pytest.approx(1.0)
    t = time_step(lambda: None, warmup=0, repeat=1, min_time=0.01, max_runs=50)
    assert 1 <= t["runs"] <= 50
    assert versions()["torch_threads"] >= 1
    order = []
    ts = time_interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                          warmup=1, repeat=3)
    # a warm-up round, then rounds in rotating order, each timed run after one untimed
    # run of its own (its steady state, not another variant's caches)
    assert order == ["a", "b"] + ["a", "a", "b", "b"] + ["b", "b", "a", "a"] + \
        ["a", "a", "b", "b"]
    assert ts["a"]["runs"] == ts["b"]["runs"] == 3
    order.clear()
    time_interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                     warmup=0, repeat=2, settle=0)
    assert order == ["a", "b", "b", "a"]


def test_max_rel_err():
    import torch
    a = torch.tensor([1.0, 2.0, 4.0])
    assert R.max_rel_err([a], [a]) == 0.0
    assert R.max_rel_err([a + 0.04], [a]) == pytest.approx(0.01)
    assert R.max_rel_err([torch.tensor([float("nan")])], [torch.tensor([1.0])]) == math.inf
    assert R.max_rel_err([a[:2]], [a]) == math.inf
    # infinities: where the reference has them the result must match them exactly
    inf = float("inf")
    r = torch.tensor([inf, 2.0, 4.0])
    assert R.max_rel_err([torch.tensor([inf, 2.0, 4.04])], [r]) == pytest.approx(0.01)
    assert R.max_rel_err([a], [r]) == math.inf
    assert R.max_rel_err([torch.tensor([1.0, inf, 4.0])], [a]) == math.inf


@pytest.mark.slow
def test_with_inductor(tmp_path):
    why = R.inductor_error()
    if why is not None:
        pytest.skip(f"Inductor cannot compile on this machine's CPU: {why}")
    result = R.run(["softmax_chain"], "small", "cpu", ("eager", "inductor"),
                   out_dir=str(tmp_path), **FAST)
    data = _check_files(result)
    [row] = data["rows"]
    ind = row["variants"]["inductor"]
    assert "error" not in ind
    assert ind["kernels"] >= 1 and ind["max_rel_err"] <= 1e-4
    sp = row["speedup"]
    assert sp["fusionstitch_vs_inductor"] == pytest.approx(
        sp["fusionstitch_vs_eager"] / sp["inductor_vs_eager"])
    assert "geomean_speedup_inductor_vs_eager" in data["summary"]


@pytest.mark.parametrize("fresh", [True, False])
def test_bench_workload_fresh_caches_and_sink(monkeypatch, fresh):
    """Inductor and fusionstitch compile in fresh cache folders unless told otherwise (the
    demo); `sink` collects the graphs the fusionstitch variant compiled; `warmup` reaches
    the timing."""
    import contextlib

    import torch._inductor.utils as inductor_utils
    entered = []

    def recorder(what):
        @contextlib.contextmanager
        def fresh_cache():
            entered.append(what)
            yield
        return fresh_cache
    monkeypatch.setattr(inductor_utils, "fresh_cache", recorder("inductor"))
    monkeypatch.setattr(R, "_fresh_fusionstitch_cache", recorder("fusionstitch"))
    real = R._compile
    monkeypatch.setattr(R, "_compile", lambda v, fn, t, sink=None:
                        fn if v == "inductor" else real(v, fn, t, sink))   # no real compile
    warmups = []
    real_timing = R.time_interleaved
    monkeypatch.setattr(R, "time_interleaved", lambda runs, **kw: (
        warmups.append(kw["warmup"]), real_timing(runs, **kw))[1])
    sink = []
    row = R.bench_workload("softmax_chain", "small", "cpu", ["eager", "inductor", "fusionstitch"],
                           fresh_caches=fresh, sink=sink, measure_warm_start=fresh, warmup=1,
                           **FAST)
    assert entered == (["inductor", "fusionstitch"] if fresh else []) and warmups == [1]
    fs = row["variants"]["fusionstitch"]
    assert "error" not in fs and ("warm_start_s" in fs) == fresh
    assert [cg.kind for cg in sink] == ["inference"] and sink[0].specialisations


def test_cli_bench_model_suite(tmp_path, capsys):
    """--suite models: a transformers model beside eager; its files say so, and the row
    has Dynamo's graphs and graph breaks and fusionstitch's fallbacks."""
    pytest.importorskip("transformers")
    from fusionstitch.cli import main
    rc = main(["bench", "--suite", "models", "--workloads", "gpt2_infer", "--size", "small",
               "--target", "cpu", "--against", "eager", "--repeat", "3", "--min-time", "0",
               "--no-warm-start", "--out", str(tmp_path)])
    assert rc == 0
    assert "gpt2_infer" in capsys.readouterr().out
    [path] = tmp_path.glob("bench_models_cpu_small_*.json")
    data = json.loads(path.read_text())
    assert data["meta"]["suite"] == "models"
    assert data["meta"]["command"].startswith("fusionstitch bench --suite models --workloads")
    fs = data["rows"][0]["variants"]["fusionstitch"]
    assert fs["graphs"] >= 1 and fs["graph_breaks"] == 0 and fs["fallbacks"] == 0
    assert fs["library_calls"] >= 1   # GEMMs and the attention
    assert fs["max_rel_err"] <= 1e-4 and fs["tensors_off"] == 0
    md = (tmp_path / path.name.replace(".json", ".md")).read_text()
    assert data["meta"]["command"] in md and "torch " + data["meta"]["versions"]["torch"] in md
    assert "| gpt2_infer |" in md
