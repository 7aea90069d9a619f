"""Which buffers of a kernel chain live in the calling thread's scratch, not in tensors.

runtime/wrapper.py writes a chain's buffers out as it meets its kernels (`Fresh`: each
one allocated anew, where it stands in the code); when the chain ends, `temporaries`
says which of them no tensor needs to hold: a kernel's own scratch, and an output that
one kernel of the chain writes and only its later kernels read, dead once the chain
returns. Their allocations, and the arguments reading them, move to the chain's
one-by-one branch (`MOVED` marks the lines they left); the chain's target places them
in its scratch (targets/cpp/build.chain). FUSIONSTITCH_CHAIN_SCRATCH=0 (`enabled`)
allocates them as tensors, the A/B.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..config import env_flag_default

# A line taken out of the code where it stood (moved to the chain's `else` branch)
MOVED = None


@dataclass
class Fresh:
    """A buffer a chain's `j`th kernel gets as its argument `position`, allocated anew at
    `line`: an output (of `slot`) or a kernel's scratch (slot None), `nbytes` long; and,
    once it is one of the chain's temporaries (`temporaries`), the arguments of later
    kernels that read it ((kernel, position, line) each)."""
    j: int
    position: int
    slot: int | None
    line: int
    nbytes: int
    readers: list = field(default_factory=list)


def enabled() -> bool:
    """FUSIONSTITCH_CHAIN_SCRATCH=0 allocates a chain's temporaries as tensors (the A/B)."""
    return env_flag_default("FUSIONSTITCH_CHAIN_SCRATCH", True)


def temporaries(lines: list, fresh: list, gone: set, start: int) -> list:
    """The buffers of a pending chain that may live in its scratch (build.chain) rather
    than in tensors: a kernel's scratch, and an output that is dead once the chain ran
    (`gone`: dropped by its steps, not kept for a view, not offered to the pool) and
    that nothing but the chain's own kernels reads: in the code since the chain's
    first buffer (`start`), `values[slot]` stands in its allocation and in arguments
    of later kernels of the chain (`a<j>_<k> = values[slot]`) only. A view of it, an op
    reading it, anything else keeps it a tensor."""
    temps = []
    for f in fresh:
        if f.slot is None:
            temps.append(f)
            continue
        if f.slot not in gone:
            continue
        ref = f"values[{f.slot}]"
        readers, ok = [], True
        for at in range(start, len(lines)):
            line = lines[at]
            if line is MOVED or ref not in line or at == f.line:
                continue
            m = _READER.fullmatch(line)
            if m is None or m.group(3) != str(f.slot) or int(m.group(1)) <= f.j:
                ok = False
                break
            readers.append((int(m.group(1)), int(m.group(2)), at))
        if ok:
            f.readers = readers
            temps.append(f)
    return temps


_READER = re.compile(r"    a(\d+)_(\d+) = values\[(\d+)\]")
