"""Fixtures shared by the test folders."""
import pytest
import torch

import fusionstitch


@pytest.fixture
def strict_fresh(monkeypatch):
    """FUSIONSTITCH_STRICT=1 (an internal error fails the test instead of falling back),
    a fresh Dynamo and zeroed stats before the test, Dynamo reset after it. A module
    opts in with `pytestmark = pytest.mark.usefixtures("strict_fresh")`."""
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    yield
    torch._dynamo.reset()
