"""Tests for the bench's GPU-side options that run anywhere: which variants a run times
(CUDA graphs), the speed-ups and summaries over them, bf16 runs, and memory-bound rows'
bandwidths. The GPU runs themselves need a GPU (see issue 4's session plan)."""
import json
import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import run as R  # noqa: E402

FAST = dict(repeat=3, min_time=0.0)


def test_bench_variants():
    assert R.bench_variants("cpu", ["eager", "inductor"]) == ["eager", "inductor", "fusionstitch"]
    assert R.bench_variants("cuda", ["eager", "inductor"]) == list(R.VARIANTS)
    assert R.bench_variants("cuda", ["eager"]) == ["eager", "fusionstitch",
                                                   "fusionstitch_cudagraphs"]
    assert R.bench_variants("cuda", ["inductor"], "off") == ["eager", "inductor", "fusionstitch"]
    assert R.bench_variants("cuda", ["inductor_cudagraphs"], "off") == [
        "eager", "inductor_cudagraphs", "fusionstitch"]
    with pytest.raises(ValueError, match="need the cuda target"):
        R.bench_variants("cpu", ["eager"], "on")
    with pytest.raises(ValueError, match="need the cuda target"):
        R.bench_variants("cpu", ["inductor_cudagraphs"], "off")
    with pytest.raises(ValueError, match="--against takes"):
        R.bench_variants("cpu", ["xla"])
    with pytest.raises(ValueError, match="auto, on or off"):
        R.bench_variants("cpu", ["eager"], "yes")


def test_speedups_like_for_like_and_best_of_each():
    med = {"eager": 8.0, "inductor": 4.0, "inductor_cudagraphs": 2.0,
           "fusionstitch": 2.0, "fusionstitch_cudagraphs": 1.6}
    sp = R.speedups(med)
    assert sp["fusionstitch_vs_eager"] == 4.0 and sp["inductor_cudagraphs_vs_eager"] == 4.0
    assert sp["fusionstitch_vs_inductor"] == 2.0
    assert sp["fusionstitch_cudagraphs_vs_inductor_cudagraphs"] == pytest.approx(1.25)
    assert sp["fusionstitch_best_vs_inductor_best"] == pytest.approx(1.25)
    # without the CUDA-graph variants: the keys of earlier results, nothing more
    sp = R.speedups({"eager": 2.0, "fusionstitch": 1.0})
    assert sp == {"inductor_vs_eager": None, "fusionstitch_vs_eager": 2.0,
                  "fusionstitch_vs_inductor": None}
    # a failed variant (no median) gives None, not an error
    sp = R.speedups({**med, "fusionstitch_cudagraphs": None})
    assert sp["fusionstitch_cudagraphs_vs_inductor_cudagraphs"] is None
    assert sp["fusionstitch_best_vs_inductor_best"] == pytest.approx(1.0)


def _row(name, fs_k, ind_k, fs_err=1e-6, fs_s=1.0, ind_s=1.5):
    v = {"eager": {"median_s": 3.0, "max_rel_err_f64": 1e-7},
         "inductor": {"median_s": ind_s, "prof_kernels": ind_k},
         "fusionstitch": {"median_s": fs_s, "prof_kernels": fs_k, "max_rel_err": fs_err,
                          "max_rel_err_f64": fs_err}}
    return {"workload": name, "variants": v, "speedup": R.speedups(
        {k: e["median_s"] for k, e in v.items()})}


def test_summary_profiler_kernel_ratio_and_worst_speedup():
    s = R.summarise([_row("a", 2, 10), _row("b", 6, 10, ind_s=0.9)])
    assert s["prof_kernels_fusionstitch_over_inductor"] == pytest.approx(8 / 20)
    assert s["prof_kernels_fusionstitch_over_inductor_max"] == pytest.approx(0.6)
    assert s["min_speedup_fusionstitch_vs_inductor"] == pytest.approx(0.9)
    assert s["geomean_speedup_fusionstitch_vs_inductor"] == pytest.approx((1.5 * 0.9) ** 0.5)
    assert s["fusionstitch_matches_eager"] and not s["fusionstitch_mismatches"]


def test_bf16_tolerance():
    # bf16: 2e-2 against eager, or at most twice eager's distance from float64
    row = _row("a", 1, 1, fs_err=1.5e-2)
    assert not R.summarise([row])["fusionstitch_matches_eager"]          # fp32: far off
    assert R.summarise([row], "bfloat16")["fusionstitch_matches_eager"]
    eager = {"max_rel_err_f64": 4e-2}
    assert R.matches_eager({"max_rel_err": 9e-2, "max_rel_err_f64": 7e-2}, eager, "bfloat16")
    assert not R.matches_eager({"max_rel_err": 9e-2, "max_rel_err_f64": 9e-2}, eager,
                               "bfloat16")


def test_bf16_run_and_memory_bound_bandwidth(tmp_path):
    result = R.run(["softmax_chain"], "small", "cpu", ("eager",), out_dir=str(tmp_path),
                   dtype="bfloat16", warm_start=False, **FAST)
    path = Path(result["json_path"])
    assert path.name.startswith("bench_cpu_small_bf16_")
    data = json.loads(path.read_text())
    meta, [row] = data["meta"], data["rows"]
    assert meta["dtype"] == "bfloat16" and meta["copy_bandwidth_gbs"] > 0
    assert "--dtype bfloat16" in meta["command"] and "--no-warm-start" in meta["command"]
    assert data["summary"]["fusionstitch_matches_eager"]
    fs = row["variants"]["fusionstitch"]
    assert "warm_start_s" not in fs
    assert row["compulsory_bytes"] > 0
    for e in row["variants"].values():
        assert e["achieved_gbs"] == pytest.approx(row["compulsory_bytes"] / e["median_s"] / 1e9)
        assert e["copy_fraction"] == pytest.approx(e["achieved_gbs"] / meta["copy_bandwidth_gbs"])
    assert "GB/s fs" in R.table(data["rows"], meta["variants"])


def test_cli_rejects_cuda_graphs_on_cpu(capsys):
    with pytest.raises(SystemExit) as e:
        R.main(["--target", "cpu", "--cuda-graphs", "on"])
    assert e.value.code == 2 and "need the cuda target" in capsys.readouterr().err


@pytest.mark.slow
def test_five_variants_end_to_end_on_cpu(tmp_path, monkeypatch):
    """The plumbing of a GPU run, on CPU: all five variants compiled, timed, compared and
    drawn (Inductor's reduce-overhead and fusionstitch's cuda_graphs run uncaptured on CPU
    tensors, each saying so in its log)."""
    why = R.inductor_error()
    if why is not None:
        pytest.skip(f"Inductor cannot compile on this machine's CPU: {why}")
    monkeypatch.setattr(R, "bench_variants", lambda target, against, cuda_graphs="auto":
                        list(R.VARIANTS))
    result = R.run(["softmax_chain"], "small", "cpu", ("eager", "inductor"),
                   out_dir=str(tmp_path), warm_start=False, **FAST)
    data = json.loads(Path(result["json_path"]).read_text())
    [row] = data["rows"]
    assert list(row["variants"]) == list(R.VARIANTS)
    for v, e in row["variants"].items():
        assert "error" not in e and e["median_s"] > 0, v
        assert e["achieved_gbs"] > 0
    sp = row["speedup"]
    for key in ("inductor_cudagraphs_vs_eager", "fusionstitch_cudagraphs_vs_eager",
                "fusionstitch_cudagraphs_vs_inductor_cudagraphs",
                "fusionstitch_best_vs_inductor_best"):
        assert sp[key] > 0, key
    s = data["summary"]
    assert s["fusionstitch_matches_eager"] and not s["failed"]
    assert "geomean_speedup_fusionstitch_cudagraphs_vs_inductor_cudagraphs" in s
    text = R.table(data["rows"], data["meta"]["variants"])
    assert "fs+cg/ind+cg" in text and "best fs/best ind" in text and "GB/s fs+cg" in text


def test_the_picture_counts_with_the_profiler_when_there_is_a_count(tmp_path):
    """On CUDA the lower panel shows torch.profiler's count of every variant's kernels."""
    import matplotlib.pyplot as plt
    rows = [_row("a", 2, 10), _row("b", 6, 10)]
    titles = []
    real = plt.Axes.set_title
    plt.Axes.set_title = lambda ax, t, **kw: (titles.append(t), real(ax, t, **kw))[1]
    try:
        R.plot(rows, str(tmp_path / "p.png"), "t")
        for r in rows:
            for e in r["variants"].values():
                e.pop("prof_kernels", None)
        R.plot(rows, str(tmp_path / "q.png"), "t")
    finally:
        plt.Axes.set_title = real
    assert (tmp_path / "p.png").exists() and (tmp_path / "q.png").exists()
    assert "torch.profiler" in titles[0] and "torch.profiler" not in titles[1]


def test_results_are_written_after_every_workload(tmp_path, monkeypatch):
    """A run stopped part-way (a time limit on the GPU machine) keeps the rows it has."""
    real = R.bench_workload

    def second_dies(name, *a, **kw):
        if name == "adam":
            raise KeyboardInterrupt
        return real(name, *a, **kw)
    monkeypatch.setattr(R, "bench_workload", second_dies)
    with pytest.raises(KeyboardInterrupt):
        R.run(["softmax_chain", "adam"], "small", "cpu", ("eager",), out_dir=str(tmp_path),
              warm_start=False, **FAST)
    [path] = tmp_path.glob("bench_cpu_small_*.json")
    data = json.loads(path.read_text())
    assert [r["workload"] for r in data["rows"]] == ["softmax_chain"]
    assert data["meta"]["complete"] is False
    monkeypatch.setattr(R, "bench_workload", real)
    done = R.run(["softmax_chain"], "small", "cpu", ("eager",), out_dir=str(tmp_path),
                 warm_start=False, **FAST)
    assert json.loads(Path(done["json_path"]).read_text())["meta"]["complete"] is True


def test_each_compiled_variant_checks_only_its_own_dynamo_entry():
    """Variants compiled from one step function in one process: Dynamo keeps its entries
    on the compiled frame's code object and tries them newest first, so a variant
    compiled earlier checked the later ones' guards at every call (a bias of 2-4% on a
    small training step). Each variant's frame is its own."""
    import torch
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list as entries

    def fn(x):
        return (x * 2).sin()
    x = torch.randn(8)
    torch._dynamo.reset()
    compiled = [R._compile(v, fn, "cpu") for v in ("floor", "fusionstitch")]
    for c in compiled:
        torch.testing.assert_close(c(x), fn(x))
    frames = [R._own_frame(fn), R._own_frame(fn)]
    assert frames[0].__code__ is not frames[1].__code__
    assert frames[0](x).equal(fn(x))
    # each compiled variant's frame holds its one entry; the step function holds none
    codes = {id(c.__wrapped__.__code__): c.__wrapped__.__code__ for c in compiled
             if hasattr(c, "__wrapped__")}
    assert len(codes) == 2
    assert all(len(entries(code)) == 1 for code in codes.values())
    assert not entries(fn.__code__)


def test_ab_variants_with_several_settings():
    """bench.ab's --variants: a variant's settings are comma-separated too, so an item
    with "=" after a variant with settings belongs to it."""
    from bench.ab import _split, parse_variants
    got = parse_variants("eager,fusionstitch:A=0,B=1,fusionstitch:B=1,inductor")
    assert got == ("eager", "fusionstitch:A=0,B=1", "fusionstitch:B=1", "inductor")
    assert _split(got[1]) == ("fusionstitch", {"A": "0", "B": "1"})
    assert parse_variants("eager,fusionstitch,inductor") == ("eager", "fusionstitch",
                                                              "inductor")
