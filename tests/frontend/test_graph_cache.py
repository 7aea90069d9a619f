"""The graph cache (frontend/graph_cache.py): a warm start of an inference graph skips
AOTAutograd; what it may not cache is traced as before; bad entries and the knob."""
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fusionstitch
from bench import workloads as W
from fusionstitch.config import Options
from fusionstitch.frontend import graph_cache
from fusionstitch.runtime.cache import clear_memory_caches

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    monkeypatch.delenv("FUSIONSTITCH_GRAPH_CACHE", raising=False)
    new_start()
    yield tmp_path
    torch._dynamo.reset()
    clear_memory_caches()


def new_start():
    """What a new process with a warm disk cache sees."""
    torch._dynamo.reset()
    clear_memory_caches()
    fusionstitch.reset_stats()


def entries(folder) -> list:
    d = folder / "graphs"
    return sorted(d.iterdir()) if d.exists() else []


def counts():
    s = fusionstitch.stats()
    return s["graph_cache_hits"], s["graph_cache_misses"]


def compiled(fn, **kw):
    return torch.compile(fn, backend=fusionstitch.backend(target="cpu"), **kw)


def refuse_aot(monkeypatch):
    """From now on AOTAutograd fails the test if it runs: only a cache hit compiles."""
    monkeypatch.setattr(torch._dynamo.backends.common, "aot_autograd",
                        lambda **_: pytest.fail("AOTAutograd ran"))


def softmax_and_update(x, y):
    y.mul_(2)
    return torch.softmax(x * y.sum(), -1), x.cos()


def inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=g), torch.randn(8, generator=g)


def run_checked(fn, make_args, **kw):
    """`fn` compiled on fresh arguments, checked against eager on other fresh ones."""
    ref_args, args = make_args(), make_args()
    with torch.no_grad():
        ref, got = fn(*ref_args), compiled(fn, **kw)(*args)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(args, ref_args)   # the same inputs mutated the same way
    return got, args


@pytest.mark.parametrize("name", ["cartpole", "adam"])
def test_a_warm_start_skips_aot_autograd_and_matches_eager(name, fresh_cache, monkeypatch):
    ref = W.step(W.make(name, "small"))
    cold = W.make(name, "small")
    W.step(cold, compiled(cold.fn))
    assert counts() == (0, 1) and len(entries(fresh_cache)) == 1
    new_start()
    refuse_aot(monkeypatch)
    inst = W.make(name, "small")
    mutated = {id(m) for m in inst.mutated}
    before = [(a, a.clone()) for a in inst.args if isinstance(a, torch.Tensor)]
    got = W.step(inst, compiled(inst.fn))   # the outputs, then the mutated inputs
    s = fusionstitch.stats()
    assert counts() == (1, 0) and s["plan_cache_hits"] == 1 and s["fallbacks"] == 0
    assert len(got) == len(ref) and len(inst.mutated) == (18 if name == "adam" else 0)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
    for a, old in before:   # the mutated inputs changed, nothing else did
        assert torch.equal(a, old) != (id(a) in mutated)


def test_a_second_compile_in_the_process_hits_memory(fresh_cache, monkeypatch):
    run_checked(softmax_and_update, inputs)
    (path,) = entries(fresh_cache)
    path.unlink()
    torch._dynamo.reset()
    refuse_aot(monkeypatch)
    run_checked(softmax_and_update, inputs)
    assert counts() == (1, 1) and entries(fresh_cache) == []


def test_inputs_written_in_place_or_returned_keep_eager_semantics(fresh_cache, monkeypatch):
    def f(x, y):
        x.add_(1)   # x is a transposed (non-contiguous) input
        y.sub_(x.sum(0))
        return y, x * 2   # Dynamo returns y itself, outside the graph

    def make_args():
        g = torch.Generator().manual_seed(1)
        return torch.randn(8, 4, generator=g).t(), torch.randn(8, generator=g)

    for run in ("cold", "warm"):
        new_start()
        if run == "warm":
            refuse_aot(monkeypatch)
        got, args = run_checked(f, make_args)
        assert got[0] is args[1]
        assert counts() == ((0, 1) if run == "cold" else (1, 0))


def _view_of_input():
    return (lambda x: (x.t(), x.sin())), lambda: [torch.randn(4, 8)], torch.no_grad, {}


def _requires_grad():
    return (lambda x: torch.tanh(x) * 2), lambda: [torch.randn(4, 8, requires_grad=True)], \
        torch.enable_grad, {}


def _parameters():
    lin = torch.nn.Linear(8, 8)
    return lin, lambda: [torch.randn(4, 8)], torch.no_grad, {}


def _dynamic():
    return (lambda x: torch.softmax(x * 2, -1)), lambda: [torch.randn(4, 8)], torch.no_grad, \
        {"dynamic": True}


def _aliased():
    def make_args():
        x = torch.randn(2, 8)
        return [x[0], x[1]]   # two inputs on one storage
    return (lambda a, b: a * b + 1), make_args, torch.no_grad, {}


@pytest.mark.parametrize("case,looked_up", [
    (_view_of_input, True),   # looked up (a miss), not stored: its output aliases x
    (_requires_grad, False), (_parameters, False), (_dynamic, False), (_aliased, False)],
    ids=["view-of-input", "requires-grad", "parameters", "dynamic", "aliased-inputs"])
def test_what_is_not_cached_is_traced_every_time(case, looked_up, fresh_cache):
    fn, make_args, mode, kw = case()
    for _ in range(2):
        new_start()
        args = make_args()
        with mode():
            got, ref = compiled(fn, **kw)(*args), fn(*make_args_like(args))
        torch.testing.assert_close(got, ref)
        assert counts() == (0, 1 if looked_up else 0)
        assert entries(fresh_cache) == []
    if case is _view_of_input:   # still a view of the input, as AOTAutograd makes it
        assert got[0].untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr()
    if case is _requires_grad:
        got.sum().backward()
        assert args[0].grad is not None


def make_args_like(args):
    """The same values on new storage (aliased inputs stay aliased)."""
    if len(args) == 2 and args[0].untyped_storage().data_ptr() == \
            args[1].untyped_storage().data_ptr():
        base = torch.stack([a.detach() for a in args])
        return [base[0], base[1]]
    return [a.detach().clone().requires_grad_(a.requires_grad) for a in args]


def test_the_key(fresh_cache):
    seen = []

    def capture(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    x, y = inputs()
    torch.compile(softmax_and_update, backend=capture)(x, y)
    (gm, ex), = seen
    stitch_cpu = Options(target="cpu")
    with torch.no_grad():
        k = graph_cache.key(gm, ex, stitch_cpu)
        assert k is not None and k == graph_cache.key(gm, list(ex), stitch_cpu)
        assert graph_cache.key(gm, ex, stitch_cpu, execute=False) is None   # explain()
        assert graph_cache.key(gm, ex, Options(strategy="xla", target="cpu")) != k
        i = next(i for i, t in enumerate(ex) if t.dim() == 2)   # Dynamo orders the inputs
        strided = list(ex)
        strided[i] = ex[i].t().contiguous().t()
        assert graph_cache.key(gm, strided, stitch_cpu) != k
        assert graph_cache.key(gm, [ex[0].double(), ex[1]], stitch_cpu) != k
    assert graph_cache.key(gm, ex, stitch_cpu) not in (None, k)   # grad mode
    assert graph_cache.key(gm, [ex[0], ex[0][0]], stitch_cpu) is None   # one storage


def test_plain_inputs_share_no_storage_even_when_empty():
    """The check the cache key and the lean training runtime share: views of one storage,
    empty ones too (AOTAutograd sees them as aliases), are not plain; distinct empty
    tensors (all with data pointer 0 or an arena's) and Parameters (where allowed) are."""
    why = graph_cache.why_not_plain_inputs
    x, e = torch.ones(4, 3), torch.empty(0, 3)
    assert why([x, x.clone()]) is None
    assert why([x, x[1]]) == why([e, e[:0]]) == why([e, e.view(3, 0)]) \
        == "two inputs share storage"
    assert why([torch.empty(0), torch.empty(0, 2), x]) is None
    p = torch.nn.Parameter(torch.ones(2))
    assert why([p], parameters=True) is None
    assert "not a tensor of static sizes" in why([x, p])
    assert "not a tensor of static sizes" in why([x.to_sparse()])


def test_the_key_is_stable_across_processes_and_a_new_process_hits(fresh_cache):
    script = (
        "import torch, fusionstitch\n"
        "from fusionstitch.frontend import graph_cache\n"
        "from tests.frontend.test_graph_cache import softmax_and_update, inputs\n"
        "keys, real = [], graph_cache.key\n"
        "def key(gm, *a, **k):\n"
        "    keys.append((real(gm, *a, **k), gm.code))\n"
        "    return keys[-1][0]\n"
        "graph_cache.key = key\n"
        "with torch.no_grad():\n"
        "    torch.compile(softmax_and_update,\n"
        "                  backend=fusionstitch.backend(target='cpu'))(*inputs())\n"
        "s = fusionstitch.stats()\n"
        "print(repr((keys, s['graph_cache_hits'], s['graph_cache_misses'])))\n")
    runs = []
    for seed in ("1", "2"):   # str hashes (set orders) differ between the processes
        env = {**os.environ, "FUSIONSTITCH_CACHE_DIR": str(fresh_cache),
               "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=env, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(eval(done.stdout.strip().splitlines()[-1]))
    (keys0, *counts0), (keys1, *counts1) = runs
    assert len(keys0) == 1 and keys0[0][0] is not None
    assert keys0 == keys1   # the same Dynamo code and the same key in another process
    assert counts0 == [0, 1] and counts1 == [1, 0]


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _rewrite(path, edit):
    record = graph_cache._unpickle(path.read_bytes())
    edit(record)
    path.write_bytes(pickle.dumps(record))


def flip(data: bytes) -> bytes:
    """`data` with one bit of its middle byte flipped."""
    n = len(data) // 2
    return data[:n] + bytes([data[n] ^ 1]) + data[n + 1:]


def _bad_op(record):
    nodes, *rest = graph_cache._unpickle(record["payload"])
    name, op, _, args, kwargs, val = nodes[-2]
    nodes = (*nodes[:-2], (name, op, "aten::no_such_op", args, kwargs, val), nodes[-1])
    record["payload"] = pickle.dumps((nodes, *rest))
    record["checksum"] = graph_cache._checksum(record["payload"])


@pytest.mark.parametrize("damage", [
    lambda p: p.write_bytes(p.read_bytes()[:len(p.read_bytes()) // 2]),
    lambda p: p.write_bytes(b""),
    lambda p: p.write_bytes(b"not a pickle"),
    lambda p: _rewrite(p, lambda r: r.update(key="0" * 24)),
    lambda p: _rewrite(p, lambda r: r.update(payload=flip(r["payload"]))),
    lambda p: p.write_bytes(pickle.dumps(_Exploit(p.parent / "owned"))),
    lambda p: _rewrite(p, _bad_op),
], ids=["truncated", "empty", "garbage", "another-key", "checksum", "disallowed-global",
        "graph-does-not-build"])
def test_a_bad_entry_is_ignored_and_traced_again(damage, fresh_cache):
    run_checked(softmax_and_update, inputs)
    (path,) = entries(fresh_cache)
    damage(path)
    new_start()
    run_checked(softmax_and_update, inputs)
    assert counts() == (0, 1)
    assert not (fresh_cache / "graphs" / "owned").exists()
    new_start()   # stored again: the next look-up hits
    run_checked(softmax_and_update, inputs)
    assert counts() == (1, 0)


@pytest.mark.parametrize("value", ["0", "off"])
def test_the_knob_turns_the_cache_off(value, fresh_cache, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_GRAPH_CACHE", value)
    for _ in range(2):
        new_start()
        run_checked(softmax_and_update, inputs)
        assert counts() == (0, 0)
    assert entries(fresh_cache) == []


def test_explain_does_not_use_the_cache(fresh_cache):
    for _ in range(2):
        torch._dynamo.reset()
        with torch.no_grad():
            fusionstitch.explain(softmax_and_update, *inputs(), target="cpu")
    assert counts() == (0, 0) and entries(fresh_cache) == []


@pytest.mark.parametrize("cache", ["on", "off"])
def test_a_cold_compile_runs_the_lean_wrapper_too(cache, fresh_cache, monkeypatch):
    """From the first compile on, a graph the cache takes runs under the wrapper a hit
    returns: no `copy_` of an input our kernel already wrote (AOTAutograd's wrapper copies
    each mutated input back); with the cache off, AOTAutograd's wrapper as before."""
    if cache == "off":
        monkeypatch.setenv("FUSIONSTITCH_GRAPH_CACHE", "0")
    returned = []
    be = fusionstitch.backend(target="cpu")

    def spy(gm, example_inputs):
        returned.append(be(gm, example_inputs))
        return returned[-1]

    def update(p, g):
        p.mul_(0.9).add_(g)
        return (p * 2).sum()

    f = torch.compile(update, backend=spy)
    p, g = torch.randn(64), torch.randn(64)
    ref_p = p.clone()
    copies = []
    real_copy = torch.Tensor.copy_
    with torch.no_grad():
        f(p, g)
        ref_p.mul_(0.9).add_(g)
        monkeypatch.setattr(torch.Tensor, "copy_",
                            lambda t, *a, **k: copies.append(1) or real_copy(t, *a, **k))
        out = f(p, g)
        monkeypatch.setattr(torch.Tensor, "copy_", real_copy)
        ref_p.mul_(0.9).add_(g)
    torch.testing.assert_close(p, ref_p)
    torch.testing.assert_close(out, (ref_p * 2).sum())
    [fn] = returned
    assert hasattr(fn, "compiled_graph") == (cache == "on")
    assert (not copies) == (cache == "on")
