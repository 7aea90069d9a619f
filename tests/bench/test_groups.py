"""Tests for the per-group A/B: bench/groups.py, bench/group_capture.py, bench/corpus.py,
bench/group_report.py. Tiny programs and few runs: the plumbing, not the speed."""
import json
import sys
from pathlib import Path

import pytest
import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import fusionstitch  # noqa: E402
from bench import corpus, groups  # noqa: E402
from bench.group_capture import capture, copy_as_is, kernel_class  # noqa: E402
from bench.group_report import inductor_kernels  # noqa: E402
from fusionstitch.ir.text import parse  # noqa: E402


def _cases(fn, args, source="test", target="cpu"):
    sink: list = []
    compiled = torch.compile(fn, backend=fusionstitch.backend(target=target, _sink=sink))

    def step():
        with torch.no_grad():
            compiled(*args)
    step()
    return capture(step, sink, source, target=target)


def test_corpus_is_deterministic_and_covers_the_classes():
    a = corpus.programs(("1k", "16k"), seed=3)
    b = corpus.programs(("1k", "16k"), seed=3)
    assert [p.name for p in a] == [p.name for p in b]
    prefixes = {p.cls.split("-")[0] for p in a}
    assert {"chain", "sim", "reduce", "softmax", "layernorm", "bcast", "layout"} <= prefixes
    for p, q in zip(a[:6], b[:6]):
        (f, xs), (g, ys) = p.build(), q.build()
        assert all(torch.equal(x, y) for x, y in zip(xs, ys))
        with torch.no_grad():
            f(*xs)
    # the work bound keeps long chains off the biggest sizes
    big = corpus.programs(("16M",), classes=["chain-L128"])
    assert big == []


def test_capture_rebuilds_each_group_as_fx_and_ir():
    def fn(x, w):
        y = torch.exp(-x * x) * w
        return torch.softmax(y, -1), y.sum(0)
    x, w = torch.randn(64, 48), torch.randn(48)
    cases = _cases(fn, (x, w))
    assert cases
    for c in cases:
        run = c.run_ours()
        run()
        with torch.no_grad():
            ref = c.gm(*c.inputs)
        got = c.our_outputs()
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
        parse(c.ir_text)                     # the group's IR is a graph of its own
        assert "fs_kernel" in c.cpp and c.schedule and c.cls == kernel_class(c.step.kernel)


def test_groups_reading_permuted_values_replay_through_torch():
    """A group whose IR views a value the runtime holds in another layout (MobileViT's
    layer norms over unfolded patches) replays in torch as the runtime runs it, with
    reshapes: it raised `view size is not compatible` for 3 of mobilevit_infer's 54
    groups, which the A/B then could not time."""
    pytest.importorskip("transformers")
    from bench import models as M
    inst = M.make("mobilevit_infer", "small")
    sink: list = []
    compiled = torch.compile(inst.fn, backend=fusionstitch.backend(target="cpu", _sink=sink))

    def step():
        with torch.no_grad():
            compiled(*inst.args)
    step()
    cases = capture(step, sink, "models:mobilevit_infer", target="cpu")
    assert len(cases) > 20
    for c in cases:
        with torch.no_grad():
            c.gm(*c.inputs)


def test_identical_groups_are_captured_once():
    def fn(x):
        for _ in range(4):
            x = torch.sigmoid(x) * 2.0 + x.sum(1, keepdim=True)
        return x
    cases = _cases(fn, (torch.randn(16, 32),))
    assert sum(c.count for c in cases) >= len(cases)


@pytest.mark.parametrize("dynamic", [False, True])
def test_symbolic_programs_and_programs_met_twice_replay(dynamic):
    """A symbolic program's kernel reads its sizes from the program's size slots: the
    replay gives them (Mixtral's experts raised IndexError); a Program met twice among
    the compiled graphs is wrapped once (the second time found the first's recorders in
    place: KeyError, Mixtral's layers)."""
    def fn(x):
        return torch.sigmoid(x) * x + 1

    torch._dynamo.reset()
    sink: list = []
    compiled = torch.compile(fn, backend=fusionstitch.backend(target="cpu", _sink=sink),
                             dynamic=dynamic)

    def step():
        with torch.no_grad():
            compiled(torch.randn(37, 16))
    step()
    cases = capture(step, sink + sink, "test", target="cpu")
    assert cases and (not dynamic or all(c.sizes for c in cases))
    for c in cases:
        c.run_ours()()
        with torch.no_grad():
            ref = c.gm(*c.inputs)
        for g, r in zip(c.our_outputs(), ref):
            torch.testing.assert_close(g, r)


def test_copy_as_is_keeps_the_layout():
    base = torch.randn(8, 6)
    v = base[:, 2]
    c = copy_as_is(v)
    assert c.stride() == v.stride() and c.storage_offset() == v.storage_offset()
    assert torch.equal(c, v) and c.untyped_storage().data_ptr() != v.untyped_storage().data_ptr()


def test_compare_counts_flipped_elements():
    r = torch.zeros(1000)
    g = r.clone()
    g[:3] = 1.0
    worst, frac = groups.compare([g], [r])
    assert worst > 0 and frac == pytest.approx(0.003)
    assert groups.compare([r], [r]) == (0.0, 0.0)


def test_class_summary_orders_worst_first():
    rows = [{"cls": "a", "ratio": 1.0, "vs_torch": 0.5}, {"cls": "b", "ratio": 3.0,
                                                         "vs_torch": 1.0},
            {"cls": "b", "ratio": 1.0 / 3, "vs_torch": 1.0}]
    rows.append({"cls": "c", "ratio": 2.0, "vs_torch": 1.0})
    out = groups.class_summary(rows)
    assert [c["cls"] for c in out] == ["c", "a", "b"]
    b = next(c for c in out if c["cls"] == "b")
    assert b["groups"] == 2 and b["geomean_ratio"] == pytest.approx(1.0)
    assert b["worst_ratio"] == 3.0


def test_inductor_kernels_keeps_kernels_and_call():
    code = "import torch\nk = cpp(r'''\nextern \"C\" void kernel() {}\n''')\n" \
           "def call(args):\n    k()\n    return ()\nrunner = 1\n"
    text = inductor_kernels(code)
    assert "extern" in text and "def call" in text and "import torch" not in text


def test_main_writes_the_report(tmp_path):
    rc = groups.main(["--source", "corpus", "--corpus-sizes", "1k", "--classes",
                      "bcast-row,reduce-sum-d0", "--no-inductor", "--repeat", "2",
                      "--min-time", "0", "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    [js] = tmp_path.glob("groups_corpus_*.json")
    data = json.loads(js.read_text())
    assert data["meta"]["command"].startswith("python -m bench.groups")
    assert {r["cls"] for r in data["groups"]} == {"bcast-row", "reduce-sum-d0"}
    for r in data["groups"]:
        assert r["fusionstitch_s"] > 0 and r["torch_s"] > 0 and "error" not in r
        assert r["mismatch_frac"] == 0.0
    assert js.with_suffix(".txt").exists() and js.with_suffix(".html").exists()


def test_the_triton_side_is_the_same_tool(tmp_path):
    """--target interpret: the groups of the cuda plan, their Triton sources in the report,
    checked against torch (what --target cuda runs on a GPU, with device sync)."""
    rc = groups.main(["--source", "corpus", "--corpus-sizes", "1k", "--classes",
                      "bcast-row,reduce-sum-d0", "--no-inductor", "--repeat", "2",
                      "--min-time", "0", "--target", "interpret", "--out", str(tmp_path),
                      "--quiet"])
    assert rc == 0
    [js] = tmp_path.glob("groups_corpus_interpret_*.json")
    data = json.loads(js.read_text())
    assert data["meta"]["target"] == "interpret"
    assert {r["cls"] for r in data["groups"]} == {"bcast-row", "reduce-sum-d0"}
    for r in data["groups"]:
        assert r["fusionstitch_s"] > 0 and "error" not in r and r["mismatch_frac"] == 0.0
    torch._dynamo.reset()
    [case] = _cases(lambda x: torch.tanh(x) * 3.0, (torch.randn(32, 32),),
                    target="interpret")
    assert "tl.program_id" in case.cpp


def test_inductor_variant_times_one_group(tmp_path):
    """One group through Inductor: its code is captured and the ratio reported."""
    def fn(x):
        return torch.tanh(x) * 3.0
    [case] = _cases(fn, (torch.randn(32, 32),))
    res = groups.ab_case(case, repeat=2, min_time=0.0, inductor=True)
    assert "inductor_error" not in res, res.get("inductor_error")
    assert res["ratio"] > 0 and "kernel" in res["inductor_code"]


def test_a_value_read_for_its_shape_alone_is_made_in_the_subgraph():
    """A group op that reads an outside value only for its shape (zeros_like in a
    backward): the kernel takes no buffer of it, so the group's FX graph makes a tensor of
    its type instead of failing (every training model's groups were lost this way)."""
    from bench.group_capture import group_fx
    from fusionstitch.codegen.lower import lower_group
    g = parse("""graph g(%a: f32[4,8], %b: f32[4,8]) {
  %s: f32[4,8] = exp.default(%a)
  %z: f32[4,8] = zeros_like.default(%s)
  %y: f32[4,8] = add.Tensor(%z, %b)
  return (%s, %y)
}""")
    k = lower_group(g, ("z", "y"), "k")
    assert [b.value for b in k.inputs] == ["b"]
    b = torch.randn(4, 8)
    [out] = group_fx(g, ("z", "y"), k)(b)
    assert torch.equal(out, b)


def test_a_program_that_fails_is_said_and_named_in_the_report(tmp_path, monkeypatch, capsys):
    def broken(*a, **k):
        raise KeyError("sub_5")
    monkeypatch.setattr(groups, "run_program", broken)
    rc = groups.main(["--source", "corpus", "--corpus-sizes", "1k", "--classes",
                      "bcast-row", "--no-inductor", "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    assert "failed, its groups are not in the report" in capsys.readouterr().err
    [js] = tmp_path.glob("groups_corpus_*.json")
    assert "KeyError" in json.loads(js.read_text())["meta"]["failed_programs"][0]
    assert "FAILED (no groups of it below)" in js.with_suffix(".txt").read_text()
