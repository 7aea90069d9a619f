"""What Dynamo saw while a block ran: the frames it was asked to convert, and its graphs.

    with watch() as seen:
        compiled(x)
    seen.frames        # "path:function" of every code object Dynamo tried to trace
    seen.graphs        # graphs Dynamo handed to a backend (counters["stats"]["unique_graphs"])

Dynamo records each code object its frame callback is given in
`torch._dynamo.convert_frame.input_codes` (frames its skip rules let through, before
it traces them: what it would turn into a graph or a graph break); there is no public
hook for that. Callers assert that the user's own function shows up, so a torch that
stops recording there fails the test instead of passing it vacuously.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

import torch
from torch._dynamo import convert_frame
from torch._dynamo.utils import counters

import fusionstitch

PACKAGE_DIR = os.path.dirname(os.path.abspath(fusionstitch.__file__)) + os.sep


@dataclass
class Seen:
    frames: list[str] = field(default_factory=list)
    graphs: int = 0

    def ours(self) -> list[str]:
        """Frames of fusionstitch's own code."""
        return [f for f in self.frames if f.startswith(PACKAGE_DIR)]

    def saw(self, fn) -> bool:
        code = fn.__code__
        return f"{os.path.abspath(code.co_filename)}:{code.co_name}" in self.frames


@contextlib.contextmanager
def watch():
    """Record the frames Dynamo converts and the graphs it makes inside the block."""
    tracker = convert_frame.input_codes
    before = len(tracker.seen)
    graphs = counters["stats"]["unique_graphs"]
    seen = Seen()
    try:
        yield seen
    finally:
        for ref in tracker.seen[before:]:
            code = ref()
            if code is not None:
                seen.frames.append(f"{os.path.abspath(code.co_filename)}:{code.co_name}")
        seen.graphs = counters["stats"]["unique_graphs"] - graphs


def counting_aot_backend(counts: dict, eager_backward: bool = False):
    """AOTAutograd running the graphs as they are (aot_eager), counting the forward,
    backward and inference graphs it compiles in `counts`: the graphs a backend gets.
    `eager_backward`: each backward compiled with its forward (as our lean training
    runtime has AOTAutograd do, frontend/lean_training.py), not at its first call."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from fusionstitch.frontend import lean_training

    def compiler(kind):
        def compile_graph(gm, _):
            counts[kind] = counts.get(kind, 0) + 1
            return make_boxed_func(gm.forward)
        return compile_graph

    def backend(gm, example_inputs):
        capture = lean_training.Capture()
        aot = aot_autograd(fw_compiler=capture.forward_compiler(compiler("forward")),
                           bw_compiler=compiler("backward"),
                           inference_compiler=compiler("inference"))
        if not eager_backward:
            return aot(gm, example_inputs)
        with lean_training.eager_backward():
            compiled = aot(gm, example_inputs)
        # no donated buffers, as with our backend (aot_eager uses none either): an eagerly
        # compiled backward keeps the check that a create_graph backward would fail
        lean_training.undonate(capture)
        return compiled
    return backend


def reset() -> None:
    torch._dynamo.reset()
    counters.clear()
