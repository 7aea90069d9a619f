"""Keys of the performance library (fusionstitch/tune/key.py): stable across processes,
blind to node names, bucketed by size, distinct where the structure differs."""
import json
import os
import subprocess
import sys

from fusionstitch.ir.text import parse
from fusionstitch.tune.key import bucket, machine, pattern_key

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def chain(rows: int, cols: int, names=("a", "s", "m", "z", "d"), dim: int = -1,
          op: str = "sin"):
    a, s, m, z, d = names
    keep = f"{rows},1" if dim == -1 else f"1,{cols}"
    return parse(f"""graph g(%x: f32[{rows},{cols}], %y: f32[{rows},{cols}]) {{
  %{a}: f32[{rows},{cols}] = add.Tensor(%x, %y)
  %{s}: f32[{rows},{cols}] = {op}.default(%{a})
  %{m}: f32[{rows},{cols}] = mul.Tensor(%{s}, %{a})
  %{z}: f32[{keep}] = sum.dim_IntList(%{m}, [{dim}], True)
  %{d}: f32[{rows},{cols}] = div.Tensor(%{m}, %{z})
  return (%{d})
}}""")


def key_of(graph):
    return pattern_key(graph, frozenset(n.name for n in graph.ops))


def test_key_ignores_node_names():
    assert key_of(chain(64, 1000)) == key_of(chain(64, 1000, names=("p", "q", "r", "t", "u")))


def test_key_buckets_sizes_to_powers_of_two():
    assert bucket(7) == 7 and bucket(16) == 16 and bucket(17) == 32 and bucket(1000) == 1024
    assert key_of(chain(64, 1000)) == key_of(chain(64, 1024))
    assert key_of(chain(64, 1000)) != key_of(chain(64, 1025))


def test_key_tells_structures_apart():
    base = key_of(chain(64, 1000))
    assert key_of(chain(64, 1000, op="cos")).structure != base.structure
    assert key_of(chain(64, 1000, dim=0)).structure != base.structure
    # which values leave the pattern is part of its structure
    g = chain(64, 1000)
    sub = frozenset({"a", "s", "m"})
    assert pattern_key(g, sub).structure != pattern_key(g, frozenset({"a", "s"})).structure


def test_key_and_machine_are_the_same_in_another_process():
    code = ("import json; from fusionstitch.ir.text import parse; "
            "from fusionstitch.tune.key import machine, pattern_key; "
            "import sys; sys.path.insert(0, 'tests/tune'); "
            "from test_perflib_keys import chain, key_of; k = key_of(chain(64, 1000)); "
            "print(json.dumps([k.structure, k.shapes, k.dtype, machine('cpu')]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "123"})
    k = key_of(chain(64, 1000))
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [k.structure, k.shapes, k.dtype,
                                                               machine("cpu")]
