"""A target is added in one place: the registry (`fusionstitch.targets.TARGETS`).

No other package keeps a set of target names (STYLE 14): the options and their error
message, the CLI's choices, the frontend's device check, the cost model's device, the
tuner's choice of what to measure and CUDA-graph eligibility all read the registry or
the Target. A fake target registered here, with no other edit, is accepted by each; a
hand-kept list anywhere would refuse it.
"""
import dataclasses

import pytest
import torch

from fusionstitch import config
from fusionstitch.analysis.cost import DEVICES
from fusionstitch.cli import parser
from fusionstitch.frontend.torch import check_devices
from fusionstitch.fusion import make_plan
from fusionstitch.ir.text import parse
from fusionstitch.runtime import cudagraph
from fusionstitch.targets import TARGETS, Target, device_types, resolve
from fusionstitch.tune.key import describe_machine
from fusionstitch.tune.score import PerfScore

# a CUDA-C target of its own (the NVRTC target targets/base.py foresees), with its own
# cost-model device: the H100's numbers under another name
SPEC = dataclasses.replace(DEVICES["h100-sxm"], name="fake GPU")
FAKE = Target("fake", cost_device=SPEC, device_type="cuda", supports_cuda_graphs=True,
              tunable=True, generates_kernels=True, gemm_fusing=True)

GRAPH = parse("""graph g(%x: f32[8,32]) {
  %m: f32[8,1] = amax.default(%x, [-1], True)
  %s: f32[8,32] = sub.Tensor(%x, %m)
  %e: f32[8,32] = exp.default(%s)
  %z: f32[8,1] = sum.dim_IntList(%e, [-1], True)
  %y: f32[8,32] = div.Tensor(%e, %z)
  return (%y)
}""")


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(TARGETS, FAKE.name, FAKE)
    monkeypatch.setenv("FUSIONSTITCH_PLAN_CACHE", "0")
    return FAKE


def test_the_options_accept_a_registered_target(fake):
    assert config.Options(target="fake").resolved_target() == "fake"
    assert "fake" in config.target_names()
    with pytest.raises(ValueError, match="unknown target 'tpu'; expected one of auto, cpu, "
                                         "cuda, interpret, fake"):
        config.Options(target="tpu")
    # `auto` picks the targets marked for it, not a newcomer on the same device
    assert config.auto_target("cuda") == "cuda" and config.auto_target("cpu") == "cpu"


def test_an_internal_target_is_no_option():
    assert resolve("torch").selectable is False
    assert "torch" not in config.target_names()
    with pytest.raises(ValueError, match="unknown target 'torch'"):
        config.Options(target="torch")


def test_the_cli_offers_a_registered_target(fake):
    args = parser().parse_args(["explain", "mlp", "--out", "x", "--target", "fake"])
    assert args.target == "fake"
    assert parser().parse_args(["bench", "--target", "fake"]).target == "fake"  # tunable
    with pytest.raises(SystemExit):   # the interpreter's times mean nothing: not benched
        parser().parse_args(["bench", "--target", "interpret"])


def test_the_device_check_reads_the_target(fake, monkeypatch):
    assert device_types() == {"cpu", "cuda"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="target='fake' needs a CUDA device.*use "
                                         "target='cpu', 'interpret' or 'auto'"):
        check_devices(config.Options(target="fake"), [torch.ones(1)])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValueError, match="target='fake' runs on CUDA tensors, and this "
                                         "graph's inputs are on cpu"):
        check_devices(config.Options(target="fake"), [torch.ones(1)])
    check_devices(config.Options(target="interpret"), [torch.ones(1)])   # CPU tensors


def test_the_cost_model_device_is_the_targets(fake):
    """The planner scores with the target's own device (no table keyed by target
    names): the fake GPU plans as the GPU whose numbers it has."""
    assert fake.device_spec is SPEC and resolve("interpret").device_spec is \
        resolve("cuda").device_spec
    assert SPEC not in DEVICES.values() and not set(DEVICES) & set(TARGETS)
    plan = make_plan(GRAPH, "stitch", "fake")
    assert [g.nodes for g in plan.groups] == \
        [g.nodes for g in make_plan(GRAPH, "stitch", "cuda").groups]
    with pytest.raises(ValueError, match="'torch' has no cost-model device"):
        resolve("torch").device_spec


def test_tuning_and_cuda_graphs_follow_the_targets_features(fake):
    model = object()
    assert PerfScore(GRAPH, "fake", model, level=1).tuning
    assert not PerfScore(GRAPH, "interpret", model, level=1).tuning
    assert describe_machine("fake").startswith("target fake; ")
    # eligible: what stops a capture here is the inputs, not the target
    assert cudagraph.why_not("fake", []) == "the graph has no tensor inputs"
    assert cudagraph.why_not(fake, [torch.ones(1)]) == "an input is on cpu"
    assert "'cpu' has no CUDA graphs" in cudagraph.why_not("cpu", [torch.ones(1)])
