"""`fusionstitch explain TARGET --out DIR` and report/factory.py's load_target."""
import os
import textwrap
from html import escape

import pytest

from fusionstitch.cli import main
from fusionstitch.report.factory import TargetError, load_target

FACTORY = """
import torch

def make():
    lin = torch.nn.Linear(8, 8)
    return (lambda x: torch.tanh(lin(x)).sum()), (torch.randn(4, 8, requires_grad=True),)

def not_a_pair():
    return 3

def helper():
    pass
"""


@pytest.fixture
def factory_file(tmp_path):
    path = tmp_path / "f.py"
    path.write_text(textwrap.dedent(FACTORY))
    return path


def test_load_zoo_workload():
    fn, args, mode = load_target("softmax_chain")
    assert callable(fn) and isinstance(args, tuple) and mode == "inference"
    _, full_args, _ = load_target("softmax_chain:full")
    assert full_args[0].numel() > args[0].numel()


def test_load_factory_file(factory_file):
    fn, args, mode = load_target(f"{factory_file}:make")
    assert mode == "train" and len(args) == 1
    assert fn(*args).shape == ()


@pytest.mark.parametrize("spec, words", [
    ("no_such_workload", ["no zoo workload 'no_such_workload'", "softmax_chain"]),
    ("softmax_chain:huge", ["size must be one of small, full"]),
    ("{dir}/missing.py:make", ["no file", "missing.py", "path/to/file.py:factory"]),
    ("{file}", ["name the factory function", ":make"]),
    ("{file}:absent", ["has no function 'absent'", "helper, make, not_a_pair"]),
    ("{file}:not_a_pair", ["not_a_pair() returned int", "(fn, example_args)"]),
])
def test_load_target_errors_name_what_was_expected(factory_file, spec, words):
    spec = spec.format(dir=factory_file.parent, file=factory_file)
    with pytest.raises(TargetError) as e:
        load_target(spec)
    for w in words:
        assert w in str(e.value)


def _expect_files(out, capsys, n_svgs):
    printed = capsys.readouterr().out.split()
    files = sorted(os.path.relpath(os.path.join(d, f), out)
                   for d, _, names in os.walk(out) for f in names)
    assert sorted(os.path.relpath(p, out) for p in printed) == files
    assert {"plan.txt", "report.html", "boundaries.txt"} <= set(files)
    assert len([n for n in files if n.endswith(".svg")]) == n_svgs
    page = (out / "report.html").read_text()
    assert "<svg" in page
    # every generated kernel has a file under kernels/<graph>/, linked from the page,
    # and its source is on the page (escaped)
    kernels = [n for n in files if n.startswith("kernels/")]
    assert kernels and all(f'href="{k}"' in page for k in kernels)
    for k in kernels:
        source = (out / k).read_text().split("\n\n", 1)[1]   # after the comment header
        first = next(line for line in source.splitlines() if "fs_" in line)
        assert escape(first) in page
    return kernels


def test_cli_explain_factory_file(factory_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["explain", f"{factory_file}:make", "--out", str(out),
                 "--strategy", "xla", "--target", "cpu"]) == 0
    kernels = _expect_files(out, capsys, n_svgs=2)        # forward and backward
    assert all(k.endswith(".cpp") for k in kernels)
    assert "void fs_kernel(" in (out / "report.html").read_text()
    plan = (out / "plan.txt").read_text()
    assert "strategy=xla" in plan and "plan xla for forward" in plan


def test_cli_explain_zoo_workload(tmp_path, capsys):
    out = tmp_path / "sc"
    assert main(["explain", "softmax_chain", "--out", str(out)]) == 0
    _expect_files(out, capsys, n_svgs=1)        # inference: one graph
    assert "(inference)" in (out / "plan.txt").read_text()


def test_cli_explain_bad_target_exits_2(tmp_path, capsys):
    assert main(["explain", "nope", "--out", str(tmp_path / "x")]) == 2
    assert "no zoo workload 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
