"""Legality is decided in one place: fusion/legality.py (`Legality`: op, group, lowers).

Every module of fusionstitch is read (imports at any depth, and calls): only the seam
imports the rules it is made of (the op rule `fusible`, the schedule verdict, the
code generator's rule table, tentative lowering), and only the seam asks a target's
`can_lower`. A planner or stage that wants a verdict asks a `Legality`; a new entry
point beside it fails here. The profitability rules (profit.py) read the kernel through
the seam too (`Legality.kernel`).
"""
import ast

import test_layers
from test_layers import imports, module_name

SEAM = "fusionstitch.fusion.legality"
# the pieces a legality verdict is made of, and where each is defined
PIECES = {
    (SEAM, "fusible"), (SEAM, "schedule_verdict"), (SEAM, "tentative_lower"),
    (SEAM, "check_group"),
    ("fusionstitch.codegen.lowerings", "SUPPORTED_OPS"),
    ("fusionstitch.codegen.lower", "lower_group"),
}
# modules that define a piece or lower for real (not a verdict): codegen itself, the
# targets (whose `lower` and `can_lower` are the code generator's side of the seam)
OWNERS = ("fusionstitch.codegen", "fusionstitch.targets")


def _outside(module: str) -> bool:
    return module != SEAM and not module.startswith(OWNERS)


def bypasses():
    """(module, what) for each piece imported, or `can_lower` called, outside the seam."""
    for a, b, names in imports():
        for n in names:
            if (b, n) in PIECES and _outside(a):
                yield a, f"imports {n} from {b}"
    for path in sorted(test_layers.ROOT.rglob("*.py")):
        mod = module_name(path)
        if not _outside(mod):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "can_lower"):
                yield mod, f"asks can_lower (line {node.lineno})"


def test_only_the_seam_decides_legality():
    found = sorted(set(bypasses()))
    assert not found, "legality decided outside fusion/legality.py:\n" + "\n".join(
        f"  {a} {what}" for a, what in found)


def test_the_planners_and_legalize_ask_the_seam():
    askers = {a for a, b, names in imports() if b == SEAM and "Legality" in names}
    assert {"fusionstitch.fusion.stitch", "fusionstitch.fusion.xla",
            "fusionstitch.fusion.codegen_legal"} <= askers, askers


def test_the_checker_sees_a_bypass(tmp_path, monkeypatch):
    """A module importing a piece, or asking can_lower itself, is found."""
    pkg = tmp_path / "fusionstitch" / "fusion"
    pkg.mkdir(parents=True)
    (tmp_path / "fusionstitch" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "legality.py").write_text("def tentative_lower(): pass\n")
    (pkg / "rogue.py").write_text("from .legality import tentative_lower\n"
                                  "def f(t, g, n):\n    return t.can_lower(g, n)\n")
    monkeypatch.setattr(test_layers, "ROOT", tmp_path / "fusionstitch")
    assert sorted(bypasses()) == [
        ("fusionstitch.fusion.rogue", "asks can_lower (line 3)"),
        ("fusionstitch.fusion.rogue", f"imports tentative_lower from {SEAM}")]
