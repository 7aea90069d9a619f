"""The command line: `fusionstitch demo` on a small workload."""
from fusionstitch.cli import main


def test_demo_small_prints_table(capsys):
    assert main(["demo", "--workloads", "mlp,softmax_chain", "--size", "small"]) == 0
    out = capsys.readouterr().out
    assert "k:stitch" in out and "mlp" in out and "softmax_chain" in out
