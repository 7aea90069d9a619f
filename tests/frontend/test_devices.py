"""frontend/devices.py: no kernel-kind op of a GPU graph reads or computes on another
device. Graphs are traced with fake CUDA tensors (FakeTensorMode needs no GPU), so
these run on any machine; the GPU test runs the same functions for real."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from fusionstitch.frontend.devices import _kernel_kind, graph_device, main_device, place
from fusionstitch.frontend.fx_to_ir import Unsupported, fx_to_ir, input_specs
from fusionstitch.fusion import make_plan

CUDA = torch.device("cuda", 0)


def scalar_times(x, s):           # a CPU scalar read by GPU ops (eager allows it)
    return (x * s).sin() + s


def to_host_cast(x):              # a transfer off the GPU with a cast
    return x.to("cpu", torch.float16), x.exp()


def from_host(x, h):              # a CPU tensor moved onto the GPU, cast there
    return h.to(x.device, torch.float64) * x


def host_arithmetic(x):           # arithmetic on CPU tensors inside a GPU graph
    return x.cpu() * 2


def causal_mask(s):               # no GPU input: the graph makes its tensors there
    i = torch.arange(4, device="cuda")
    return (i[None, :] <= i[:, None]) & (s > 0)


def scalar_returned(x, s):        # an optimizer's step count: CPU scalar in and out
    t = s + 1
    return x * t, t


def copy_from_host(x, h):         # copy_ of a CPU tensor into a GPU one (functional)
    return torch.ops.aten.copy.default(x, h) * 2


def made_on_host(x):              # a host factory whose tensor only moves to the GPU
    return x * torch.arange(8).to(x.device)


def trace_on_cuda_factories(fn, *args):
    """`fn` traced on the CPU, then its factory ops' device set to cuda and every value
    propagated again with fake tensors (torch without CUDA refuses `arange(device=
    "cuda")` while tracing, but not a fake propagation of the aten op)."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    gm = make_fx(fn)(*[a.cpu() for a in args])
    for n in gm.graph.nodes:
        if "device" in n.kwargs:
            n.kwargs = {**n.kwargs, "device": CUDA}
    gm.recompile()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake = [mode.from_tensor(a) for a in args]
    FakeTensorProp(gm, mode).propagate(*fake)
    return gm, fake


def trace(fn, *specs):
    """`fn` traced with fake tensors of `specs` ((shape, device[, dtype]) each)."""
    with FakeTensorMode():
        args = [torch.empty(shape, device=dev, dtype=dt[0] if dt else torch.float32)
                for shape, dev, *dt in specs]
        return make_fx(fn)(*args), args


def off_device(gm, device):
    """Kernel-kind nodes that compute on, or read a tensor from, another device."""
    bad = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or not _kernel_kind(n.target):
            continue
        for x in [n, *n.all_input_nodes]:
            v = x.meta.get("val")
            if isinstance(v, torch.Tensor) and v.device != device and x.op != "get_attr":
                bad.append((n.name, x.name, str(v.device)))
    return bad


def test_the_main_device_is_the_first_one_not_the_cpu():
    with FakeTensorMode():
        s, x = torch.empty(()), torch.empty(3, device="cuda")
        assert main_device([1, s, x]) == CUDA
        assert main_device([s, 2.0]) == torch.device("cpu")
    assert main_device([3, None]) is None


def test_a_graph_without_gpu_inputs_that_makes_gpu_tensors_computes_on_the_gpu():
    """whisper_train and wav2vec2_train on an H100: a graph of the attention mask, from
    `arange(..., device="cuda")` and a CPU scalar, ran its kernels on CPU tensors."""
    def mask(s):
        i = torch.arange(4)
        return (i[None, :] <= i[:, None]) & (s > 0)
    gm, args = trace_on_cuda_factories(mask, torch.tensor(1.0))
    assert main_device(args) == torch.device("cpu")
    assert graph_device(gm, args) == CUDA
    assert off_device(gm, CUDA)          # `s > 0` on the CPU, read by a GPU op
    assert off_device(place(gm, CUDA), CUDA) == []
    # a CPU scalar made in the graph and read on the GPU is made there
    gm, args = trace(lambda x: x * torch.ops.aten.scalar_tensor.default(
        2.0, dtype=torch.float32, device=torch.device("cpu")), ((4, 8), "cuda"))
    placed = place(gm, CUDA)
    assert off_device(placed, CUDA) == []
    made = next(n for n in placed.graph.nodes
                if n.target is torch.ops.aten.scalar_tensor.default)
    assert made.kwargs["device"] == CUDA
    cpu_gm, cpu_args = trace(scalar_times, ((4, 8), "cpu"), ((), "cpu"))
    assert graph_device(cpu_gm, cpu_args) == torch.device("cpu")
    # no tensor inputs: where its values live (a target of another device refuses it)
    no_inputs = make_fx(lambda: torch.arange(4) * 2)()
    assert graph_device(no_inputs, []) == torch.device("cpu")


def test_a_gpu_target_takes_a_graph_of_cpu_scalars_that_computes_on_the_gpu(monkeypatch):
    """The GPU tier on an H100 (2026-11-27): `causal_mask` with target='cuda' raised
    "runs on CUDA tensors, and this graph's inputs are on cpu" from the backend's
    device check, which read the inputs alone. Dynamo hands the backend its values as
    `example_value`, not `val`: both are read."""
    from fusionstitch import config
    from fusionstitch.frontend.torch import check_devices
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    def mask(s):                        # causal_mask, traced on the CPU first
        i = torch.arange(4)
        return (i[None, :] <= i[:, None]) & (s > 0)
    gm, args = trace_on_cuda_factories(mask, torch.tensor(1.0))
    real = [torch.tensor(1.0)]
    check_devices(config.Options(target="cuda"), real, gm)
    for n in gm.graph.nodes:            # as Dynamo's graph holds them
        n.meta["example_value"] = n.meta.pop("val", None)
    assert graph_device(gm, real) == CUDA
    check_devices(config.Options(target="cuda"), real, gm)
    # without the graph, or with one that computes on the CPU, CPU inputs are refused
    with pytest.raises(ValueError, match="runs on CUDA tensors, and this graph's inputs "
                                         "are on cpu"):
        check_devices(config.Options(target="cuda"), real)
    cpu_gm, cpu_args = trace(scalar_times, ((4, 8), "cpu"), ((), "cpu"))
    with pytest.raises(ValueError, match="runs on CUDA tensors"):
        check_devices(config.Options(target="cuda"), [torch.ones(4, 8), real[0]], cpu_gm)


@pytest.mark.parametrize("fn, specs", [
    (scalar_times, [((4, 8), "cuda"), ((), "cpu")]),
    (to_host_cast, [((4, 8), "cuda")]),
    (from_host, [((4, 8), "cuda"), ((4, 8), "cpu")]),
    (copy_from_host, [((4, 8), "cuda"), ((4, 8), "cpu")]),
], ids=["cpu_scalar", "to_host", "from_host", "copy_from_host"])
def test_placed_graphs_keep_kernel_ops_on_the_graphs_device(fn, specs):
    gm, args = trace(fn, *specs)
    assert off_device(gm, CUDA), "the traced graph already needs no placing"
    placed = place(gm, CUDA)
    assert off_device(placed, CUDA) == []
    puts = [n for n in placed.graph.nodes
            if n.target is torch.ops.prims.device_put.default]
    assert puts
    # the IR holds the moves as library ops: no kernel group of the plan holds one
    g = fx_to_ir(placed, input_specs(args), "g")
    plan = make_plan(g, "stitch", "cuda")
    for group in plan.groups:
        ops = {plan.graph[n].op for n in group.nodes}
        if "prims.device_put.default" in ops:
            assert group.kind == "library", group


def test_a_host_factory_that_only_moves_to_the_gpu_is_made_there():
    gm, _ = trace(made_on_host, ((4, 8), "cuda"))
    placed = place(gm, CUDA)
    made = next(n for n in placed.graph.nodes if "arange" in str(n.target))
    assert made.kwargs["device"] == CUDA
    assert off_device(gm, CUDA) and off_device(placed, CUDA) == []
    assert not [n for n in placed.graph.nodes
                if n.target is torch.ops.prims.device_put.default]


def test_a_cast_on_the_way_off_the_gpu_is_done_on_the_gpu():
    gm, _ = trace(to_host_cast, ((4, 8), "cuda"))
    placed = place(gm, CUDA)
    put = next(n for n in placed.graph.nodes
               if n.target is torch.ops.prims.device_put.default)
    cast = put.args[0]
    assert cast.target is torch.ops.aten._to_copy.default
    assert cast.kwargs.get("dtype") == torch.float16 and "device" not in cast.kwargs
    assert put.args[1].type == "cpu"


def test_arithmetic_on_the_cpu_inside_a_gpu_graph_is_refused_with_the_op_named():
    gm, _ = trace(host_arithmetic, ((4, 8), "cuda"))
    with pytest.raises(Unsupported, match=r"op mul\.Tensor .* computes on cpu"):
        place(gm, CUDA)


def test_a_graph_on_one_device_is_left_as_it_is():
    gm, _ = trace(scalar_times, ((4, 8), "cpu"), ((), "cpu"))
    assert place(gm, torch.device("cpu")) is gm


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fn", [scalar_times, to_host_cast, from_host, host_arithmetic,
                                causal_mask, scalar_returned, copy_from_host,
                                made_on_host])
def test_gpu_graphs_mixing_devices_match_eager(fn):
    import fusionstitch
    x = torch.randn(4, 8, device="cuda")
    args = {scalar_times: (x, torch.tensor(0.5)), from_host: (x, torch.randn(4, 8)),
            copy_from_host: (x, torch.randn(4, 8)),
            causal_mask: (torch.tensor(1.0),),
            scalar_returned: (x, torch.tensor(3.0))}.get(fn, (x,))
    torch._dynamo.reset()
    got = torch.compile(fn, backend=fusionstitch.backend(target="cuda"))(*args)
    ref = fn(*args)
    for g, r in zip(got if isinstance(got, tuple) else (got,),
                    ref if isinstance(ref, tuple) else (ref,)):
        assert g.device == r.device and g.dtype == r.dtype
        torch.testing.assert_close(g, r)


def test_a_cpu_scalar_the_graph_returns_is_computed_on_the_gpu_and_moved_back():
    gm, _ = trace(scalar_returned, ((4, 8), "cuda"), ((), "cpu"))
    placed = place(gm, CUDA)
    assert off_device(placed, CUDA) == []
    out = next(n for n in placed.graph.nodes if n.op == "output")
    back = out.args[0][1]
    assert back.target is torch.ops.prims.device_put.default
    assert back.args[1].type == "cpu" and back.meta["val"].device.type == "cpu"
    assert back.args[0].meta["val"].device == CUDA


def test_the_graph_cache_keeps_each_values_device():
    """A graph loaded from the graph cache places as the traced one: its values come back
    as meta tensors with their devices beside them."""
    from fusionstitch.frontend import devices, graph_cache
    gm, _ = trace(scalar_times, ((4, 8), "cuda"), ((), "cpu"))
    back = graph_cache._rebuild(graph_cache._encode_graph(gm))

    def where(g):
        return [(n.name, devices._devices(n)) for n in g.graph.nodes]
    assert where(back) == where(gm)
    assert {str(d) for _, ds in where(back) for d in ds} == {"cpu", "cuda:0"}
    placed = place(back, CUDA)
    assert placed is not back
    assert all(d == CUDA for n in placed.graph.nodes if n.op == "call_function"
               and devices._kernel_kind(n.target) for d in devices._devices(n))
