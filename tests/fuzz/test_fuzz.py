"""Differential fuzzing: random torch programs through the backend against eager.

`programs.py` draws the programs, `check.py` runs and compares them. CI runs a fixed,
deterministic share (hypothesis derandomized, no example database); a larger share runs
on request:

    FUSIONSTITCH_FUZZ_EXAMPLES=5000 python -m pytest tests/fuzz -q

and other programs than the ones CI draws (a different deterministic stream per seed):

    FUSIONSTITCH_FUZZ_SEED=7 FUSIONSTITCH_FUZZ_EXAMPLES=2000 python -m pytest tests/fuzz -q

A failure prints a one-line repro (`python tests/fuzz/check.py '<json>'`); each bug found
is kept as a regression program in `regressions.py`, which every run checks first.
"""
from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, seed, settings

from check import check, repro_line
from programs import Program, programs
from regressions import REGRESSIONS

# programs per CI run (per test below); FUSIONSTITCH_FUZZ_EXAMPLES asks for more
EXAMPLES = int(os.environ.get("FUSIONSTITCH_FUZZ_EXAMPLES", "0") or 0)
# shrinking recompiles hundreds of variants of a failing program (minutes each): on request
SHRINK = os.environ.get("FUSIONSTITCH_FUZZ_SHRINK", "") not in ("", "0")
PHASES = [Phase.explicit, Phase.generate] + ([Phase.shrink] if SHRINK else [])
# unset: each test's own derandomized stream (CI's); a number: another fixed stream
SEED = os.environ.get("FUSIONSTITCH_FUZZ_SEED", "").strip()


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")   # an internal error fails the case
    yield
    torch._dynamo.reset()


def _fuzz(count: int):
    chosen = settings(max_examples=EXAMPLES or count, derandomize=True, database=None,
                      deadline=None, print_blob=False, phases=PHASES,
                      suppress_health_check=list(HealthCheck))
    if not SEED:
        return chosen
    return lambda test: seed(int(SEED))(chosen(test))   # hypothesis: a seed beats derandomize


def _assert_ok(prog: Program, target: str, dynamic: bool = False) -> None:
    why = check(prog, target, dynamic)
    assert why is None, f"{why}\nrepro: {repro_line(prog, target, dynamic)}\n{prog.source()}"


@pytest.mark.parametrize("index", range(len(REGRESSIONS)))
def test_regression(index):
    line, target = REGRESSIONS[index]
    _assert_ok(Program.from_json(line), target)


@_fuzz(200)
@given(prog=programs(train=False))
def test_inference_programs(prog):
    _assert_ok(prog, "cpu")


@_fuzz(60)
@given(prog=programs(train=True))
def test_training_programs(prog):
    _assert_ok(prog, "cpu")


@_fuzz(12)
@given(prog=programs(max_ops=6))
def test_interpret_programs(prog):
    """The Triton kernels, through Triton's interpreter (slow: few and small)."""
    _assert_ok(prog, "interpret")


@_fuzz(30)
@given(prog=programs(max_ops=8))
def test_dynamic_programs(prog):
    """Compiled with dynamic=True: one symbolic program, right at the program's sizes and
    at grown ones (check.resized)."""
    _assert_ok(prog, "cpu", dynamic=True)


@settings(max_examples=1500, derandomize=True, database=None, deadline=None,
          phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(prog=programs(train=False, max_ops=8))
def test_generated_programs_never_update_an_input_from_a_view_of_it(prog):
    """The generator's own rule (eager alone, no compile): an in-place update reads no
    view of the tensor it writes, which eager refuses ("some elements of the input tensor
    and the written-to tensor refer to a single memory location"); the dynamic fuzzer
    drew `a1.copy_(a1.select(0, -2))` at 2000 examples."""
    from check import function, make_inputs, run
    out = run(prog, function(prog), make_inputs(prog))
    assert out.error is None or "single memory location" not in str(out.error), \
        prog.source()


def test_live_drops_what_no_output_reads_and_keeps_in_place_updates():
    # torch.compile drops dead code (AOTAutograd), so eager raising in it (an integer
    # division by zero) is no error of ours: check.py judges against the live part
    from programs import Program
    p = Program([], ["v0 = a0 + 1", "v1 = a1 // a1", "v2 = v0 * 2", "v3 = a0.sin()",
                     "v3.add_(v0)", "v4 = v2 + v3"], ["v2"])
    assert p.live().body == ["v0 = a0 + 1", "v2 = v0 * 2", "v3 = a0.sin()", "v3.add_(v0)"]
    assert Program([], ["v1 = a1 // a1", "v2 = v1 * 2"], ["v2"]).live().body == \
        ["v1 = a1 // a1", "v2 = v1 * 2"]
