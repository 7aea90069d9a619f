"""report/render.py: the SVG picture of a plan (well-formed, one box per op, deterministic)."""
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion.plan import plan_from_groups
from fusionstitch.report.render import MAX_OPS_DRAWN, plan_svg, short_op

NS = "{http://www.w3.org/2000/svg}"

# Built the same way in this process and in a subprocess with another hash seed.
PLAN_CODE = '''
import torch
from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion.plan import plan_from_groups

def small_plan(x_name="x"):
    b = GraphBuilder("g")
    x = b.param((4, 8), name=x_name)
    w = b.param((8, 8), name="w")
    m = b.op("mm.default", x, w, name="m")          # alone: a library call
    e = b.op("exp.default", m, name="e")
    n = b.op("neg.default", e, name="n")
    v = b.op("view.default", n, (32,), name="v")    # alone: a free group
    s = b.op("sin.default", x, name="s")
    c = b.constant(torch.ones(4, 8), name="c")
    a = b.op("add.Tensor", s, c, name="a")
    return plan_from_groups(b.build(v, a), [["e", "n"], ["s", "a"]], "test")
'''
exec(PLAN_CODE)


def _classes(root, cls):
    return [el for el in root.iter() if el.get("class") == cls]


def test_svg_is_well_formed_with_one_box_per_op_and_one_hull_per_multi_op_group():
    plan = small_plan()  # noqa: F821 (defined by PLAN_CODE)
    root = ET.fromstring(plan_svg(plan, title="small"))
    assert root.tag == NS + "svg"
    ops = [el for el in root.iter() if (el.get("class") or "").startswith("op ")]
    assert len(ops) == 6                                    # m e n v s a
    assert len(_classes(root, "param")) == 3                # x w c
    assert len(_classes(root, "hull")) == 2                 # {e, n} and {s, a}
    (lib,) = _classes(root, "op library")
    assert lib.find(NS + "text").text == "mm"
    assert lib.find(NS + "rect").get("stroke-width") == "3"
    (free,) = _classes(root, "op free")
    assert free.find(NS + "rect").get("stroke-dasharray")
    labels = {el.text for el in root.iter(NS + "text") if el.get("class") == "hull-label"}
    assert labels == {"#1 fused", "#3 fused"}
    edges = _classes(root, "edge")
    assert len(edges) == 8     # x->m w->m m->e e->n n->v x->s s->a c->a


def test_short_op_drops_the_overload():
    assert [short_op(o) for o in ("add.Tensor", "mm.default", "sum.dim_IntList")] == \
        ["add", "mm", "sum"]


def test_svg_is_deterministic_across_processes():
    svg = plan_svg(small_plan(), title="t")  # noqa: F821
    assert svg == plan_svg(small_plan(), title="t")  # noqa: F821
    code = PLAN_CODE + ("\nimport sys\nfrom fusionstitch.report.render import plan_svg\n"
                        "sys.stdout.write(plan_svg(small_plan(), title='t'))\n")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out == svg


def test_svg_escapes_text():
    plan = small_plan(x_name="x<&>\"y")  # noqa: F821
    svg = plan_svg(plan, title="a <b> & c")
    root = ET.fromstring(svg)
    assert "a <b> & c" in [el.text for el in root.iter(NS + "text")]
    tips = [el.text for el in root.iter(NS + "title")]
    assert any("%x<&>\"y" in t for t in tips)
    assert "<b>" not in svg and "x<&>" not in svg


def test_group_view_above_the_cap():
    b = GraphBuilder("long")
    v = b.param((4,), name="x")
    names = []
    for i in range(MAX_OPS_DRAWN + 1):
        v = b.op("neg.default" if i % 2 else "exp.default", v, name=f"o{i}")
        names.append(f"o{i}")
    plan = plan_from_groups(b.build(v), [names[:200], names[200:]], "test")
    root = ET.fromstring(plan_svg(plan, title="long"))
    title = root.find(NS + "title").text
    assert "group view" in title and str(MAX_OPS_DRAWN) in title
    boxes = [el for el in root.iter() if (el.get("class") or "").startswith("op ")]
    assert len(boxes) == 2 and not _classes(root, "hull")
    assert len(_classes(root, "edge")) == 1
    # the small plan, drawn with a tiny cap: views are left out of the group view
    small = ET.fromstring(plan_svg(small_plan(), max_ops=3))  # noqa: F821
    assert len([el for el in small.iter() if (el.get("class") or "").startswith("op ")]) == 3


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz dot is not installed")
def test_optional_graphviz_layout():
    root = ET.fromstring(plan_svg(small_plan(), title="t", use_dot=True))  # noqa: F821
    assert root.tag == NS + "svg"
