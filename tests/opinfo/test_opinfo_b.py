"""The second half of the OpInfo sweep (the odd entries of op_db): see test_opinfo.py,
which holds the skip list and the machinery. A file of its own so that `make test`'s two
workers (`--dist loadfile`) run the two halves side by side."""
import pytest

from test_opinfo import _strict, all_cases, pytestmark, run_case  # noqa: F401 (autouse, marks)


@pytest.mark.parametrize("op,dtype,mode,target,count", all_cases(1))
def test_opinfo(op, dtype, mode, target, count):
    run_case(op, dtype, mode, target, count)
