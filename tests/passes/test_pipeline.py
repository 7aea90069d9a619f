"""canonicalize: every pass runs in order, results are unchanged, one pass list."""
import logging

import torch

from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.passes import PIPELINE, canonicalize

from helpers_passes import assert_same_results


def _typical():
    b = GraphBuilder("typical")
    x = b.param((4, 8))
    w = b.param((8,))
    b.param((2,))  # unused: stays, it is part of the signature
    v = b.op("view.default", b.op("view.default", x, (32,)), (4, 8))  # identity chain
    bias = b.op("add.Tensor", b.op("full.default", (8,), 0.5, dtype=torch.float32), 1.0)
    h1 = b.op("add.Tensor", b.op("mul.Tensor", v, w), bias)
    h2 = b.op("add.Tensor", b.op("mul.Tensor", x, w), bias)  # same as h1 once v is x
    b.op("exp.default", h2)  # dead
    return b.build(b.op("relu.default", h1), b.op("sigmoid.default", h2), None)


def test_preserves_results_and_shrinks():
    g = _typical()
    out = canonicalize(g)
    assert_same_results(g, out)
    assert [n.op for n in out.ops] == ["constant", "mul.Tensor", "add.Tensor",
                                       "relu.default", "sigmoid.default"]
    assert len(out.params) == 3 and out.outputs[2] is None


def test_one_run_is_a_fixpoint():
    once = canonicalize(_typical())
    assert canonicalize(once) == once


def test_dump_called_once_per_pass_in_order():
    seen = []
    canonicalize(_typical(), dump=lambda name, g: seen.append((name, len(g))))
    assert [name for name, _ in seen] == [name for name, _, _ in PIPELINE]
    assert [name for name, _, _ in PIPELINE] == ["unbroadcast_bmm", "matvec", "strided_scatter",
                                               "view_hoist",
                                               "fold_views", "keepdim_views",
                                               "constant_fold", "cse", "conv_layout",
                                               "attention_layout", "saved_layouts",
                                               "output_layouts",
                                               "read_copies",
                                               "gemm_accumulate", "dce"]


def test_every_pass_has_a_reason_and_logs(caplog):
    assert all(reason for _, _, reason in PIPELINE)
    with caplog.at_level(logging.DEBUG, logger="fusionstitch.passes"):
        canonicalize(_typical())
    logged = [r.getMessage() for r in caplog.records if r.name == "fusionstitch.passes"]
    for name, _, _ in PIPELINE:
        assert any(m.startswith(f"pass {name}: ") for m in logged)


def test_verify_between_passes_when_available():
    try:
        from fusionstitch.ir import verify  # noqa: F401  (written by another engineer)
    except ImportError:
        return  # nothing to check yet
    g = _typical()
    assert canonicalize(g, verify=True) == canonicalize(g)
