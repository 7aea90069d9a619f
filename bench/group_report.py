"""The per-group A/B's report (bench/groups.py): JSON with every group, a text summary,
and an HTML page with the losing groups' IR, schedule and both sources side by side."""
from __future__ import annotations

import datetime
import html
import json
import math
import os
import re

from bench.group_capture import GroupCase

# a group whose outputs differ from the unfused run's in more than this fraction of the
# elements is listed as a mismatch (selects on computed values flip a few legitimately)
MISMATCH = 0.01


def inductor_kernels(code: str) -> str:
    """The parts of Inductor's output module worth reading: each C++ kernel's source and
    the `call` function that launches them (the imports and boilerplate left out)."""
    parts = re.findall(r"r'''\n(.*?)'''", code, re.S)
    call = re.search(r"\ndef call\(.*?(?=\n\S)", code, re.S)
    if call:
        parts.append(call.group(0).strip())
    return "\n\n".join(p.strip() for p in parts) if parts else code


def _ms(x) -> str:
    return f"{x * 1e3:.3f}" if isinstance(x, float) and math.isfinite(x) else "-"


def _r(x) -> str:
    return f"{x:.2f}" if isinstance(x, float) and math.isfinite(x) else "-"


def _losers(cases: list[GroupCase], loss: float) -> list[GroupCase]:
    out = [c for c in cases if c.results.get("ratio", 0) > loss]
    return sorted(out, key=lambda c: -c.results["ratio"])


def text(cases, rows, classes, meta, top: int, loss: float) -> str:
    lines = [f"# per-group A/B, {meta['date']}, {meta['cpu']}, {meta['torch_threads']} "
             f"thread(s), torch {meta['torch']}", f"command: {meta['command']}", ""]
    for failed in meta.get("failed_programs", ()):
        lines.append(f"FAILED (no groups of it below): {failed}")
    lines.append("ratio = fusionstitch median / inductor median (above 1: we are slower); "
                 "vs_torch = fusionstitch / unfused torch")
    lines.append("")
    lines.append("## classes (worst geomean ratio first)")
    lines.append(f"{'class':44s} {'groups':>6s} {'geomean':>8s} {'worst':>6s} {'vs_torch':>8s}")
    for c in classes:
        lines.append(f"{c['cls'][:44]:44s} {c['groups']:6d} {_r(c['geomean_ratio']):>8s} "
                     f"{_r(c['worst_ratio']):>6s} {_r(c['geomean_vs_torch']):>8s}")
    lose = _losers(cases, loss)
    lines += ["", f"## groups where fusionstitch loses (ratio > {loss}), worst first: "
              f"{len(lose)} of {len(cases)}"]
    lines.append(f"{'ratio':>6s} {'fs ms':>9s} {'ind ms':>9s} {'torch ms':>9s}  "
                 "source graph #group [class] ops numel")
    for c in lose:
        r = c.results
        lines.append(f"{_r(r['ratio']):>6s} {_ms(r.get('fusionstitch_s')):>9s} "
                     f"{_ms(r.get('inductor_s')):>9s} {_ms(r.get('torch_s')):>9s}  "
                     f"{c.source} {c.graph} #{c.group_id} [{c.cls}] {c.n_ops} {c.numel}")
    errors = [c for c in cases if "error" in c.results or "inductor_error" in c.results
              or c.results.get("mismatch_frac", 0) > MISMATCH]
    if errors:
        lines += ["", f"## errors, and outputs off eager's in more than {MISMATCH:.0%} of the "
                  "elements"]
        for c in errors:
            r = c.results
            lines.append(f"{c.source} {c.graph} #{c.group_id}: "
                         f"{r.get('error') or r.get('inductor_error') or ''} "
                         f"max_rel_err={r.get('max_rel_err')} "
                         f"mismatch_frac={r.get('mismatch_frac')}")
    for i, c in enumerate(lose[:top]):
        r = c.results
        lines += ["", f"## {i + 1}. {c.source} {c.graph} #{c.group_id} [{c.cls}]: ratio "
                  f"{_r(r['ratio'])} (ours {_ms(r['fusionstitch_s'])} ms, Inductor "
                  f"{_ms(r['inductor_s'])} ms, torch {_ms(r['torch_s'])} ms)",
                  f"schedule: {c.schedule}", "", "### IR", c.ir_text, "",
                  "### fusionstitch (generated source)", c.cpp, "", "### Inductor",
                  inductor_kernels(r.get("inductor_code", ""))]
    return "\n".join(lines) + "\n"


_CSS = """body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}td.n{text-align:right}
.bad{background:#fdd}.side{display:grid;grid-template-columns:1fr 1fr;gap:8px}
pre{background:#f6f6f6;padding:6px;overflow:auto;max-height:600px;font-size:12px}"""


def page(cases, classes, meta, top: int, loss: float) -> str:
    e = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>per-group A/B</title>"
           f"<style>{_CSS}</style></head><body>",
           f"<h1>Per-group A/B</h1><p>{e(meta['date'])}, {e(meta['cpu'])}, "
           f"{meta['torch_threads']} thread(s), torch {e(meta['torch'])}<br>"
           f"<code>{e(meta['command'])}</code></p>",
           "<p>ratio = fusionstitch median / Inductor median (above 1: we are slower)</p>",
           "<h2>Classes</h2><table><tr><th>class<th>groups<th>geomean ratio<th>worst"
           "<th>vs torch</tr>"]
    for c in classes:
        bad = " class=bad" if c["geomean_ratio"] > loss else ""
        out.append(f"<tr{bad}><td>{e(c['cls'])}<td class=n>{c['groups']}<td class=n>"
                   f"{_r(c['geomean_ratio'])}<td class=n>{_r(c['worst_ratio'])}<td class=n>"
                   f"{_r(c['geomean_vs_torch'])}</tr>")
    out.append("</table>")
    lose = _losers(cases, loss)
    out.append(f"<h2>Losing groups ({len(lose)} of {len(cases)})</h2><table><tr><th>#<th>"
               "ratio<th>ours ms<th>Inductor ms<th>torch ms<th>source<th>graph<th>group"
               "<th>class<th>ops<th>numel</tr>")
    for i, c in enumerate(lose):
        r = c.results
        link = f"<a href='#g{i}'>{i + 1}</a>" if i < top else str(i + 1)
        out.append(f"<tr><td>{link}<td class=n>{_r(r['ratio'])}<td class=n>"
                   f"{_ms(r['fusionstitch_s'])}<td class=n>{_ms(r['inductor_s'])}<td class=n>"
                   f"{_ms(r['torch_s'])}<td>{e(c.source)}<td>{e(c.graph)}<td>{c.group_id}"
                   f"<td>{e(c.cls)}<td class=n>{c.n_ops}<td class=n>{c.numel}</tr>")
    out.append("</table>")
    for i, c in enumerate(lose[:top]):
        r = c.results
        out.append(f"<h3 id='g{i}'>{i + 1}. {e(c.source)} {e(c.graph)} #{c.group_id} "
                   f"[{e(c.cls)}]: ratio {_r(r['ratio'])}</h3>"
                   f"<p>schedule: <code>{e(c.schedule)}</code></p>"
                   f"<details><summary>IR ({c.n_ops} ops)</summary><pre>{e(c.ir_text)}</pre>"
                   f"</details><div class=side><div><b>fusionstitch (generated source)</b><pre>{e(c.cpp)}"
                   f"</pre></div><div><b>Inductor</b><pre>"
                   f"{e(inductor_kernels(r.get('inductor_code', '')))}</pre></div></div>")
    out.append("</body></html>")
    return "\n".join(out)


def write(cases: list[GroupCase], meta: dict, folder: str, tag: str, top: int = 10,
          loss: float | None = None) -> tuple[str, str, str]:
    """Write the json, txt and html of a run; returns their paths."""
    from bench.groups import LOSS, class_summary, row
    loss = LOSS if loss is None else loss
    rows = [row(c) for c in cases]
    classes = class_summary(rows)
    os.makedirs(folder, exist_ok=True)
    day = datetime.date.today().isoformat()
    base = os.path.join(folder, f"groups_{tag}_{day}")
    detail = {id(c): c for c in _losers(cases, loss)[:top]}
    for c, r in zip(cases, rows):
        if id(c) in detail:
            r.update(ir=c.ir_text, cpp=c.cpp,
                     inductor=inductor_kernels(c.results.get("inductor_code", "")))
    with open(base + ".json", "w") as f:
        json.dump({"meta": meta, "classes": classes, "groups": rows}, f, indent=1,
                  default=str)
    with open(base + ".txt", "w") as f:
        f.write(text(cases, rows, classes, meta, top, loss))
    with open(base + ".html", "w") as f:
        f.write(page(cases, classes, meta, top, loss))
    return base + ".json", base + ".txt", base + ".html"
