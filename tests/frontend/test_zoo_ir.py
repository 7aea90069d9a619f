"""Every graph the zoo produces verifies, and its text form round-trips."""
import contextlib
import os

import pytest
import torch

import fusionstitch
from bench import workloads as W
from fusionstitch.ir.text import parse, print_graph
from fusionstitch.ir.verify import verify


def zoo_graphs(name: str):
    inst = W.make(name, "small")
    with torch.no_grad() if inst.workload.mode == "inference" else contextlib.nullcontext():
        rep = fusionstitch.explain(inst.fn, *inst.args, strategy="none")
    return [g.plan.graph for g in rep.graphs]


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    monkeypatch.setenv("FUSIONSTITCH_VERIFY", "1")  # verifier between every pass
    torch._dynamo.reset()


@pytest.mark.parametrize("name", W.names())
def test_zoo_graphs_verify_and_round_trip(name):
    graphs = zoo_graphs(name)
    assert graphs
    for g in graphs:
        verify(g)
        assert parse(print_graph(g)) == g


def test_debug_dir_has_numbered_per_pass_dumps(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_DEBUG_DIR", str(tmp_path))
    lin = torch.nn.Linear(4, 4)
    f = torch.compile(lambda x: torch.relu(lin(x)).sum(), backend="fusionstitch")
    f(torch.randn(2, 4)).backward()
    folders = sorted(os.listdir(tmp_path))
    assert any(d.startswith("forward") for d in folders)
    assert any(d.startswith("backward") for d in folders)
    files = sorted(os.listdir(tmp_path / folders[0]))
    dumps = [f for f in files if f.endswith(".txt")]
    assert dumps[0] == "01_frontend.txt"
    assert any(f.endswith("_dce.txt") for f in dumps)
    assert dumps[-1].endswith("_plan.txt")
    # the frontend dump is valid IR text, and the repro script runs and re-plans it
    parse((tmp_path / folders[0] / files[0]).read_text())
    assert "repro.py" in files
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path / folders[0], text=True,
                         capture_output=True, timeout=300, check=True).stdout
    worst = float(out.rsplit("max abs difference vs unfused:", 1)[1].split()[0])
    assert worst < 1e-4, out


def test_debug_dir_has_every_generated_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_DEBUG_DIR", str(tmp_path))
    f = torch.compile(lambda x: torch.softmax(x * 2, -1) + x.sum(0),
                      backend=fusionstitch.backend(target="interpret"))
    fusionstitch.reset_stats()
    f(torch.randn(4, 8))
    launched = fusionstitch.stats()["kernels_launched"]
    (folder,) = os.listdir(tmp_path)
    kernels = sorted(os.listdir(tmp_path / folder / "kernels"))
    assert len(kernels) == launched >= 1
    text = (tmp_path / folder / "kernels" / kernels[0]).read_text()
    assert text.startswith("# group #") and "def fs_" in text and "tl.store" in text
