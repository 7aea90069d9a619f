"""The command line: `fusionstitch demo` on small workloads, as `make demo` runs it."""
import os

from fusionstitch.cli import main


def test_demo_small_prints_table_and_writes_report(capsys, tmp_path):
    out = tmp_path / "demo"
    assert main(["demo", "--workloads", "mlp,softmax_chain", "--size", "small",
                 "--against", "", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "k:stitch" in text and "mlp" in text and "softmax_chain" in text
    assert "eager ms" in text and "fs ms" in text and "max err" in text
    assert f"HTML report: {out / 'index.html'}" in text
    for name in ("mlp", "softmax_chain"):
        assert (out / name / "report.html").exists()
        assert any(f.endswith(".svg") for f in os.listdir(out / name))
    index = (out / "index.html").read_text()
    assert 'href="softmax_chain/report.html"' in index and "<table" in index
    assert "kernels per step" in index and "median step ms" in index
    # each report holds its kernels' sources, and the files are beside it
    page = (out / "mlp" / "report.html").read_text()
    assert "void fs_kernel(" in page or "def fs_" in page
    assert os.listdir(out / "mlp" / "kernels")


def test_demo_reports_a_workload_whose_fusionstitch_run_failed(capsys, tmp_path, monkeypatch):
    """The report then comes from a separate capture; the table prints '-' for the run."""
    from bench import run

    real = run._compile

    def broken(variant, fn, target, sink=None):
        if variant == "fusionstitch":
            raise RuntimeError("injected failure")
        return real(variant, fn, target, sink)
    monkeypatch.setattr(run, "_compile", broken)
    out = tmp_path / "demo"
    assert main(["demo", "--workloads", "softmax_chain", "--size", "small", "--against", "",
                 "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "differs from eager: softmax_chain" in captured.err
    row = next(line for line in captured.out.splitlines() if line.startswith("softmax_chain"))
    assert row.split()[-2:] == ["-", "-"]          # no step time, no error for fusionstitch
    assert "void fs_kernel(" in (out / "softmax_chain" / "report.html").read_text()
