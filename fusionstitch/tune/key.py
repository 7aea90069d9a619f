"""Keys of the performance library: what a measured time is a time of.

A fusion pattern (a set of nodes of a graph) is keyed by
- its structure: its ops in graph order, their literal arguments, the edges between
  them, which of them leave the pattern, and every value's dtype and rank; node names
  do not enter (they are counters and FX's choices), a node is named by its place;
- its shape bucket: every value's sizes, each rounded up to a power of two past
  `EXACT_BELOW` (a pattern measured at 1000 rows stands for 1024; sizes are only
  advice to the planner, never to the code, so sharing a bucket costs at most speed);
- its dtypes, the target, and the machine (`machine()`): the CPU or GPU, the thread
  count, the compiler, torch / triton / fusionstitch versions and a digest of the code
  generator's sources, so a time measured elsewhere, or by other code, is never used.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from ..ir.graph import CONSTANT, Graph, Ref, TensorLiteral, TensorType
from ..runtime.cache import digest
from ..targets import resolve

# sizes and integer literals at or below this are kept exactly (dims, small extents)
EXACT_BELOW = 16


def bucket(n: int) -> int:
    """`n`, or past EXACT_BELOW the power of two at or above it."""
    if not isinstance(n, int) or n <= EXACT_BELOW:
        return n
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class PatternKey:
    structure: str    # "<op_signature>-<digest of the canonical structure>"
    shapes: str       # the shape bucket, readable
    dtype: str        # the dtypes of the pattern's values, sorted, comma-joined


def _literal(value, names: dict[str, str]) -> str:
    if isinstance(value, Ref):
        return names.get(value.name, "?")
    if isinstance(value, tuple):
        return "(" + ",".join(_literal(v, names) for v in value) + ")"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        b = bucket(abs(value))
        return str(value) if b == abs(value) else f"{'-' if value < 0 else ''}~{b}"
    if isinstance(value, float):
        return value.hex() if value == value else "nan"
    if isinstance(value, TensorLiteral):
        return f"lit[{value.type.dtype}:{value.type.rank}:{digest(value.to_bytes())}]"
    return repr(value)


def _type(t) -> tuple[str, str]:
    """(dtype and rank, bucketed shape) of a value's type."""
    if isinstance(t, TensorType):
        return f"{t.dtype}/{t.rank}", "x".join(str(bucket(d)) for d in t.shape)
    return str(type(t).__name__), "?"


def pattern_key(graph: Graph, pattern, position: dict[str, int] | None = None) -> PatternKey:
    """The key of `pattern` (node names of `graph`): see the module doc. `position`: the
    graph's node name -> index (pass it when keying many patterns of one graph)."""
    if position is None:
        position = {n.name: i for i, n in enumerate(graph.nodes)}
    members = sorted(pattern, key=position.__getitem__)
    inside = set(members)
    outputs = graph.output_names
    names: dict[str, str] = {}
    lines, shapes, dtypes = [], [], set()
    for m in members:   # inputs from outside, numbered by first use
        for i in graph[m].inputs:
            if i not in inside and i not in names:
                node = graph[i]
                names[i] = f"i{len(names)}"
                ty, sh = _type(node.type)
                const = ""
                if node.op == CONSTANT:
                    const = " const " + _literal(node.kwarg("value"), {})
                lines.append(f"{names[i]}: {ty}{const}")
                shapes.append(sh)
                dtypes.add(ty.split("/")[0])
    for k, m in enumerate(members):
        node = graph[m]
        names[m] = f"v{k}"
        ty, sh = _type(node.type)
        leaves = m in outputs or any(u not in inside for u in graph.users[m])
        args = ",".join(_literal(a, names) for a in node.args)
        kwargs = ",".join(f"{k}={_literal(v, names)}" for k, v in node.kwargs)
        lines.append(f"v{k}{'*' if leaves else ''} = {node.op}({args};{kwargs}): {ty}")
        shapes.append(sh)
        dtypes.add(ty.split("/")[0])
    return PatternKey(f"{op_signature(graph, pattern)}-{digest(chr(10).join(lines))}",
                      " ".join(shapes), ",".join(sorted(dtypes)))


def op_signature(graph: Graph, pattern) -> str:
    """The multiset of the pattern's op names, digested: the head of its structure key, and
    cheap to compute, so a planner can skip keying patterns the library cannot hold."""
    return digest(*sorted(graph[m].op for m in pattern))[:8]


def _source_digest(folder: str) -> str:
    root = Path(__file__).resolve().parent.parent / folder
    parts = []
    for path in sorted(root.rglob("*.py")):     # a target's printer lives in a subfolder
        parts += [path.relative_to(root).as_posix(), path.read_text(errors="replace")]
    return digest(*parts)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_machine(target: str) -> str:
    """What a measured time depends on besides the kernel, in words (stored beside the
    machine's digest for people reading the library)."""
    return f"{_fixed(target)}; threads {torch.get_num_threads()}"


@lru_cache(maxsize=None)
def _fixed(target: str) -> str:
    """The parts of describe_machine that cannot change while a process runs."""
    from ..config import __version__
    parts = [f"target {target}", f"fusionstitch {__version__}", f"torch {torch.__version__}",
             f"codegen {_source_digest('codegen')}", f"targets {_source_digest('targets')}",
             f"runtime {_source_digest('runtime')}",
             f"cpu {cpu_model()} x{os.cpu_count()}"]
    parts += resolve(target).toolchain()   # its compiler (C++, Triton), its GPU
    return "; ".join(parts)


def machine(target: str) -> str:
    """The digest of `describe_machine(target)`: the machine part of every key."""
    return digest(describe_machine(target))
