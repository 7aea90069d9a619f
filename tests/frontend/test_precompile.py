"""torch's caching precompile with our backend (frontend/precompile.py): a saved frame
loads without Dynamo tracing and matches eager; what we cannot carry, or may not load,
is traced again and still matches eager."""
import copy
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import fusionstitch
from bench import workloads as W
from fusionstitch.frontend import precompile
from fusionstitch.runtime.cache import clear_memory_caches

pytestmark = pytest.mark.skipif(precompile.PrecompileContext is None,
                                reason="this torch has no caching precompile")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path / "fs"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch"))   # Dynamo's cache
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    new_start()
    with torch._dynamo.config.patch(caching_precompile=True):
        yield tmp_path
    new_start()


_COMPILED_CODES: set = set()


def new_start():
    """What a new process with warm disk caches sees. torch._dynamo.reset() leaves the
    entries a precompile load installed on a function's code object: drop them too."""
    from torch._C._dynamo.eval_frame import _reset_precompile_entries
    for code in _COMPILED_CODES:
        _reset_precompile_entries(code)
    torch._dynamo.reset()
    clear_memory_caches()
    precompile.PrecompileContext.clear()
    torch._dynamo.utils.counters.clear()
    fusionstitch.reset_stats()


def compiled(fn):
    _COMPILED_CODES.add(getattr(fn, "forward", fn).__code__)
    return torch.compile(fn, backend=fusionstitch.backend(target="cpu"))


def dynamo_cache():
    c = torch._dynamo.utils.counters
    return c["dynamo_cache"]["dynamo_cache_hit"], c["stats"]["unique_graphs"]


def save_then_load(name: str, recorded: bool = True) -> tuple[list, W.Workload, dict]:
    """Compile and run workload `name` (small), save torch's precompile artifacts, start
    afresh, compile again: (outputs of that second first step, its instance, stats)."""
    cold = W.make(name, "small")
    W.step(cold, compiled(cold.fn))
    assert (fusionstitch.stats()["precompile_records"] >= 1) == recorded
    torch.compiler.save_cache_artifacts()
    new_start()
    inst = W.make(name, "small")
    got = W.step(inst, compiled(inst.fn))
    return got, inst, fusionstitch.stats()


@pytest.mark.parametrize("name", ["cartpole", "adam", "softmax_chain"])
def test_a_saved_frame_loads_without_tracing_and_matches_eager(name):
    ref_inst = W.make(name, "small")
    ref = W.step(ref_inst)
    got, inst, s = save_then_load(name)
    assert dynamo_cache() == (1, 0)   # loaded, and Dynamo traced no graph
    assert s["precompile_loads"] == 1 and s["fallbacks"] == 0
    assert s["kernels_launched"] >= 1   # our kernels ran, not the graph through torch
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
    for a, r in zip(inst.mutated, ref_inst.mutated):   # adam's in-place updates
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-6)


def _softmax_break_cos(x, y):
    a = torch.softmax(x * 2, -1)
    torch._dynamo.graph_break()   # two graphs: the frame and its resume function
    return (a + y).cos(), y.sum()


def test_both_graphs_around_a_graph_break_load():
    def run():
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
        with torch.no_grad():
            got = compiled(_softmax_break_cos)(x, y)
        torch.testing.assert_close(got, _softmax_break_cos(x, y))

    run()
    assert fusionstitch.stats()["precompile_records"] == 2
    torch.compiler.save_cache_artifacts()
    new_start()
    run()
    assert fusionstitch.stats()["precompile_loads"] == 2 and dynamo_cache() == (1, 0)


def test_a_training_graph_is_not_carried_and_is_traced_again():
    got, inst, s = save_then_load("mlp", recorded=False)
    assert s["precompile_loads"] == 0 and dynamo_cache()[1] >= 1
    ref = W.step(W.make("mlp", "small"))
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def test_an_artifact_of_other_versions_refuses_to_load_and_the_frame_is_traced(monkeypatch):
    cold = W.make("cartpole", "small")
    W.step(cold, compiled(cold.fn))
    torch.compiler.save_cache_artifacts()
    new_start()
    monkeypatch.setattr(precompile, "_versions", lambda: "fusionstitch 9.9, torch 9.9")
    inst = W.make("cartpole", "small")
    got = W.step(inst, compiled(inst.fn))
    assert fusionstitch.stats()["precompile_loads"] == 0
    assert dynamo_cache() == (0, 1)   # not loaded: traced again
    for g, r in zip(got, W.step(W.make("cartpole", "small"))):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)


def test_the_artifact_is_checked_when_unpickled():
    def f(x):
        return torch.softmax(x * 2, -1)

    with torch.no_grad():
        compiled(f)(torch.randn(4, 8))
    (artifact,) = precompile.PrecompileContext._backend_artifacts_by_key.values()
    x = torch.randn(4, 8)
    loaded = pickle.loads(pickle.dumps(artifact))
    torch.testing.assert_close(loaded.after_deserialization()(x), [f(x)])
    assert fusionstitch.stats()["precompile_loads"] == 1
    assert copy.deepcopy(artifact).content == artifact.content
    fmt, graph_format, versions, options, key, data, check, n = artifact.content
    flipped = bytes([data[0] ^ 1]) + data[1:]
    for content, why in [
            ((fmt + 1, graph_format, versions, options, key, data, check, n), "format"),
            ((fmt, graph_format + 1, versions, options, key, data, check, n), "format"),
            ((fmt, graph_format, versions, options, key, data, n), "format"),
            ((fmt, graph_format, "torch 1.0", options, key, data, check, n),
             "saved by torch 1.0"),
            ((fmt, graph_format, versions, options, key, flipped, check, n), "damaged"),
            ((fmt, graph_format, versions, options, key, data[:-3], check, n), "damaged"),
            ((fmt, graph_format, versions, options, key, b"not a pickle",
              precompile._checksum(key, b"not a pickle"), n), "not build"),
            ((fmt, graph_format, versions, options, key, data, check, n + 1), "not build")]:
        bad = precompile.FusionstitchArtifact(key=artifact.key, content=content)
        with pytest.raises(RuntimeError, match=why):
            pickle.loads(pickle.dumps(bad))


def test_nothing_is_recorded_without_torchs_flag():
    with torch._dynamo.config.patch(caching_precompile=False), torch.no_grad():
        compiled(lambda x: x.sin() * 2)(torch.randn(8))
    assert fusionstitch.stats()["precompile_records"] == 0
    assert precompile.PrecompileContext._backend_artifacts_by_key == {}


def test_a_new_process_loads_the_saved_frame(fresh):
    """The real use: save in one process, load in another (imports not timed here)."""
    script = textwrap.dedent("""
        import sys, torch, fusionstitch
        from bench import workloads as W
        inst = W.make("cartpole", "small")
        out = W.step(inst, torch.compile(inst.fn, backend=fusionstitch.backend(target="cpu")))
        if sys.argv[1] == "save":
            torch.compiler.save_cache_artifacts()
        ref = W.step(W.make("cartpole", "small"))
        assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(out, ref))
        c = torch._dynamo.utils.counters
        print(c["dynamo_cache"]["dynamo_cache_hit"], c["stats"]["unique_graphs"],
              fusionstitch.stats()["precompile_loads"])
    """)
    env = dict(os.environ, TORCH_CACHING_PRECOMPILE="1", PYTHONPATH=str(ROOT))
    seen = []
    for mode in ("save", "load"):
        done = subprocess.run([sys.executable, "-c", script, mode], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        seen.append(done.stdout.split()[-3:])
    assert seen == [["0", "1", "0"], ["1", "0", "1"]]
