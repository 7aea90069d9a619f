"""Every zoo workload at FULL size, compiled for target="cpu" (generated C++), matches
eager in fp32 (the measure: ``zoo_full.py``)."""
import pytest

from bench import workloads as W

# the strict-mode fixture (autouse here too)
from test_zoo_numerics import RTOL, _strict  # noqa: E402,F401
from zoo_full import check_full_size  # noqa: E402


@pytest.mark.parametrize("name", W.names())
def test_full_size_cpu_matches_eager(name):
    check_full_size(name, "cpu", rtol=RTOL)


def test_full_size_cpu_matches_eager_after_three_steps():
    """adam updates its inputs in place: the third step starts from the state the first
    two left (what test_zoo_full_cuda's CUDA-graph replays are compared by)."""
    check_full_size("adam", "cpu", rtol=RTOL, steps=3)
