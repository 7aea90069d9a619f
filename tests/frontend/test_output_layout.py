"""Outputs come back in eager's memory layout (frontend/output_layout.py): an
elementwise result of a channels-last or transposed input has eager's strides, so what
the caller does with them (a `.view` after a permute, `is_contiguous()`) behaves as in
eager; the values are eager's; row-major graphs pay nothing; an output on an input's
storage stays that alias; a backward's gradients are right."""
import pytest
import torch

import fusionstitch
from fusionstitch.frontend import output_layout
from fusionstitch.runtime.cache import clear_memory_caches


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    clear_memory_caches()
    yield
    torch._dynamo.reset()
    clear_memory_caches()


def compiled(fn):
    sink = []
    return torch.compile(fn, backend=fusionstitch.backend(target="cpu", _sink=sink)), sink


def _layout(t):
    return [s for s, d in zip(t.stride(), t.shape) if d > 1]


CASES = {
    "channels_last": lambda: torch.randn(2, 3, 4, 5).contiguous(
        memory_format=torch.channels_last),
    "transposed": lambda: torch.randn(6, 7).t(),
    "permuted_3d": lambda: torch.randn(3, 4, 5).permute(2, 0, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_elementwise_result_has_eagers_strides(case):
    def f(x):
        return torch.relu(x) * 2 + 1, (x * x).sin()
    x = CASES[case]()
    f_c, _ = compiled(f)
    for got, want in zip(f_c(x), f(x)):
        assert _layout(got) == _layout(want), (got.stride(), want.stride())
        torch.testing.assert_close(got, want)
        assert got.is_contiguous() == want.is_contiguous()


def test_a_view_after_a_permute_works_as_in_eager():
    x = CASES["channels_last"]()
    f_c, _ = compiled(lambda t: torch.relu(t) * 2)
    torch.testing.assert_close(f_c(x).permute(0, 2, 3, 1).view(2, -1),
                               (torch.relu(x) * 2).permute(0, 2, 3, 1).view(2, -1))


def test_row_major_graphs_expect_nothing():
    f_c, sink = compiled(lambda t: (t.exp() * 3, t.sum(0)))
    f_c(torch.randn(4, 5))
    assert sink and all(g.eager_layouts == {} for g in sink)


def test_a_training_forwards_user_output_in_eagers_layout_and_its_gradients():
    x = CASES["channels_last"]()
    w = torch.randn(1, 3, 1, 1, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()

    def f(t, w):
        return torch.tanh(t * w)
    f_c, sink = compiled(f)
    got, want = f_c(x, w), f(x, w_ref)
    assert _layout(got) == _layout(want)
    torch.testing.assert_close(got, want)
    g = torch.randn_like(want)
    got.backward(g)
    want.backward(g)
    torch.testing.assert_close(w.grad, w_ref.grad)
    assert any(s.eager_layouts for s in sink)


@pytest.mark.parametrize("case", ["channels_last", "transposed"])
def test_a_symbolic_graphs_outputs_have_eagers_strides_at_every_size(case):
    """dynamic=True: one program for every size; the layout is a dim order, so each
    call's strides follow from its sizes."""
    def f(x):
        return torch.relu(x) * 2
    f_c, sink = compiled_dynamic(f)
    for grow in (0, 3, 5):
        if case == "channels_last":
            x = torch.randn(2, 3 + grow, 4 + grow, 5).contiguous(
                memory_format=torch.channels_last)
        else:
            x = torch.randn(6 + grow, 7 + grow).t()
        got, want = f_c(x), f(x)
        assert _layout(got) == _layout(want), (got.stride(), want.stride())
        torch.testing.assert_close(got, want)
    assert fusionstitch.stats()["symbolic_programs"] >= 1


def compiled_dynamic(fn):
    sink = []
    fusionstitch.reset_stats()
    return torch.compile(fn, backend=fusionstitch.backend(target="cpu", _sink=sink),
                         dynamic=True), sink


def test_restride_keeps_aliases_of_inputs_and_copies_a_repeated_output_once():
    x = torch.randn(3, 4)
    xt = x.t()                               # (4, 3) with strides (1, 4)
    y = torch.randn(4, 3)                    # ours: row-major
    order = (1, 0)                           # dim 1 outermost: strides (1, 4)
    outs = output_layout.restride([xt, y, y], {0: order, 1: order, 2: order}, [x])
    assert outs[0] is xt                     # on the input's storage: left alone
    assert outs[1] is outs[2] and outs[1] is not y and outs[1].stride() == (1, 4)
    torch.testing.assert_close(outs[1], y)


def test_dense_orders_only():
    assert output_layout._dense((2, 3), (3, 1)) and output_layout._dense((2, 3), (1, 2))
    assert not output_layout._dense((2, 3), (6, 2))          # a gap
    assert not output_layout._dense((2, 3), (0, 1))          # broadcast: overlapping
    assert output_layout.same_layout((1, 3), (7, 1), (3, 1))  # a size-1 dim's stride


@pytest.mark.parametrize("replay", [True, False], ids=["view_replay", "as_strided"])
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_views_of_an_intermediate_keep_eagers_values(replay, grad):
    """Outputs that are views of a value the caller does not get (AOTAutograd rebuilds
    them from that base, by replaying the views or by as_strided with the output's
    strides): restriding them must not change what they read (a training graph's were
    copied, and as_strided then read the wrong elements of the row-major base: all 60).
    In inference their layout is eager's where the view itself is dense in another order
    (a select of a channels-last value); not yet in training (rebuilt from the base,
    which the caller does not see and which stays row-major), nor a view that is
    row-major in eager's base but not in ours (a permute back of it)."""
    import torch._functorch.config as aot_config

    def f(x):
        y = x * 2
        return y[1], torch.relu(y)[0], y.permute(0, 2, 3, 1)[1:]
    x = CASES["channels_last"]().requires_grad_(grad)
    with aot_config.patch(view_replay_for_aliased_outputs=replay):
        f_c, _ = compiled(f)
        outs = f_c(x)
    wants = f(x)
    for got, want in zip(outs, wants):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    for got, want in zip(outs[:2] if not grad else (), wants[:2]):
        assert _layout(got) == _layout(want), (got.stride(), want.stride())


@pytest.mark.parametrize("case", ["transposed", "channels_last"])
def test_views_of_a_returned_output_follow_its_new_layout(case):
    """`v1 = v0.t()` with both returned, v0 in another layout than ours (copied into
    eager's): v1 views the copy, with eager's strides and values, and still aliases v0
    (v1 had our row-major v0's strides: the fuzzer's seed 212121 found it)."""
    def f(x):
        v0 = torch.trunc(x * 4)
        return v0, v0.transpose(0, 1), v0[1:], v0.select(-1, 2), v0 * 0.5   # exact ops
    x = CASES[case]()
    f_c, _ = compiled(f)
    with torch.no_grad():
        outs, wants = f_c(x), f(x)
    for got, want in zip(outs, wants):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert _layout(got) == _layout(want), (got.stride(), want.stride())
    base = outs[0].untyped_storage().data_ptr()
    assert all(o.untyped_storage().data_ptr() == base for o in outs[1:4])


def test_a_view_that_cannot_be_read_in_the_copys_coordinates_is_left_alone():
    t = torch.arange(12.0).view(3, 4)            # ours: row-major
    flat = t.view(-1)[1:11]                      # runs across t's rows: a carry
    col = t[:, 1]
    outs = output_layout.restride([t, flat, col], {0: (1, 0)}, [])
    assert outs[0].stride() == (1, 3) and outs[1] is flat
    assert outs[2].stride() == (1,) and outs[2].untyped_storage().data_ptr() == \
        outs[0].untyped_storage().data_ptr()
    torch.testing.assert_close(outs[2], col, rtol=0, atol=0)
    assert output_layout._moved_view(t.view(torch.int32), t, outs[0]) is None


def test_a_permuted_view_of_an_intermediate_has_eagers_row_major_strides():
    """`v1.permute(...)` of an intermediate in another layout than ours, returned: eager's
    strides are row-major (they follow v1's layout), ours were the permutation of our
    row-major v1 (fuzz seed 232323). Outputs that are no such view expect nothing when
    eager's layout is row-major."""
    def f(a):
        v1 = torch.cosh(a.clamp(-5, 5))
        return v1.permute(3, 1, 0, 2), torch.sigmoid(v1)
    a = torch.rand(1, 1, 16, 16).permute(3, 1, 0, 2).contiguous().permute(2, 1, 3, 0)
    f_c, _ = compiled(f)
    with torch.no_grad():
        outs, wants = f_c(a), f(a)
    for got, want in zip(outs, wants):
        torch.testing.assert_close(got, want)
        assert _layout(got) == _layout(want), (got.stride(), want.stride())
    gm = torch.fx.symbolic_trace(lambda x: (x.t() * 2, x * 2))
    assert output_layout.user_orders(gm) == [None, None]     # no example values: nothing


def _pooled_conv(x, w, train: bool):
    """Batch statistics, a max pooling (run channels-last by passes/conv_layout.py), then a
    grouped convolution whose result is the graph's output: torch lays it out after its
    input, channels-last, where eager's NCHW input gives NCHW."""
    m = x.mean((0, 2, 3), keepdim=True)
    y = torch.nn.functional.max_pool2d(torch.sigmoid(x - m), 2)
    return torch.nn.functional.conv2d(y, w, padding=1, groups=4)


@pytest.mark.parametrize("train", [False, True])
def test_a_library_calls_result_has_eagers_strides_whatever_its_inputs_layout(train):
    x = torch.randn(1, 4, 12, 12, requires_grad=train)
    w = torch.randn(8, 1, 3, 3, requires_grad=train)
    f_c, sink = compiled(lambda a, b: _pooled_conv(a, b, train))
    with torch.set_grad_enabled(train):
        got, want = f_c(x, w), _pooled_conv(x, w, train)
    assert want.is_contiguous()
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    torch.testing.assert_close(got, want)
    # the convolution's output is checked (a row-major order), nothing else
    assert any(list(g.eager_layouts.values()) == [(0, 1, 2, 3)] for g in sink)
    if train:
        gx, gw = torch.autograd.grad(got.sum(), (x, w))
        ex, ew = torch.autograd.grad(want.sum(), (x, w))
        torch.testing.assert_close(gx, ex)
        torch.testing.assert_close(gw, ew)
