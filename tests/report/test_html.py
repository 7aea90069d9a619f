"""report/html.py: the self-contained HTML report, fusion boundaries, the explain folder."""
import os
import re

import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion.plan import plan_from_groups
from fusionstitch.ir.text import parse
from fusionstitch.report.explain import GraphReport, Report
from fusionstitch.report.html import (boundaries_text, fusion_boundaries, group_ir,
                                      report_html, write_report_dir)


def _library_report():
    torch._dynamo.reset()
    w = torch.randn(128, 128)   # a GEMM above the fused-GEMM limit: a library call
    with torch.no_grad():
        return fusionstitch.explain(lambda x: torch.softmax(x @ w, -1).exp(),
                                    torch.randn(4, 128), strategy="stitch", target="cpu")


def _small_report(name="g"):
    b = GraphBuilder(name)
    x = b.param((4, 8), name="x")
    e = b.op("exp.default", x, name="e")
    v = b.op("view.default", e, (32,), name="v")       # a view between two kernels
    n = b.op("neg.default", v, name="n")
    s = b.op("sin.default", n, name="s")
    plan = plan_from_groups(b.build(s, e), [["n", "s"]], "none")
    g = GraphReport(name, "inference", 4, plan.num_kernels, 0, 1000, 0.001, plan,
                    stages={"plan": 0.001})
    return Report("none", "cpu", [g])


def test_html_has_summary_numbers_svg_and_library_call_boundaries():
    rep = _library_report()
    page = report_html(rep, title="softmax <after> mm")
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "softmax &lt;after&gt; mm" in page
    g = rep.graphs[0]
    for number in (rep.num_ops, rep.num_kernels, rep.num_library_calls):
        assert f'<td class="num">{number}</td>' in page
    assert f"{rep.bytes_moved / 1e6:.3f}" in page
    assert f"{rep.planning_seconds * 1e3:.1f}" in page
    for stage in g.stages:
        assert stage in page
    assert page.count("<svg") == 1 and "class=\"hull\"" in page
    assert "Fusion boundaries" in page and "library call" in page
    assert "generated source: not yet" in page
    # self-contained: no external scripts, styles or images
    assert not re.search(r"<(script|link|img)\b|\bsrc=|@import", page)


def test_boundaries_look_through_views_and_name_the_reason():
    rep = _small_report()
    found, total = fusion_boundaries(rep, rep.graphs[0])
    assert total == 1
    (b,) = found
    assert (b.producer, b.consumer) == (0, 2)    # exp kernel -> (view is free) -> {neg, sin}
    assert b.edges == (("e", "n"),)
    assert "%e (group #0) and %n (group #2)" in b.reason
    assert boundaries_text(rep) == f"g: #0 -> #2 (1 edge): {b.reason}\n"


def test_boundaries_are_judged_within_their_own_graph():
    """Two graphs with the same node names: each boundary is about its own graph."""
    one, two = _small_report("fw"), _small_report("bw")
    rep = Report("none", "cpu", [one.graphs[0], two.graphs[0]])
    text = boundaries_text(rep)
    assert text.count("#0 -> #2") == 2 and text.startswith("fw:") and "\nbw:" in text


def test_group_ir_is_parseable_ir_text():
    plan = _small_report().graphs[0].plan
    text = group_ir(plan.graph, ("n", "s"), "g_group2")
    g = parse(text)
    assert [n.name for n in g.params] == ["v"] and g.output_names == {"s"}


def test_write_report_dir_gives_repeated_graph_names_their_own_svg(tmp_path):
    one = _small_report().graphs[0]
    rep = Report("none", "cpu", [one, one])
    paths = write_report_dir(rep, str(tmp_path / "out"), title="twice")
    names = sorted(os.path.basename(p) for p in paths)
    assert names == ["boundaries.txt", "g.svg", "g_2.svg", "plan.txt", "report.html"]
    plan_txt = (tmp_path / "out" / "plan.txt").read_text()
    assert plan_txt.startswith("fusionstitch plan (strategy=none") and "#2 kernel/" in plan_txt
