"""Helpers of the C++ target's hand-built kernel tests (test_cpu.py, test_cpu_reduce.py):
a kernel builder, index and component shorthands, compile and launch."""
import pytest
import torch

from fusionstitch.targets.cpp.library import compile_cpu
from fusionstitch.codegen import expr as E
from fusionstitch.codegen.kernel import (Buffer, Component, Index, Kernel, Load, Loop, Op,
                                         Reduce, Store)


X, R = E.Var("x"), E.Var("r")
IR = {torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
      torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
      torch.uint8: "u8", torch.bool: "b8"}
TORCH = {v: k for k, v in IR.items()}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """Every test compiles into a cache folder of this test session (not ~/.cache)."""
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("FUSIONSTITCH_CXX", raising=False)


class KB:
    """Builds a kernel by hand: buffers (in the order added), syms and their values.

    Stride syms are bound to their buffer's dimension (`Kernel.bindings`, as lowering
    does: the CPU target then expects contiguous inputs); with `bind=False` they are
    not, and the target expects the strides seen here (`Sym.value`)."""

    def __init__(self, bind: bool = True):
        self.buffers: list[Buffer] = []
        self.syms: list[E.Sym] = []
        self.values: list[int] = []
        self.bindings: list[tuple[str, tuple]] = []
        self.bind = bind

    def sym(self, name: str, value: int) -> E.Sym:
        s = E.Sym(name, value)
        self.syms.append(s)
        self.values.append(value)
        return s

    def input(self, t: torch.Tensor) -> tuple[str, tuple[E.Sym, ...]]:
        name = f"in{sum(not b.is_output for b in self.buffers)}"
        strides = tuple(self.sym(f"{name}_stride{d}", s) for d, s in enumerate(t.stride()))
        if self.bind:
            self.bindings += [(s.name, ("stride", name, d)) for d, s in enumerate(strides)]
        self.buffers.append(Buffer(name, name, None, IR[t.dtype], tuple(t.shape), strides, False))
        return name, strides

    def output(self, shape, dtype: str) -> str:
        name = f"out{sum(b.is_output for b in self.buffers)}"
        strides = tuple(E.product([E.Const(s) for s in shape[d + 1:]]) for d in range(len(shape)))
        self.buffers.append(Buffer(name, name, None, dtype, tuple(shape), strides, True))
        return name

    def kernel(self, name: str, *components: Component) -> Kernel:
        return Kernel(name, tuple(self.buffers), tuple(self.syms), tuple(components), "i64",
                      tuple(self.bindings))


def at(base: E.Expr, sizes, strides) -> E.Expr:
    """Element offset of the row-major position `base` over `sizes`, through `strides`."""
    return E.add(*(E.mul(d, s) for d, s in zip(E.unravel(base, tuple(sizes)), strides)))


def flat(xnumel, *body) -> Component:
    return Component("flat", xnumel, E.ONE, (), tuple(body))


def reduce(xnumel, rnumel, loops, epilogue=()) -> Component:
    return Component("reduce", xnumel, rnumel, tuple(Loop(tuple(b)) for b in loops),
                     tuple(epilogue))


def compile_one(kernel: Kernel):
    [run] = compile_cpu([kernel])
    return run


def elementwise_kernel(name: str, inputs: list[torch.Tensor], outs: list[tuple[str, list]]):
    """out_i[x] = <stmts_i>: each input loaded as `a<i>` (same 1-D shape), each output's
    statements end with a variable named `y` + its number."""
    kb = KB()
    n = kb.sym("n", inputs[0].numel())
    body = []
    for i, t in enumerate(inputs):
        buf, (s,) = kb.input(t)
        body.append(Load(f"a{i}", buf, X * s, None, IR[t.dtype]))
    for j, (dtype, stmts) in enumerate(outs):
        buf = kb.output((inputs[0].numel(),), dtype)
        body += stmts
        body.append(Store(buf, X, f"y{j}", None))
    return kb, kb.kernel(name, flat(n, *body))


def launch(run, kb: KB, inputs, outs, values=None):
    run(list(inputs) + list(outs), values if values is not None else kb.values)
    return outs


def row_kernel(a: torch.Tensor, kind: str, mean: bool = False):
    kb = KB()
    m, n = kb.sym("m", a.shape[0]), kb.sym("n", a.shape[1])
    ina, (s0, s1) = kb.input(a)
    out = kb.output((a.shape[0],), IR[a.dtype])
    dt = IR[a.dtype]
    epilogue = [Store(out, X, "s", None)]
    if mean:
        epilogue = [Index("nn", n), Op("nf", "cast", ("nn",), dt),
                    Op("mean", "truediv", ("s", "nf"), dt), Store(out, X, "mean", None)]
    k = kb.kernel(f"row_{kind}", reduce(
        m, n, [[Load("v", ina, X * s0 + R * s1, None, dt), Reduce("s", kind, "v", dt)]],
        epilogue))
    return kb, k
