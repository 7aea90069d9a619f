"""report/html.py: the self-contained HTML report, fusion boundaries, the explain folder."""
import os
import re

import torch

import fusionstitch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion.plan import plan_from_groups
from fusionstitch.ir.text import parse
from fusionstitch.report.explain import GraphReport, Report
from fusionstitch.report.html import (SOURCE_CAP_LINES, boundaries_text, fusion_boundaries,
                                      graph_sources, group_ir, report_html, source_view,
                                      write_report_dir)
from fusionstitch.targets.source import kernel_source


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
    # every kernel shows its C++ (the printer always emits this signature), escaped;
    # the library call (the GEMM) says it has none
    assert page.count('<details class="src"') == rep.num_kernels
    assert "void fs_kernel(" in page and "extern &quot;C&quot;" in page
    assert "library call: runs through torch" in page
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
    out = tmp_path / "out"
    (out / "kernels" / "g").mkdir(parents=True)
    (out / "kernels" / "g" / "k007.cpp").write_text("from an older plan")
    (out / "kernels" / "g" / "notes.txt").write_text("not ours")
    paths = write_report_dir(rep, str(out), title="twice")
    names = sorted(os.path.relpath(p, out) for p in paths)
    assert names == ["boundaries.txt", "g.svg", "g_2.svg", "kernels/g/k000.cpp",
                     "kernels/g/k002.cpp", "kernels/g_2/k000.cpp", "kernels/g_2/k002.cpp",
                     "plan.txt", "report.html"]
    assert sorted(os.listdir(out / "kernels" / "g")) == ["k000.cpp", "k002.cpp", "notes.txt"]
    plan_txt = (out / "plan.txt").read_text()
    assert plan_txt.startswith("fusionstitch plan (strategy=none") and "#2 kernel/" in plan_txt
    # each kernel file: its group, template and kernel IR as comments, then the source;
    # the page links it, and the two graphs of one name get their own anchors
    k2 = (out / "kernels" / "g" / "k002.cpp").read_text()
    assert k2.startswith("// group #2 (") and "%n=neg.default %s=sin.default" in k2
    assert "void fs_kernel(" in k2
    page = (out / "report.html").read_text()
    assert 'href="kernels/g_2/k002.cpp"' in page
    assert 'id="g-g-k2"' in page and 'id="g-g_2-k2"' in page


def test_kernel_sources_are_escaped_and_carry_their_template():
    rep = _small_report()
    g = rep.graphs[0]
    sources = graph_sources(rep, g)
    assert sorted(sources) == [0, 2]                     # kernels only: the view is free
    page = report_html(rep, sources=[sources])
    for ks in sources.values():
        assert ks.language == "C++" and ks.ext == "cpp" and ks.template.startswith("[grid")
        assert f'<code class="tpl">{ks.template.replace("<", "&lt;")}</code>' in page
        line = next(ln for ln in ks.source.splitlines() if "<" in ln)   # e.g. x < xnumel
        assert line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in page
        assert line not in page
    # the group table links each kernel to its source block
    assert 'href="#g-g-k2"' in page and 'id="g-g-k2"' in page


def test_triton_targets_show_triton_source():
    rep = _small_report()
    rep = Report("none", "interpret", rep.graphs)
    page = report_html(rep)
    assert "lines of Triton" in page and "def fs_" in page and "tl.store(" in page


def test_a_group_that_does_not_lower_shows_the_reason(monkeypatch):
    from fusionstitch.codegen import lower
    monkeypatch.delenv("FUSIONSTITCH_STRICT", raising=False)

    def refuse(graph, names, kernel_name, schedule=None):
        raise lower.Unsupported("no rule lowers <this> group")
    monkeypatch.setattr(lower, "lower_group", refuse)
    rep = _small_report()
    page = report_html(rep)
    assert page.count("no C++ source: Unsupported: no rule lowers &lt;this&gt; group") == 2
    assert '<details class="src"' not in page


def test_source_view_folds_runs_and_caps_long_kernels():
    params = [f"    const float* in{i}," for i in range(300)]
    text = "\n".join(["void f("] + params + ["    int n) {", "}"])
    shown, left = source_view(text)
    assert left == 0 and "⋮ 297 more lines like these" in shown
    assert "in0," in shown and "in1," in shown and "in299," in shown and "in150," not in shown
    body = "\n".join(f"x{i} = y{i % 7} < {i};" * (i % 3 + 1) for i in range(1000))
    shown, left = source_view(body)
    assert shown.count("\n") + 1 <= SOURCE_CAP_LINES and left == 1000 - shown.count("\n") - 1
    assert "&lt;" in shown and "<" not in shown.replace("<span", "").replace("</span", "")


def test_kernel_source_of_library_and_free_groups_is_a_reason():
    rep = _library_report()
    plan = rep.graphs[0].plan
    reasons = {g.kind: kernel_source(plan, g, "cpu").reason for g in plan.groups}
    assert reasons["library"].startswith("library call")
    kernel = next(g for g in plan.groups if g.kind == "kernel")
    assert kernel_source(plan, kernel, "cpu").source
    assert "generates no kernels" in kernel_source(plan, kernel, "torch").reason
