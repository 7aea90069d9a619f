"""One self-contained HTML page for an explain() Report, and the explain folder.

The page has no external assets (inline CSS, inline SVG, onclick attributes for the
picture's zoom and for opening a kernel's source from the group table):
a summary table, then per graph the picture of the plan, its groups with their
modelled cost and IR text, the generated source of every kernel for the report's
target (C++ for `cpu`, Triton for `cuda` / `interpret`; targets/source.py prints it
without compiling), and the fusion boundaries with the planner's reason.

A kernel's source is shown with runs of more than FOLD_RUN similar lines folded, whole
up to SOURCE_CAP_LINES lines / SOURCE_CAP_CHARS characters, cut after that with a note
(adam's packed optimizer step is 3,700 lines); write_report_dir() (`fusionstitch
explain --out DIR`, `make demo`) also writes every kernel whole to
DIR/kernels/<graph>/kNNN.cpp|py, and the page links each kernel to its file.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from html import escape

from ..analysis.cost import group_bytes
from ..fusion.plan import FREE, KERNEL, FusionPlan
from ..ir.graph import PARAMETER, Graph, Node, Ref
from ..ir.text import print_graph
from .explain import GraphReport, Report
from .render import PALETTE, group_colour, kernel_producers, plan_svg, short_op
from ..targets import resolve
from ..targets.source import KernelSource, kernel_source

# Boundaries listed per graph: past this the list stops being read (and each reason costs a
# legality check on the two groups).
BOUNDARY_CAP = 50
# A kernel's source on the page is cut past these: every kernel of the demo's workloads
# fits (the longest, layernorm_softmax_gelu's forward with row buffers, is ~320 lines /
# 15 KB of C++), while one packed optimizer step (adam: 3,700 lines, 190 KB of C++)
# would make the page megabytes long. The whole text is in the kernels/ folder beside
# the page.
SOURCE_CAP_LINES = 400
SOURCE_CAP_CHARS = 24_000
FOLD_RUN = 8             # similar lines in a row past which the page folds them
TEMPLATE_CHARS = 200     # a template's summary line on the page (the file has it whole)


@dataclass(frozen=True)
class Boundary:
    """Values flowing from group `producer` to group `consumer` (both kernels or library calls)."""

    producer: int
    consumer: int
    edges: tuple[tuple[str, str], ...]   # (producer node, consumer node), graph order
    reason: str


def fusion_boundaries(report: Report, graph: GraphReport,
                      cap: int = BOUNDARY_CAP) -> tuple[list[Boundary], int]:
    """Boundaries between different kernel / library groups of one graph (at most `cap`),
    and how many there are in all.

    One entry per pair of groups: why_not_fused() judges the union of the two groups,
    so every edge between the same two groups has the same reason.
    """
    plan = graph.plan
    if plan is None:
        return [], 0
    owner = {n: grp for grp in plan.groups for n in grp.nodes}
    memo: dict[str, list[str]] = {}
    pairs: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for node in plan.graph.nodes:
        gc = owner.get(node.name)
        if gc is None or gc.kind == FREE:
            continue
        for i in dict.fromkeys(node.inputs):
            for p in kernel_producers(plan, owner, i, memo):
                if owner[p].id != gc.id:
                    pairs.setdefault((owner[p].id, gc.id), []).append((p, node.name))
    # why_not_fused looks a node name up in every graph of a report; names repeat across
    # graphs (forward and backward both have %view), so ask a report of this graph alone.
    alone = Report(report.strategy, report.target, [graph])
    out = []
    for (a, b), edges in list(pairs.items())[:cap]:
        out.append(Boundary(a, b, tuple(edges), alone.why_not_fused(*edges[0])))
    return out, len(pairs)


def group_ir(graph: Graph, nodes: tuple[str, ...], name: str) -> str:
    """A group as IR text: the values it reads become parameters, it returns what leaves it."""
    inside = set(nodes)
    reads = dict.fromkeys(i for n in nodes for i in graph[n].inputs if i not in inside)
    params = [Node(i, PARAMETER, type=graph[i].type) for i in reads]
    outs = graph.output_names
    written = [Ref(n) for n in nodes
               if n in outs or any(u not in inside for u in graph.users[n])]
    return print_graph(Graph(tuple(params) + tuple(graph[n] for n in nodes), tuple(written),
                             name))


def _num(x, fmt: str = "") -> str:
    return f'<td class="num">{format(x, fmt)}</td>'


def _stages(stages: dict) -> str:
    total = sum(stages.values()) or 1.0
    bar = "".join(f'<span style="width:{100 * v / total:.1f}%;background:'
                  f'{PALETTE[i % len(PALETTE)]}" title="{escape(k)} {v * 1e3:.1f} ms"></span>'
                  for i, (k, v) in enumerate(stages.items()))
    text = ", ".join(f"{escape(k)} {v * 1e3:.1f}" for k, v in stages.items())
    return f'<div class="bar">{bar}</div><span class="stages">{text}</span>' if stages else "—"


def _modelled_us(report: Report, plan: FusionPlan | None) -> float:
    if plan is None:
        return 0.0
    spec = resolve(report.target).device_spec
    return sum(spec.kernel_time(group_bytes(plan.graph, g.nodes)) for g in plan.groups
               if g.kind != FREE) * 1e6


def _anchors(report: Report) -> list[str]:
    """One unique HTML id per graph (names repeat across specialisations of one graph)."""
    return ["g-" + stem for stem in _file_names(report)]


def _summary(report: Report, anchors: list[str]) -> list[str]:
    rows = ['<div class="scroll"><table class="summary"><thead><tr><th>graph</th><th>kind</th>'
            '<th>ops</th><th>kernels</th><th>library calls</th><th>MB moved</th>'
            '<th>modelled µs</th><th>planning ms</th><th>planning stages (ms)</th></tr></thead>'
            '<tbody>']
    for g, anchor in zip(report.graphs, anchors):
        rows.append(f'<tr><td><a href="#{anchor}">{escape(g.name)}</a></td>'
                    f'<td>{escape(g.kind)}</td>' + _num(g.num_ops) + _num(g.num_kernels)
                    + _num(g.num_library_calls) + _num(g.bytes_moved / 1e6, ".3f")
                    + _num(_modelled_us(report, g.plan), ".1f")
                    + _num(g.planning_seconds * 1e3, ".1f")
                    + f'<td class="stagecell">{_stages(g.stages)}</td></tr>')
    rows.append('<tr class="total"><td>total</td><td></td>' + _num(report.num_ops)
                + _num(report.num_kernels) + _num(report.num_library_calls)
                + _num(report.bytes_moved / 1e6, ".3f")
                + _num(sum(_modelled_us(report, g.plan) for g in report.graphs), ".1f")
                + _num(report.planning_seconds * 1e3, ".1f") + "<td></td></tr>")
    rows.append("</tbody></table></div>")
    return rows


def _groups_table(report: Report, g: GraphReport, sources: dict[int, KernelSource],
                  anchor: str) -> list[str]:
    plan, spec = g.plan, resolve(report.target).device_spec
    rows = ['<div class="scroll"><table class="groups"><thead><tr><th>group</th><th>kind</th>'
            '<th>composition</th><th>ops</th><th>modelled bytes</th><th>modelled µs</th>'
            '<th class="wide">ops (IR text)</th></tr></thead><tbody>']
    for grp in plan.groups:
        nbytes = 0 if grp.kind == FREE else group_bytes(plan.graph, grp.nodes)
        t = f"{spec.kernel_time(nbytes) * 1e6:.2f}" if grp.kind != FREE else "—"
        ops = " ".join(short_op(plan.graph[n].op) for n in grp.nodes)
        if len(ops) > 90:
            ops = ops[:88] + " …"
        swatch = {"library": "#888888", FREE: "#ffffff"}.get(grp.kind, group_colour(grp.id))
        ir = group_ir(plan.graph, grp.nodes, f"{g.name}_group{grp.id}")
        target = f"{anchor}-k{grp.id}"
        gid = (f'<a href="#{target}" onclick="{_open_js(target)}">#{grp.id}</a>'
               if grp.id in sources else f"#{grp.id}")
        rows.append(f'<tr class="{escape(grp.kind)}"><td><span class="sw" style="background:'
                    f'{swatch}"></span>{gid}</td><td>{escape(grp.kind)}</td>'
                    f'<td>{escape(grp.composition)}</td>' + _num(len(grp.nodes))
                    + _num(nbytes, ",") + f'<td class="num">{t}</td>'
                    f'<td class="wide"><details><summary>{escape(ops)}</summary>'
                    f'<pre>{escape(ir)}</pre></details></td></tr>')
    rows.append("</tbody></table></div>")
    return rows


def graph_sources(report: Report, g: GraphReport) -> dict[int, KernelSource]:
    """The generated source (or the reason there is none) of every kernel and library group
    of one graph, by group id; free groups are left out."""
    if g.plan is None:
        return {}
    return {grp.id: kernel_source(g.plan, grp, report.target, g.kernel(grp.id, report.target))
            for grp in g.plan.groups if grp.kind != FREE}


def _fold_runs(lines: list[str]) -> list[tuple[str, int, bool]]:
    """(text, source lines it stands for, folded?) per shown line: a run of more than
    FOLD_RUN lines that differ only in their numbers (a packed kernel's 600 parameters
    `const float* in17,`) keeps its first and last lines around one fold marker."""
    shape = [re.sub(r"\d+", "#", line) for line in lines]
    out, i = [], 0
    while i < len(lines):
        j = i
        while j + 1 < len(lines) and shape[j + 1] == shape[i]:
            j += 1
        n = j - i + 1
        if n > FOLD_RUN:
            indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
            out += [(lines[i], 1, False), (lines[i + 1], 1, False),
                    (f"{indent}⋮ {n - 3:,} more lines like these", n - 3, True),
                    (lines[j], 1, False)]
        else:
            out += [(line, 1, False) for line in lines[i:j + 1]]
        i = j + 1
    return out


def source_view(text: str, max_lines: int = SOURCE_CAP_LINES,
                max_chars: int = SOURCE_CAP_CHARS) -> tuple[str, int]:
    """A kernel source as escaped HTML for a <pre>: long runs of similar lines folded, then
    cut after `max_lines` shown lines or `max_chars` characters (at least one line).
    Returns (html, source lines not shown)."""
    items = _fold_runs(text.splitlines())
    parts, size, covered = [], 0, 0
    for line, n, folded in items[:max_lines]:
        size += len(line) + 1
        if parts and size > max_chars:
            break
        parts.append(f'<span class="fold">{escape(line)}</span>' if folded else escape(line))
        covered += n
    return "\n".join(parts), sum(n for _, n, _ in items) - covered


def _short_template(tpl: str, limit: int = TEMPLATE_CHARS) -> str:
    """A template cut to `limit` characters (a packing of 40 components is 1 KB)."""
    if len(tpl) <= limit:
        return tpl
    return tpl[:limit].rsplit(" | ", 1)[0] + f" | … ({tpl.count(' | ') + 1} components)]"


def _open_js(anchor: str) -> str:
    """An onclick that opens the <details> a link jumps to (a closed one hides its text)."""
    return f"document.getElementById('{anchor}').open=true"


def _kernel_block(g: GraphReport, grp, ks: KernelSource, folder: str | None,
                  anchor: str) -> str:
    anchor = f"{anchor}-k{grp.id}"
    swatch = "#888888" if grp.kind != KERNEL else group_colour(grp.id)
    head = (f'<span class="sw" style="background:{swatch}"></span><b>#{grp.id}</b> '
            f'{escape(grp.kind)} · {escape(grp.composition)}')
    if not ks.source:
        ops = " ".join(short_op(g.plan.graph[n].op) for n in grp.nodes)
        if len(ops) > 90:
            ops = ops[:88] + " …"
        return (f'<div class="nosrc {escape(grp.kind)}" id="{anchor}"><span class="head">'
                f'{head} · {escape(ops)}</span><br><span class="muted">{escape(ks.reason)}'
                f'</span></div>')
    path = f"{folder}/{ks.file_name}" if folder else None
    link = f'<a href="{escape(path)}">{escape(path)}</a>' if path else ""
    total = ks.source.count("\n") + (not ks.source.endswith("\n"))
    shown, left = source_view(ks.source)
    out = [f'<details class="src" id="{anchor}"><summary>{head} · '
           f'<span class="lines">{total:,} lines of {ks.language}</span><br>'
           f'<code class="tpl">{escape(_short_template(ks.template))}</code></summary>']
    if link:
        out.append(f'<div class="file">whole file (with the kernel IR): {link}</div>')
    out.append(f'<pre class="code">{shown}</pre>')
    if left:
        where = (f"the whole source is in {link}" if link else
                 "<code>fusionstitch explain TARGET --out DIR</code> writes the whole source "
                 "to DIR/kernels/")
        out.append(f'<p class="note">{left:,} of {total:,} lines not shown (the page shows '
                   f'at most {SOURCE_CAP_LINES} lines of a kernel); {where}.</p>')
    out.append("</details>")
    return "".join(out)


def _kernels(report: Report, g: GraphReport, sources: dict[int, KernelSource],
             folder: str | None, anchor: str) -> list[str]:
    kernels = [ks for ks in sources.values() if ks.source]
    languages = sorted({ks.language for ks in kernels})
    if kernels:
        lede = (f"The {' / '.join(languages)} that target {escape(report.target)} generates "
                f"for each kernel group (printed, not compiled here); click to open. "
                f"Library calls run through torch.")
    else:
        lede = "No generated kernels in this graph."
    out = [f'<p class="note">{lede}</p>', '<div class="kernels">']
    out += [_kernel_block(g, grp, sources[grp.id], folder, anchor)
            for grp in g.plan.groups if grp.id in sources]
    out.append("</div>")
    return out


def _boundaries(found: list[Boundary], total: int) -> list[str]:
    if not found:
        return ['<p class="muted">No boundaries: every value stays inside its group.</p>']
    out = ['<ul class="boundaries">']
    for b in found:
        edges = ", ".join(f"%{p} → %{c}" for p, c in b.edges[:4])
        if len(b.edges) > 4:
            edges += f", … ({len(b.edges)} edges)"
        out.append(f'<li><b>#{b.producer} → #{b.consumer}</b> <span class="edges">'
                   f'{escape(edges)}</span><br>{escape(b.reason)}</li>')
    out.append("</ul>")
    if total > len(found):
        out.append(f'<p class="muted">… and {total - len(found)} more pairs of groups '
                   f'(the first {len(found)} are shown).</p>')
    return out


def _graph_section(report: Report, g: GraphReport, found: tuple[list[Boundary], int],
                   sources: dict[int, KernelSource], folder: str | None, anchor: str
                   ) -> list[str]:
    out = [f'<section id="{anchor}"><h2>{escape(g.name)} '
           f'<span class="tag">{escape(g.kind)}</span></h2>']
    if g.plan is None:
        out.append(f'<p>Runs through torch: {escape(g.fallback_reason or "no plan")}.</p>'
                   "</section>")
        return out
    out.append(f'<p class="lede">{g.num_ops} ops → <b>{g.num_kernels} kernels</b> + '
               f'{g.num_library_calls} library calls · {g.bytes_moved / 1e6:.3f} MB moved · '
               f'planned in {g.planning_seconds * 1e3:.1f} ms</p>')
    svg = plan_svg(g.plan, title=f"{g.name} ({g.kind}, {report.strategy})")
    out.append('<div class="figure"><button type="button" onclick="this.parentNode.classList'
               '.toggle(\'actual\')">fit width / actual size</button>' + svg + "</div>")
    out.append(f'<h3 id="{anchor}-groups">Groups</h3>')
    out += _groups_table(report, g, sources, anchor)
    out.append(f'<h3 id="{anchor}-kernels">Kernels</h3>')
    out += _kernels(report, g, sources, folder, anchor)
    out.append(f'<h3 id="{anchor}-boundaries">Fusion boundaries</h3>')
    out += _boundaries(*found)
    out.append("</section>")
    return out


_CSS = """
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--bg2:#f6f8fa;--accent:#0969da}
*{box-sizing:border-box}
body{margin:0;color:var(--fg);background:#fff;font:15px/1.5 system-ui,-apple-system,"Segoe UI",
Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:1.2rem 1rem 3rem}
h1{font-size:1.6rem;margin:.2rem 0 .3rem}h2{font-size:1.25rem;margin:2.2rem 0 .3rem;
padding-top:.8rem;border-top:2px solid var(--line)}h3{font-size:1.02rem;margin:1.4rem 0 .4rem}
a{color:var(--accent)}.muted,.note{color:var(--muted)}.note{font-size:.9rem}
.lede{margin:.2rem 0 .8rem}.tag{font-size:.8rem;font-weight:normal;background:var(--bg2);
border:1px solid var(--line);border-radius:1rem;padding:.05rem .55rem;vertical-align:middle}
code,pre,.edges{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.88rem;width:100%}
th,td{padding:.3rem .55rem;border-bottom:1px solid var(--line);text-align:left;
vertical-align:top}
th{background:var(--bg2);font-weight:600;white-space:nowrap}
th[colspan]{text-align:center;border-bottom:1px solid var(--line)}
thead tr+tr th{text-align:right}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.total td{font-weight:600;border-top:2px solid var(--line)}
tr.free td{color:var(--muted)}
td.wide{min-width:16rem}
.stagecell{min-width:14rem}.stages{font-size:.8rem;color:var(--muted)}
.bar{display:flex;height:.5rem;border-radius:.25rem;overflow:hidden;background:var(--bg2);
margin:.25rem 0 .1rem;max-width:16rem}.bar span{display:block;height:100%}
.sw{display:inline-block;border:1px solid #888;width:.7rem;height:.7rem;border-radius:.2rem;
margin-right:.35rem;vertical-align:-.05rem}
details summary{cursor:pointer;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,
monospace;font-size:.8rem;color:var(--fg)}
pre{background:var(--bg2);border:1px solid var(--line);border-radius:6px;padding:.5rem .7rem;
overflow-x:auto;font-size:.78rem;line-height:1.4;margin:.4rem 0}
.figure{border:1px solid var(--line);border-radius:8px;padding:.4rem;overflow:auto;
max-height:90vh;position:relative}
.figure svg{display:block;max-width:100%;height:auto;margin:0 auto}
.figure.actual svg{max-width:none}
.figure button{position:sticky;left:0;top:0;float:right;font:inherit;font-size:.8rem;
background:#fff;border:1px solid var(--line);border-radius:6px;padding:.1rem .5rem;
cursor:pointer;z-index:1}
.kernels{margin:.3rem 0 .6rem}
details.src,.nosrc{border:1px solid var(--line);border-radius:6px;padding:.3rem .6rem;
margin:.3rem 0}
details.src[open]{background:var(--bg2)}
.nosrc{font-size:.8rem;background:var(--bg2);color:var(--fg)}
.nosrc .head{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
code.tpl{font-size:.78rem;overflow-wrap:anywhere}
code.tpl{color:var(--muted)}.lines{color:var(--muted)}
.file{font-size:.8rem;color:var(--muted);margin:.3rem 0 0}
pre.code{background:#fff;max-height:75vh;overflow:auto;tab-size:4}
.fold{color:var(--muted);font-style:italic}
ul.boundaries{padding-left:1.2rem}ul.boundaries li{margin:.35rem 0}
.edges{font-size:.8rem;color:var(--muted)}
nav{font-size:.9rem;margin:.8rem 0}nav a{margin-right:.8rem}
@media (max-width:640px){body{font-size:14px}main{padding:.8rem .6rem}h1{font-size:1.3rem}}
"""


def _all_boundaries(report: Report, found) -> list[tuple[list[Boundary], int]]:
    return found if found is not None else [fusion_boundaries(report, g) for g in report.graphs]


def report_html(report: Report, *, title: str = "fusionstitch plan", boundaries=None,
                sources=None, kernel_dirs=None) -> str:
    """The whole report as one self-contained HTML page.

    `boundaries`: fusion_boundaries() of each graph, `sources`: graph_sources() of each
    graph, when the caller has them already. `kernel_dirs`: per graph, the folder (relative
    to the page) where write_report_dir() put its kernels' files, for the links; None when
    no files were written.
    """
    boundaries = _all_boundaries(report, boundaries)
    sources = sources if sources is not None else [graph_sources(report, g)
                                                   for g in report.graphs]
    kernel_dirs = kernel_dirs or [None] * len(report.graphs)
    anchors = _anchors(report)
    head = (f"strategy <b>{escape(report.strategy)}</b> · target <b>{escape(report.target)}</b>"
            f" · {report.num_ops} ops → <b>{report.num_kernels} kernels</b> + "
            f"{report.num_library_calls} library calls · {report.bytes_moved / 1e6:.3f} MB "
            f"moved · planned in {report.planning_seconds * 1e3:.1f} ms")
    out = [f"<h1>{escape(title)}</h1>", f'<p class="lede">{head}</p>',
           f'<p class="note">Modelled bytes and times come from the cost model '
           f'{escape(resolve(report.target).device_spec.name)}. '
           f'Each graph lists its groups (ops as IR text), then the source generated for '
           f'each kernel: shown up to {SOURCE_CAP_LINES} lines, whole in the kernels/ '
           f'folder beside this page.</p>',
           "<h2>Summary</h2>"]
    out += _summary(report, anchors)
    if len(report.graphs) > 1:
        out.append("<nav>" + "".join(f'<a href="#{a}">{escape(g.name)}</a>'
                                     for g, a in zip(report.graphs, anchors)) + "</nav>")
    for g, found, src, folder, anchor in zip(report.graphs, boundaries, sources, kernel_dirs,
                                             anchors):
        out += _graph_section(report, g, found, src, folder, anchor)
    return html_page(title, out)


def html_page(title: str, body: list[str]) -> str:
    """A self-contained page: the report's stylesheet, `body` (HTML lines) in <main>."""
    return "\n".join(["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
                      '<meta name="viewport" content="width=device-width, initial-scale=1">',
                      f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>",
                      *body, "</main></body></html>"]) + "\n"


def boundaries_text(report: Report, boundaries=None) -> str:
    """Every graph's fusion boundaries, one line each (boundaries.txt)."""
    lines = []
    for g, (found, total) in zip(report.graphs, _all_boundaries(report, boundaries)):
        for b in found:
            lines.append(f"{g.name}: #{b.producer} -> #{b.consumer} "
                         f"({len(b.edges)} edge{'s' * (len(b.edges) != 1)}): {b.reason}")
        if total > len(found):
            lines.append(f"{g.name}: ... and {total - len(found)} more pairs of groups")
    return "\n".join(lines) + ("\n" if lines else "")


def _file_names(report: Report) -> list[str]:
    """One file stem per graph: names may repeat (several specialisations of one graph)."""
    seen: dict[str, int] = {}
    out = []
    for g in report.graphs:
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", g.name) or "graph"
        seen[stem] = seen.get(stem, 0) + 1
        out.append(stem if seen[stem] == 1 else f"{stem}_{seen[stem]}")
    return out


_KERNEL_FILE = re.compile(r"k\d{3,}\.(cpp|py)")


def _remove_old_kernels(root: str) -> None:
    """Kernel files a previous report wrote into the same folder (group ids change between
    plans); only names this module writes are removed."""
    if not os.path.isdir(root):
        return
    for folder in os.listdir(root):
        path = os.path.join(root, folder)
        if os.path.isdir(path):
            for name in os.listdir(path):
                if _KERNEL_FILE.fullmatch(name):
                    os.remove(os.path.join(path, name))


def write_report_dir(report: Report, out_dir: str, *, title: str) -> list[str]:
    """Write plan.txt, one SVG per graph, report.html, boundaries.txt and every generated
    kernel (kernels/<graph>/kNNN.cpp|.py, with its group and kernel IR as a header);
    return the paths."""
    os.makedirs(out_dir, exist_ok=True)
    files: dict[str, str] = {}
    plans = [g.plan.to_text() for g in report.graphs if g.plan is not None]
    files["plan.txt"] = str(report) + "\n\n" + "\n".join(plans)
    stems = _file_names(report)
    for stem, g in zip(stems, report.graphs):
        if g.plan is not None:
            files[f"{stem}.svg"] = plan_svg(g.plan, title=f"{title}: {g.name} ({g.kind})")
    found = _all_boundaries(report, None)
    sources = [graph_sources(report, g) for g in report.graphs]
    kernel_dirs = [f"kernels/{stem}" for stem in stems]
    files["report.html"] = report_html(report, title=title, boundaries=found, sources=sources,
                                       kernel_dirs=kernel_dirs)
    files["boundaries.txt"] = boundaries_text(report, found)
    _remove_old_kernels(os.path.join(out_dir, "kernels"))
    for folder, src in zip(kernel_dirs, sources):
        for ks in src.values():
            if ks.source:
                files[f"{folder}/{ks.file_name}"] = ks.file_text
    paths = []
    for name, text in files.items():
        path = os.path.join(out_dir, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(path)
    return paths
