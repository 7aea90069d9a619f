"""Pictures of fusion plans: a standalone SVG of the fused graph, in pure Python.

The layout is a small layered (Sugiyama-style) drawing, top to bottom:
- layer = longest-path depth of an op; parameters and constants sit one layer
  above their first user, so that they do not all crowd the top row;
- order within a layer by the barycentre of neighbours (a few down/up sweeps),
  keeping the members of one group contiguous so that a group's hull is one
  band per layer;
- x by isotonic regression towards the mean x of neighbours (pool adjacent
  violators), which keeps the order and the minimum gaps.
Above MAX_OPS_DRAWN ops the picture shows the group graph (one box per group)
instead. The output is deterministic: the same plan gives byte-identical SVG
(no set iteration, fixed number formats).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from xml.sax.saxutils import escape

from ..analysis.cost import group_bytes
from ..fusion.plan import FREE, LIBRARY, FusionPlan, is_input, node_kind

# Above this many ops an op-level drawing is unreadable (and its layout slow): draw groups.
MAX_OPS_DRAWN = 400
_SWEEPS = 4                 # barycentre sweeps (down, up, down, up): enough for small DAGs
_LAYER_H = 54               # vertical distance between layers
_BOX_H = 22
_CHAR_W = 6.6               # width of one character of the 11px monospace labels
_GAP = 10                   # horizontal gap between boxes of one group
_GROUP_GAP = 22             # horizontal gap between different groups
_MARGIN = 24
_HEADER_H = 56              # title line and legend
# A qualitative palette (Tableau 10 without its grey, which means "library call").
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
            "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#d4a6c8", "#8cd17d")
_LIB_FILL, _LIB_STROKE = "#d9d9d9", "#404040"


def group_colour(gid: int) -> str:
    """The stable colour of group `gid` (library calls are grey whatever their id)."""
    return PALETTE[gid % len(PALETTE)]


def _tint(hex_colour: str, amount: float) -> str:
    """Mix a colour with white (`amount` of white, 0..1)."""
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    mix = [round(c + (255 - c) * amount) for c in (r, g, b)]
    return "#" + "".join(f"{c:02x}" for c in mix)


def _shade(hex_colour: str) -> str:
    """A darker version of a colour (readable text on white)."""
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c * 0.6):02x}" for c in (r, g, b))


def short_op(op: str) -> str:
    """`add.Tensor` -> `add`, `sum.dim_IntList` -> `sum` (the overload is noise in a picture)."""
    return op.split(".", 1)[0]


def _f(x: float) -> str:
    return f"{x:.1f}"


def _t(s: str) -> str:
    return escape(s)


@dataclass
class _Box:
    key: str          # node name, or "g<id>" in the group view
    label: str
    tooltip: str
    gid: int | None   # owning group, None for parameters / constants
    kind: str         # kernel | library | free | input
    width: float
    output: bool = False
    view: bool = False  # moves no data (drawn dashed)
    layer: int = 0
    x: float = 0.0    # centre
    y: float = 0.0    # top


# --- layout --------------------------------------------------------------------------------

def _layers(keys: list[str], preds: dict[str, list[str]], inputs: set[str],
            views: set[str]) -> dict[str, int]:
    """Longest-path depth, then a node moves down as far as its users allow when that
    shortens edges: when it has more users than (non-input) producers, or when it is a
    view of inputs, directly or through such views (weight transposes, per-step input
    slices sit by their user). Parameters and constants sit just above their first user."""
    layer: dict[str, int] = {}
    own = {k: [p for p in preds[k] if p not in inputs] for k in keys}
    from_inputs: dict[str, bool] = {}
    for k in keys:  # keys are in topological order
        layer[k] = 1 + max((layer[p] for p in own[k]), default=0)
        from_inputs[k] = k in views and all(from_inputs[p] for p in own[k])
    succ = _invert(keys, preds)
    for k in reversed(keys):
        if k not in inputs and succ[k] and (len(own[k]) < len(succ[k]) or from_inputs[k]):
            layer[k] = max(layer[k], min(layer[s] for s in succ[k]) - 1)
    for k in keys:
        if k in inputs:
            layer[k] = max(0, min((layer[s] for s in succ[k]), default=1) - 1)
    return layer


def _invert(keys: list[str], preds: dict[str, list[str]]) -> dict[str, list[str]]:
    succ: dict[str, list[str]] = {k: [] for k in keys}
    for k in keys:
        for p in preds[k]:
            succ[p].append(k)
    return succ


def _order(rows: list[list[_Box]], preds, succ, index) -> None:
    """Barycentre sweeps in place; a group's members stay contiguous within a row."""
    def frac(rows_):
        return {b.key: (i + 0.5) / len(r) for r in rows_ for i, b in enumerate(r)}

    for sweep in range(_SWEEPS):
        pos = frac(rows)
        nbrs = preds if sweep % 2 == 0 else succ
        seq = range(len(rows)) if sweep % 2 == 0 else range(len(rows) - 1, -1, -1)
        for li in seq:
            row = rows[li]
            bary = {}
            for b in row:
                ns = [pos[n] for n in nbrs[b.key]]
                bary[b.key] = sum(ns) / len(ns) if ns else pos[b.key]
            gmean: dict[object, list[float]] = {}
            for b in row:
                gmean.setdefault(b.gid if b.gid is not None else b.key, []).append(bary[b.key])
            gkey = {g: sum(v) / len(v) for g, v in gmean.items()}
            row.sort(key=lambda b: (gkey[b.gid if b.gid is not None else b.key],
                                    b.gid if b.gid is not None else -1,
                                    bary[b.key], index[b.key]))
            pos.update({b.key: (i + 0.5) / len(row) for i, b in enumerate(row)})


def _isotonic(target: list[float]) -> list[float]:
    """Least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []   # [mean, weight]
    for t in target:
        blocks.append([t, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2 = blocks.pop()
            m1, w1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    out: list[float] = []
    for m, w in blocks:
        out.extend([m] * int(w))
    return out


def _place_row(row: list[_Box], desired: list[float]) -> None:
    offsets, acc = [], 0.0
    for i, b in enumerate(row):
        if i:
            prev = row[i - 1]
            same = prev.gid is not None and prev.gid == b.gid
            acc += prev.width / 2 + b.width / 2 + (_GAP if same else _GROUP_GAP)
        offsets.append(acc)
    fit = _isotonic([d - o for d, o in zip(desired, offsets)])
    for b, y, o in zip(row, fit, offsets):
        b.x = y + o


def _layout(boxes: list[_Box], preds: dict[str, list[str]], inputs: set[str]
            ) -> tuple[float, float]:
    keys = [b.key for b in boxes]
    index = {k: i for i, k in enumerate(keys)}
    by_key = {b.key: b for b in boxes}
    layer = _layers(keys, preds, inputs, {b.key for b in boxes if b.view})
    nrows = 1 + max(layer.values(), default=0)
    rows: list[list[_Box]] = [[] for _ in range(nrows)]
    for b in boxes:
        b.layer = layer[b.key]
        rows[b.layer].append(b)
    rows = [r for r in rows if r]
    for i, r in enumerate(rows):
        for b in r:
            b.layer = i
    succ = _invert(keys, preds)
    _order(rows, preds, succ, index)
    for r in rows:  # initial packing
        _place_row(r, [0.0] * len(r))
    for sweep in range(_SWEEPS):
        nbrs = preds if sweep % 2 == 0 else succ
        seq = rows if sweep % 2 == 0 else rows[::-1]
        for r in seq:
            desired = []
            for b in r:
                xs = [by_key[n].x for n in nbrs[b.key]]
                desired.append(sum(xs) / len(xs) if xs else b.x)
            _place_row(r, desired)
    left = min(b.x - b.width / 2 for b in boxes)
    for b in boxes:
        b.x += _MARGIN - left
        b.y = _HEADER_H + _MARGIN + b.layer * _LAYER_H
    width = max(b.x + b.width / 2 for b in boxes) + _MARGIN
    height = _HEADER_H + _MARGIN * 2 + (len(rows) - 1) * _LAYER_H + _BOX_H
    return width, height


# --- the two views -------------------------------------------------------------------------

def _op_view(plan: FusionPlan):
    g = plan.graph
    owner = {n: grp for grp in plan.groups for n in grp.nodes}
    boxes, preds, inputs = [], {}, set()
    for node in g.nodes:
        if is_input(node):
            inputs.add(node.name)
            boxes.append(_Box(node.name, "", f"%{node.name}: {node.type} ({node.op})", None,
                              "input", 10.0))
        else:
            grp = owner.get(node.name)
            label = short_op(node.op)
            where = f"group #{grp.id} {grp.kind}/{grp.composition}" if grp else "no group"
            boxes.append(_Box(node.name, label, f"%{node.name}: {node.type} = {node.op}  "
                              f"[{where}]", grp.id if grp else None,
                              grp.kind if grp else "kernel",
                              max(34.0, len(label) * _CHAR_W + 14),
                              view=node_kind(node) == FREE))
        preds[node.name] = list(dict.fromkeys(node.inputs))
    outs = g.output_names
    for b in boxes:
        b.output = b.key in outs
    return boxes, preds, inputs


def kernel_producers(plan: FusionPlan, owner: dict, name: str, memo: dict) -> list[str]:
    """The kernel / library nodes value %name comes from, looking through free groups (views);
    `owner` maps node names to groups, `memo` is a cache the caller keeps."""
    if name in memo:
        return memo[name]
    grp = owner.get(name)
    if grp is None:
        out = []            # a parameter or constant: an input of the plan
    elif grp.kind != FREE:
        out = [name]
    else:
        out = []
        for i in dict.fromkeys(plan.graph[name].inputs):
            out += [p for p in kernel_producers(plan, owner, i, memo) if p not in out]
    memo[name] = out
    return out


def _group_view(plan: FusionPlan):
    """Kernels and library calls; views (free groups) are looked through, not drawn."""
    g = plan.graph
    owner = {n: grp for grp in plan.groups for n in grp.nodes}
    memo: dict[str, list[str]] = {}
    outs = g.output_names
    boxes, preds = [], {}
    for grp in plan.groups:
        if grp.kind == FREE:
            continue
        key = f"g{grp.id}"
        ops = [short_op(g[n].op) for n in grp.nodes]
        label = f"#{grp.id} {grp.composition} \u00b7 {len(ops)} op{'s' * (len(ops) != 1)}"
        if len(ops) == 1:
            label = f"#{grp.id} {ops[0]}"
        tip = (f"group #{grp.id} {grp.kind}/{grp.composition}, {len(ops)} ops, "
               f"{group_bytes(g, grp.nodes)} bytes: " + " ".join(ops))
        boxes.append(_Box(key, label, tip, grp.id, grp.kind,
                          max(34.0, len(label) * _CHAR_W + 14),
                          output=any(n in outs for n in grp.nodes)))
        ps = [f"g{owner[p].id}" for n in grp.nodes for i in g[n].inputs
              for p in kernel_producers(plan, owner, i, memo)]
        preds[key] = [p for p in dict.fromkeys(ps) if p != key]
    return boxes, preds, set()


# --- drawing -------------------------------------------------------------------------------

def _hull(members: list[_Box]) -> str:
    """A polygon around a group: one padded band per layer, joined between layers."""
    rows: dict[int, list[float]] = {}
    for b in members:
        lo, hi = b.x - b.width / 2, b.x + b.width / 2
        r = rows.setdefault(b.layer, [lo, hi, b.y])
        r[0], r[1] = min(r[0], lo), max(r[1], hi)
    pad, top_pad = 7.0, 15.0   # room above the first row for the group label
    order = sorted(rows)
    right, left = [], []
    for i, li in enumerate(order):
        lo, hi, y = rows[li]
        top = y - (top_pad if i == 0 else pad)
        right += [(hi + pad, top), (hi + pad, y + _BOX_H + pad)]
        left += [(lo - pad, top), (lo - pad, y + _BOX_H + pad)]
    pts = right + left[::-1]
    return "M" + " L".join(f"{_f(x)},{_f(y)}" for x, y in pts) + " Z"


def _box_svg(b: _Box, legend: bool = False) -> list[str]:
    tip = f"<title>{_t(b.tooltip)}</title>"
    if b.kind == "input":
        cls = "legend-key" if legend else "param"
        return [f'<circle class="{cls}" cx="{_f(b.x)}" cy="{_f(b.y + _BOX_H / 2)}" r="5" '
                f'fill="#ffffff" stroke="#777777" stroke-width="1.2">{tip}</circle>']
    x0 = b.x - b.width / 2
    if b.kind == LIBRARY:
        fill, stroke, extra = _LIB_FILL, _LIB_STROKE, ' stroke-width="3"'
    elif b.kind == FREE:   # a group of views only: no kernel, so no colour
        fill, stroke, extra = "#ffffff", "#888888", ' stroke-width="1.2"'
    else:
        base = group_colour(b.gid or 0)
        fill, stroke, extra = _tint(base, 0.55), base, ' stroke-width="1.4"'
    if b.view or b.kind == FREE:
        extra += ' stroke-dasharray="4 2"'
    cls = {"kernel": "op kernel", LIBRARY: "op library", FREE: "op free"}.get(b.kind, "op")
    cls = "legend-key" if legend else cls
    out = [f'<g class="{cls}">{tip}'
           f'<rect x="{_f(x0)}" y="{_f(b.y)}" width="{_f(b.width)}" height="{_BOX_H}" rx="6" '
           f'fill="{fill}" stroke="{stroke}"{extra}/>'
           f'<text x="{_f(b.x)}" y="{_f(b.y + 15)}" text-anchor="middle">{_t(b.label)}</text>']
    if b.output:   # a small "returned" tick under graph outputs
        out.append(f'<path d="M{_f(b.x - 4)},{_f(b.y + _BOX_H + 1)} l4,5 l4,-5 Z" '
                   f'fill="#222222"/>')
    out.append("</g>")
    return out


def _edge_svg(a: _Box, b: _Box, marker: str) -> str:
    x1, y1 = a.x, a.y + (_BOX_H / 2 + 5 if a.kind == "input" else _BOX_H)
    x2, y2 = b.x, b.y - 1
    dy = max(12.0, (y2 - y1) / 2)
    inside = a.gid is not None and a.gid == b.gid
    if a.kind == "input":
        colour, width = "#b0b0b0", "0.9"
    elif inside:
        colour, width = _tint(group_colour(a.gid), 0.0), "1.1"
    else:   # a value leaving its group: a round trip through memory
        colour, width = "#555555", "1.3"
    return (f'<path class="edge" d="M{_f(x1)},{_f(y1)} C{_f(x1)},{_f(y1 + dy)} '
            f'{_f(x2)},{_f(y2 - dy)} {_f(x2)},{_f(y2)}" fill="none" stroke="{colour}" '
            f'stroke-width="{width}" marker-end="url(#{marker})"/>')


def _legend(y: float) -> tuple[list[str], float]:
    """The legend row and the x where it ends."""
    items, x, out = [("kernel op", "kernel"), ("library call", LIBRARY), ("view (free)", FREE),
                     ("parameter / constant", "input")], _MARGIN, []
    for label, kind in items:
        b = _Box("legend", "", label, 0, kind, 22.0)
        b.x, b.y = x + 11, y
        out += _box_svg(b, legend=True)
        out.append(f'<text class="legend" x="{_f(x + 28)}" y="{_f(y + 15)}">{_t(label)}</text>')
        x += 40 + len(label) * _CHAR_W
    out.append(f'<path d="M{_f(x + 7)},{_f(y + 8)} l4,5 l4,-5 Z" fill="#222222"/>'
               f'<text class="legend" x="{_f(x + 20)}" y="{_f(y + 15)}">graph output</text>')
    return out, x + 20 + len("graph output") * _CHAR_W


def plan_svg(plan: FusionPlan, *, title: str = "", max_ops: int = MAX_OPS_DRAWN,
             use_dot: bool = False) -> str:
    """A standalone SVG picture of the fused graph (ops coloured by group, hulls around groups).

    Above `max_ops` ops the group graph is drawn instead (and the title says so).
    `use_dot=True` lays out with graphviz `dot` when it is on PATH (else the built-in layout).
    """
    g = plan.graph
    n_ops = sum(1 for n in g.nodes if not is_input(n))
    group_view = n_ops > max_ops
    if group_view:
        title = (f"{title} " if title else "") + (f"(group view: {n_ops} ops is above the "
                                                 f"{max_ops}-op cap; one box per kernel or "
                                                 f"library call, views left out)")
    if use_dot and shutil.which("dot"):
        return _dot_svg(plan, title, group_view)
    boxes, preds, inputs = _group_view(plan) if group_view else _op_view(plan)
    by_key = {b.key: b for b in boxes}
    width, height = _layout(boxes, preds, inputs) if boxes else (200.0, _HEADER_H + 40.0)
    legend, legend_end = _legend(30.0)
    # the title is 13px bold: about 1.25 label characters wide per character
    min_width = max(legend_end + _MARGIN, 2 * _MARGIN + len(title or g.name) * _CHAR_W * 1.25)
    if width < min_width:   # room for the title and legend; centre the drawing under them
        for b in boxes:
            b.x += (min_width - width) / 2
        width = min_width
    marker = "arrow-" + (re.sub(r"[^A-Za-z0-9_-]", "_", g.name) or "g")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="fusion-plan" '
             f'width="{_f(width)}" height="{_f(height)}" viewBox="0 0 {_f(width)} {_f(height)}" '
             f'font-family="ui-monospace, SFMono-Regular, Menlo, Consolas, monospace" '
             f'font-size="11">',
             f"<title>{_t(title or g.name)}</title>",
             f'<defs><marker id="{marker}" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" '
             f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 Z" '
             f'fill="#555555"/></marker></defs>',
             '<rect width="100%" height="100%" fill="#ffffff"/>',
             f'<text class="title" x="{_MARGIN}" y="22" font-size="13" font-weight="bold">'
             f'{_t(title or g.name)}</text>']
    parts += legend
    labels: list[str] = []
    if not group_view:   # hulls behind everything
        members: dict[int, list[_Box]] = {}
        for b in boxes:
            if b.gid is not None:
                members.setdefault(b.gid, []).append(b)
        for grp in plan.groups:
            ms = members.get(grp.id, [])
            if len(ms) < 2:
                continue
            colour = _LIB_STROKE if grp.kind == LIBRARY else group_colour(grp.id)
            top = min(ms, key=lambda b: (b.y, b.x - b.width / 2))
            lo = min(b.x - b.width / 2 for b in ms if b.layer == top.layer)
            parts.append(f'<g class="hull"><title>group #{grp.id} {_t(grp.kind)}/'
                         f'{_t(grp.composition)}: {len(ms)} ops</title>'
                         f'<path d="{_hull(ms)}" fill="{colour}" fill-opacity="0.10" '
                         f'stroke="{colour}" stroke-opacity="0.55" stroke-width="1.2" '
                         f'stroke-linejoin="round"/></g>')
            # drawn last, on a white halo, so that edges and other hulls never hide it
            labels.append(f'<text class="hull-label" x="{_f(lo - 4)}" y="{_f(top.y - 5)}" '
                          f'font-size="10" font-weight="bold" fill="{_shade(colour)}" '
                          f'stroke="#ffffff" stroke-width="3" paint-order="stroke">'
                          f'#{grp.id} {_t(grp.composition)}</text>')
    for b in boxes:
        for p in preds[b.key]:
            parts.append(_edge_svg(by_key[p], b, marker))
    for b in boxes:
        parts += _box_svg(b)
    parts += labels
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# --- optional: graphviz ----------------------------------------------------------------------

def _dot_svg(plan: FusionPlan, title: str, group_view: bool) -> str:
    """Lay out with graphviz `dot` (clusters per group); only when asked and installed."""
    g = plan.graph

    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"digraph {q(g.name)} {{", f"  label={q(title or g.name)}; labelloc=t;",
             '  node [shape=box style="rounded,filled" fontname=monospace fontsize=10];']
    if group_view:   # as the built-in group view: kernels and library calls, through views
        boxes, preds, _ = _group_view(plan)
        for b in boxes:
            fill = _LIB_FILL if b.kind == LIBRARY else _tint(group_colour(b.gid), 0.55)
            lines.append(f"  {q(b.key)} [label={q(b.label)} fillcolor={q(fill)}];")
        for b in boxes:
            lines += [f"  {q(p)} -> {q(b.key)};" for p in preds[b.key]]
    else:
        for grp in plan.groups:
            lines.append(f"  subgraph {q('cluster_' + str(grp.id))} {{ "
                         f"label={q(f'#{grp.id} {grp.composition}')}; "
                         f"color={q(group_colour(grp.id))};")
            for n in grp.nodes:
                fill = _LIB_FILL if grp.kind == LIBRARY else _tint(group_colour(grp.id), 0.55)
                style = ' style="rounded,dashed,filled"' if node_kind(g[n]) == FREE else ""
                lines.append(f"    {q(n)} [label={q(short_op(g[n].op))} "
                             f"fillcolor={q(fill)}{style}];")
            lines.append("  }")
        for node in g.nodes:
            if is_input(node):
                lines.append(f"  {q(node.name)} [shape=circle label=\"\" width=0.12];")
            for i in dict.fromkeys(node.inputs):
                lines.append(f"  {q(i)} -> {q(node.name)};")
    lines.append("}")
    res = subprocess.run(["dot", "-Tsvg"], input="\n".join(lines), capture_output=True,
                         text=True, check=True)
    svg = res.stdout
    return svg[svg.index("<svg"):]   # drop the XML prolog and doctype: embeddable as is
