"""Differential fuzzing of convolutional networks (`cnn.py`): random small modules of
convolutions, batch norms, activations, pooling and residual additions, NCHW and
channels-last, trained two steps or run in eval mode, against eager and float64.

CI runs a fixed, derandomized share; FUSIONSTITCH_FUZZ_EXAMPLES and FUSIONSTITCH_FUZZ_SEED
ask for more or other networks, as for `test_fuzz.py`. A failure prints its repro
(`python tests/fuzz/cnn.py '<json>'`); each bug found is kept in `CNN_REGRESSIONS`.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given

from cnn import Net, check, nets, repro_line
from test_fuzz import _fuzz

# networks that found bugs (JSON lines), checked first by every run
CNN_REGRESSIONS: list[str] = [
    # eval, NCHW: pooling run channels-last (passes/conv_layout.py) fed a grouped
    # convolution whose result, the graph's output, came back channels-last where eager's
    # is NCHW (frontend/output_layout.py: library_results)
    '{"seed":1036,"batch":1,"channels":4,"size":12,"layers":[{"bn":false,"track":true},'
    '{"bn":false,"track":true},{"act":"relu6"},{"conv":16,"k":3,"s":1,"p":0,"d":1,"g":1,'
    '"bias":false},{"save":1},{"conv":16,"k":3,"s":1,"p":1,"d":1,"g":1,"bias":true},'
    '{"act":"silu"},{"conv":16,"k":3,"s":1,"p":1,"d":1,"g":16,"bias":true},{"act":"silu"},'
    '{"add":1},{"bn":false,"track":true},{"pool":"avg2"},{"act":"sigmoid"},{"pool":"max2"},'
    '{"conv":32,"k":3,"s":1,"p":1,"d":1,"g":16,"bias":true}],"head":0,'
    '"channels_last":false,"train":false}',
]


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")   # an internal error fails the case
    yield
    torch._dynamo.reset()


def _assert_ok(net: Net) -> None:
    bad = check(net)
    assert not bad, "\n".join(bad) + f"\nrepro: {repro_line(net)}"


@pytest.mark.parametrize("line", CNN_REGRESSIONS)
def test_cnn_regression(line):
    _assert_ok(Net.from_json(line))


@_fuzz(12)
@given(net=nets(train=True))
def test_training_networks(net):
    _assert_ok(net)


@_fuzz(8)
@given(net=nets(train=False))
def test_eval_networks(net):
    _assert_ok(net)
