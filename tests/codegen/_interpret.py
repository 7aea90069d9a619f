"""Shared by the interpret-target test files: strict mode, and compile-and-run with stats."""
import pytest
import torch

import fusionstitch


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    """Internal errors raise (no silent torch fallback); Dynamo starts fresh per test."""
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()


def run(fn, *args):
    """`fn` compiled for target="interpret", called once: (result, stats of that call)."""
    compiled = torch.compile(fn, backend=fusionstitch.backend(target="interpret"))
    fusionstitch.reset_stats()
    got = compiled(*args)
    return got, fusionstitch.stats()
