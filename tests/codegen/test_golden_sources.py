"""Golden kernel sources: the code every target generates for a few zoo graphs.

A refactor that changes generated code says so here. Each workload keeps two kinds of
file under `tests/codegen/goldens/`:

- `<workload>.ir`: the canonicalised graphs of its small step (IR text, `ir/text.py`),
  the test's input. Stored rather than traced, so the goldens do not depend on the
  torch version (its decompositions) and the test runs without Dynamo;
- `<workload>.<target>.txt`: the stitch plan of each graph for `target`, then each
  kernel group's source as the debug folder writes it (`targets/source.kernel_source`:
  group, template and kernel IR as comments, then C++ or Triton).

Sources are printed, not compiled, so the Triton goldens need no GPU. The C++ printer's
one host-dependent input, libmvec's vector math (`targets/cpp/vecmath.py`, which exists
only on x86-64 with GCC), is switched off while printing: the goldens are the same on
every machine. Regenerate after an intended change with
    FUSIONSTITCH_UPDATE_GOLDENS=1 pytest tests/codegen/test_golden_sources.py
(which traces the workloads again: their `.ir` files are rewritten too, and move with
the torch version and the partitioner), or `FUSIONSTITCH_UPDATE_GOLDENS=sources` to
rewrite the sources from the stored `.ir` files only (a code-generation change), and
say in the commit why the code moved.
"""
import difflib
import os
import re

import pytest

from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse, print_graph
from fusionstitch.targets.source import kernel_source

HERE = os.path.join(os.path.dirname(__file__), "goldens")
# elementwise (adam's update), a softmax chain (reductions), layernorm/softmax/gelu
# forward and backward (a training step), an MLP step (GEMM-adjacent groups: bias
# gradients' column sums, activations around library GEMMs)
WORKLOADS = ("adam", "softmax_chain", "layernorm_softmax_gelu", "mlp")
TARGETS = ("cpu", "cuda", "interpret")
UPDATE = bool(os.environ.get("FUSIONSTITCH_UPDATE_GOLDENS"))
RETRACE = UPDATE and os.environ.get("FUSIONSTITCH_UPDATE_GOLDENS") != "sources"


@pytest.fixture(autouse=True)
def _host_free(monkeypatch):
    """No host-dependent code: no libmvec calls, halves rounded as eager does."""
    monkeypatch.setenv("FUSIONSTITCH_CPU_VECMATH", "0")
    monkeypatch.delenv("FUSIONSTITCH_ELIDE_HALF_CASTS", raising=False)
    monkeypatch.delenv("FUSIONSTITCH_FUEL", raising=False)
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")


def split_graphs(text: str) -> list[str]:
    """The graphs of an `.ir` file: each starts at a line `graph ...`."""
    return [g for g in re.split(r"(?m)^(?=graph )", text) if g.strip()]


def read_graphs(name: str):
    with open(os.path.join(HERE, f"{name}.ir")) as f:
        return [parse(g) for g in split_graphs(f.read())]


def sources_text(graphs, target: str) -> str:
    """Each graph's plan for `target`, then each kernel group's generated file."""
    out = [f"# {target}: stitch plans and generated kernel sources "
           f"(tests/codegen/test_golden_sources.py)"]
    for g in graphs:
        plan = make_plan(g, "stitch", target)
        out += ["", f"==== plan of {g.name}", plan.to_text().rstrip("\n")]
        for group in plan.groups:
            src = kernel_source(plan, group, target)
            if src.source:
                out += ["", f"==== {g.name}/{src.file_name}", src.file_text.rstrip("\n")]
            elif group.kind == "kernel":
                out += ["", f"==== {g.name} group #{group.id}: no source: {src.reason}"]
    return "\n".join(out) + "\n"


def _capture(name: str) -> str:
    from bench.plan_table import capture
    return "\n".join(print_graph(g).rstrip("\n") + "\n" for g in capture(name, "small"))


@pytest.mark.parametrize("name", WORKLOADS)
def test_golden_sources(name):
    ir_path = os.path.join(HERE, f"{name}.ir")
    if RETRACE:
        os.makedirs(HERE, exist_ok=True)
        with open(ir_path, "w") as f:
            f.write(_capture(name))
    graphs = read_graphs(name)
    diffs = []
    for target in TARGETS:
        path = os.path.join(HERE, f"{name}.{target}.txt")
        got = sources_text(graphs, target)
        if UPDATE:
            with open(path, "w") as f:
                f.write(got)
            continue
        with open(path) as f:
            want = f.read()
        if got != want:
            diff = difflib.unified_diff(want.splitlines(), got.splitlines(), path, "now",
                                        lineterm="", n=2)
            diffs.append("\n".join(list(diff)[:80]))
    if UPDATE:
        pytest.skip(f"goldens of {name} rewritten")
    assert not diffs, ("generated code changed (FUSIONSTITCH_UPDATE_GOLDENS=1 rewrites the "
                       "goldens after an intended change):\n" + "\n".join(diffs))


def test_ir_files_round_trip():
    """The stored graphs print back to their own text (the parser re-derives nothing)."""
    for name in WORKLOADS:
        with open(os.path.join(HERE, f"{name}.ir")) as f:
            text = f.read()
        for g in split_graphs(text):
            assert print_graph(parse(g)).rstrip("\n") == g.rstrip("\n"), name
