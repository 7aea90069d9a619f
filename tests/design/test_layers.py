"""The import layering of docs/LAYERS.md, checked: no module imports a higher layer.

Every import of every module under fusionstitch/ is read (top level and inside
functions: a deferred import is still a dependency), resolved to the module it names
(`from ..runtime import counters` is `fusionstitch.runtime.counters`), and each edge
from a lower layer to a higher one must be listed in BACK_EDGES with its reason.
The list only shrinks: an edge listed that no longer exists fails too. The second test
does the same for private names (`_x`) imported across modules.
"""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "fusionstitch"

# lowest first; a module's layer is its package's unless MODULE_LAYERS names it
LAYERS = ("base", "ir", "passes", "analysis", "schedule", "codegen", "targets", "tune", "fusion",
          "runtime", "driver", "frontend", "report", "api")
PACKAGE_LAYERS = {"ir": "ir", "passes": "passes", "analysis": "analysis",
                  "schedule": "schedule", "codegen": "codegen", "targets": "targets", "tune": "tune",
                  "fusion": "fusion", "runtime": "runtime", "frontend": "frontend",
                  "report": "report"}
# infrastructure every layer uses, living in a package for now (docs/LAYERS.md)
MODULE_LAYERS = {"fusionstitch.config": "base", "fusionstitch.runtime.cache": "base",
                 "fusionstitch.runtime.counters": "base", "fusionstitch.cli": "api",
                 "fusionstitch.compile": "driver", "fusionstitch.debug": "driver",
                 "fusionstitch": "api"}

# (importer, imported): why the edge is still there
BACK_EDGES: dict[tuple[str, str], str] = {}
# (importer, imported module, name): why a private name still crosses a module boundary
# (none left: a helper another module needs is public)
PRIVATE_IMPORTS: dict[tuple[str, str, str], str] = {}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    if module in MODULE_LAYERS:
        return MODULE_LAYERS[module]
    parts = module.split(".")
    return PACKAGE_LAYERS.get(parts[1], "api") if len(parts) > 1 else "api"


def is_module(name: str) -> bool:
    rel = pathlib.Path(*name.split(".")[1:])
    return (ROOT / rel).with_suffix(".py").exists() or (ROOT / rel / "__init__.py").exists()


def imports():
    """(importer, imported module, imported names) for every fusionstitch import."""
    for path in sorted(ROOT.rglob("*.py")):
        mod = module_name(path)
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "fusionstitch":
                        yield mod, a.name, ()
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "fusionstitch":
                    continue
                plain = []
                for a in node.names:   # `from pkg import module` names that module
                    if is_module(f"{target}.{a.name}"):
                        yield mod, f"{target}.{a.name}", ()
                    else:
                        plain.append(a.name)
                if plain:
                    yield mod, target, tuple(plain)


def test_no_import_goes_up_a_layer():
    found = {(a, b) for a, b, _ in imports()
             if LAYERS.index(layer(b)) > LAYERS.index(layer(a))}
    new = sorted(found - set(BACK_EDGES))
    gone = sorted(set(BACK_EDGES) - found)
    assert not new, "imports up the layers (docs/LAYERS.md):\n" + "\n".join(
        f"  {a} -> {b} ({layer(a)} -> {layer(b)})" for a, b in new)
    assert not gone, f"fixed back edges still listed in BACK_EDGES: {gone}"


def test_no_private_name_crosses_a_module():
    found = {(a, b, n) for a, b, names in imports() for n in names
             if n.startswith("_") and not n.startswith("__") and a != b}
    new = sorted(found - set(PRIVATE_IMPORTS))
    gone = sorted(set(PRIVATE_IMPORTS) - found)
    assert not new, "private names imported across modules:\n" + "\n".join(
        f"  {a} imports {n} from {b}" for a, b, n in new)
    assert not gone, f"fixed private imports still listed: {gone}"
