"""torch.compile's `options=` and `mode=` reach the backend; a target that cannot run on
the inputs is refused with a clear error; `auto` picks cuda only for CUDA inputs."""
import pytest
import torch

import fusionstitch
from fusionstitch import config


pytestmark = pytest.mark.usefixtures("strict_fresh")   # tests/conftest.py


def chain(x):
    return ((x * 2).sin() + 1).exp()


def test_options_reach_the_string_named_backend():
    x = torch.randn(64)
    f = torch.compile(chain, backend="fusionstitch",
                      options={"strategy": "none", "target": "interpret"})
    torch.testing.assert_close(f(x), chain(x))
    unfused = fusionstitch.stats()["kernels_launched"]
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    g = torch.compile(chain, backend="fusionstitch", options={"target": "interpret"})
    torch.testing.assert_close(g(x), chain(x))
    assert unfused == 4 and fusionstitch.stats()["kernels_launched"] == 1


def test_options_apply_on_top_of_a_configured_backend():
    sink = []
    f = torch.compile(chain, backend=fusionstitch.backend(strategy="xla", _sink=sink),
                      options={"target": "interpret", "cuda_graphs": True})
    f(torch.randn(8))
    assert sink[0].options == config.Options(strategy="xla", target="interpret",
                                             cuda_graphs=True)


@pytest.mark.parametrize("options, match", [
    ({"strategy": "stitch", "max_autotune": True}, "unknown option.*max_autotune.*strategy, "
                                                   "target, cuda_graphs"),
    ({"target": "tpu"}, "unknown target 'tpu'"),
    ({"cuda_graphs": "yes"}, "cuda_graphs must be True or False")])
def test_bad_options_are_refused_with_the_known_ones(options, match):
    with pytest.raises(Exception, match=match):
        torch.compile(chain, backend="fusionstitch", options=options)(torch.randn(8))


@pytest.mark.parametrize("mode, graphs", [("default", False), ("reduce-overhead", True),
                                          ("max-autotune", True),
                                          ("max-autotune-no-cudagraphs", False)])
def test_modes(mode, graphs):
    sink = []
    f = torch.compile(chain, backend=fusionstitch.backend(target="interpret", _sink=sink),
                      mode=mode)
    x = torch.randn(8)
    torch.testing.assert_close(f(x), chain(x))
    assert sink[0].options.cuda_graphs is graphs     # a no-op off the cuda target
    assert config.Options().with_compile_args(mode=mode).cuda_graphs is graphs


def test_unknown_mode_is_refused():
    with pytest.raises(Exception, match="unknown mode 'fastest'.*reduce-overhead"):
        torch.compile(chain, backend=fusionstitch.backend(), mode="fastest")(torch.randn(8))


def test_cuda_target_without_a_gpu_or_with_cpu_tensors_is_refused():
    f = torch.compile(chain, backend=fusionstitch.backend(target="cuda"))
    expected = "needs a CUDA device" if not torch.cuda.is_available() else "runs on CUDA tensors"
    with pytest.raises(Exception, match=expected):
        f(torch.randn(8))
    assert fusionstitch.stats()["fallbacks"] == 0   # refused, not run through torch


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.gpu
def test_cpu_targets_refuse_cuda_tensors():
    for target in ("cpu", "interpret"):
        torch._dynamo.reset()
        with pytest.raises(Exception, match="runs on CPU tensors"):
            torch.compile(chain, backend=fusionstitch.backend(target=target))(
                torch.randn(8, device="cuda"))


def test_auto_picks_cuda_only_for_cuda_inputs(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    opts = config.Options()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert opts.resolved_target() == "cpu" and opts.resolved_target(cpu) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)   # a GPU, CPU inputs
    assert opts.resolved_target(cpu) == "cpu" and opts.resolved_target(cuda) == "cuda"
    assert opts.resolved_target() == "cuda"
    assert config.Options(target="interpret").resolved_target(cuda) == "interpret"


def test_auto_with_cpu_inputs_on_a_machine_with_a_gpu_runs_the_cpu_target(monkeypatch):
    """`auto` resolves per graph from its inputs' device: a GPU in the machine does not
    send CPU tensors to Triton's driver. (Dynamo itself would use the stand-in GPU, so
    the aten graph is compiled here without it.)"""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fusionstitch.frontend.torch import CompiledGraph
    x = torch.randn(8)
    gm = make_fx(chain)(x)
    cg = CompiledGraph(gm, config.Options(), "inference", mutated=[])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    torch.testing.assert_close(cg([x])[0], chain(x))
    [spec] = cg.specialisations.values()
    assert spec.program.target == "cpu" and fusionstitch.stats()["kernels_launched"] == 1
