"""Per-op sweep: each op of the table, run as a one-op graph, against torch's public API.

Cases live in `opinfo_cases.py` (same folder). For each case and dtype the test
builds `param* -> op` with GraphBuilder (so the node type comes from
`infer_type`), runs it through `Program(plan_none(g))`, and checks against the
public torch function: same shape and dtype, values within a dtype tolerance,
NaN in the same places, and `infer_type`'s type equal to the result's type.
A failure prints the one-line command that reruns just that case.
"""
from __future__ import annotations


import os
import sys

import pytest
import torch

from fusionstitch.frontend.build import GraphBuilder
from fusionstitch.fusion.plan import plan_none
from fusionstitch.ir import ops
from fusionstitch.ir.graph import CONSTANT, GETITEM, PARAMETER
from fusionstitch.ir.ops import Category, OP_TABLE, lookup, type_of_value
from fusionstitch.runtime.program import Program

# the case modules sit beside this file and import each other by name
_here = os.path.dirname(os.path.abspath(__file__))
if _here not in sys.path:
    sys.path.insert(0, _here)
from opinfo_cases import CASES, NOT_COVERED, InferTypeMismatch, InputMutated, OpCase  # noqa: E402

STRUCTURAL = (PARAMETER, CONSTANT, GETITEM)

# (rtol, atol) by result dtype; a case may override per case dtype (`OpCase.tol`).
DEFAULT_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-6),
    torch.complex64: (1e-5, 1e-6),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}

# Table names that do not resolve to a torch overload: bugs in ir/ops.py (strict xfail
# while the name is in the table).
UNRESOLVED = {
    "broadcast_in_dim.default": "no aten.broadcast_in_dim: the op is prims.broadcast_in_dim",
    "iota.default": "no aten.iota: only prims.iota exists",
}


def _param_id(case: OpCase, dtype: str) -> str:
    return f"{case.id}-{dtype}"


def _repro(pid: str, test: str = "test_op") -> str:
    return f"repro: pytest tests/ir/test_ops.py -k '{test}[{pid}]'"


def _params():
    out = []
    for c in CASES:
        for dt in c.dtypes:
            xf = c.xfail
            marks = ([pytest.mark.xfail(strict=True, reason=xf.reason, raises=xf.raises)]
                     if xf is not None and xf.applies(dt) else [])
            out.append(pytest.param(c, dt, id=_param_id(c, dt), marks=marks))
    return out


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    return value


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    return bool(a.is_floating_point() and ((a == b) | (a.isnan() & b.isnan())).all())


def _as_list(value) -> list:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _materialise(case: OpCase, dtype: str):
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(case.seed(dtype))
    ir_inputs, ref_inputs, call = case.make(dt, g)
    return dt, ir_inputs, ref_inputs, call


def _run_reference(case: OpCase, dt: torch.dtype, ref_inputs: list):
    args = [_clone(t) for t in ref_inputs]
    if case.pass_dtype:
        args = [dt] + args
    try:
        return case.ref(*args)
    except (RuntimeError, NotImplementedError) as e:
        if dt != torch.float32 and "not implemented" in str(e).lower():
            pytest.skip(f"torch has no CPU {dt} kernel for the public op: {e}")
        raise


def _build(case: OpCase, ir_inputs: list, call):
    b = GraphBuilder(case.id.replace(".", "_").replace("-", "_"))
    params = [b.param(tuple(t.shape), t.dtype) for t in ir_inputs]
    a = call(*params)
    out = b.op(case.op, *a.args, **a.kwargs)
    return b.build(out), out


def _compare(actual, expected, case: OpCase, dtype: str, where: str, pid: str) -> None:
    def fail(msg: str):
        pytest.fail(f"{case.op} ({pid}){where}: {msg}\n{_repro(pid)}", pytrace=False)

    if expected is None:
        if actual is not None:
            fail(f"expected None, got {type(actual).__name__}")
        return
    if not isinstance(actual, torch.Tensor):
        fail(f"expected a tensor, got {type(actual).__name__}")
    if tuple(actual.shape) != tuple(expected.shape):
        fail(f"shape {tuple(actual.shape)} != torch's {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        fail(f"dtype {actual.dtype} != torch's {expected.dtype}")
    if not case.check_values:
        return
    rtol, atol = case.tol.get(dtype, DEFAULT_TOL.get(actual.dtype, (0.0, 0.0)))
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   check_stride=False)
        return
    except AssertionError as e:
        msg = " ".join(str(e).split())
    fail(msg)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0")
@pytest.mark.parametrize("case,dtype", _params())
def test_op(case: OpCase, dtype: str):
    pid = _param_id(case, dtype)
    dt, ir_inputs, ref_inputs, call = _materialise(case, dtype)
    expected = _run_reference(case, dt, ref_inputs)
    try:
        graph, out = _build(case, ir_inputs, call)
        run_inputs = [_clone(t) for t in ir_inputs]
        (actual,) = Program(plan_none(graph))(run_inputs)
    except Exception as e:
        e.add_note(f"{case.op} ({pid}): building or running the one-op graph failed\n"
                   f"{_repro(pid)}")
        raise

    acts, exps = _as_list(actual), _as_list(expected)
    if len(acts) != len(exps):
        pytest.fail(f"{case.op} ({pid}): {len(acts)} results, torch gives {len(exps)}\n"
                    f"{_repro(pid)}", pytrace=False)
    for i, (a, e) in enumerate(zip(acts, exps)):
        _compare(a, e, case, dtype, f" result {i}" if isinstance(actual, (tuple, list)) else "",
                 pid)

    for i, (after, before) in enumerate(zip(run_inputs, ir_inputs)):
        if not _same(after, before):
            raise InputMutated(f"{case.op} ({pid}): running the graph changed input {i}\n"
                               f"{_repro(pid)}")

    node_type = graph[out.name].type
    actual_type = type_of_value(actual, case.op)
    if node_type != actual_type:
        raise InferTypeMismatch(f"{case.op} ({pid}): infer_type says {node_type}, the op "
                                f"returned {actual_type}\n{_repro(pid)}")


# --- table sanity ------------------------------------------------------------------------

_NAMES = [n for n in OP_TABLE if n not in STRUCTURAL]


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=UNRESOLVED[n], raises=KeyError)]
                 if n in UNRESOLVED else []) for n in _NAMES])
def test_table_name_resolves(name):
    fn = ops.resolve_overload(name)
    assert isinstance(fn, torch._ops.OpOverload), name
    assert ops.op_name(fn) == name, f"{name} resolves to {ops.op_name(fn)}"


def test_structural_ops_have_no_overload():
    for name in STRUCTURAL:
        assert name in OP_TABLE
        with pytest.raises(KeyError, match=name):
            ops.resolve_overload(name)


def test_no_name_in_two_categories():
    seen: dict[str, str] = {}
    lists = {cat: getattr(ops, f"_{cat.name}") for cat in Category
             if hasattr(ops, f"_{cat.name}")}
    assert len(lists) >= 9, "the op table's per-category lists were renamed"
    for cat, names in lists.items():
        assert len(names) == len(set(names)), \
            f"{cat.value} lists {sorted({n for n in names if names.count(n) > 1})} twice"
        for n in names:
            assert n not in seen, f"{n} is in both {seen[n]} and {cat.value}"
            seen[n] = cat.value
            assert OP_TABLE[n].category == cat
    # every flagged view / random op is in the table; random ops are sources, or the
    # attention library calls (their dropout draws from the RNG, as torch tags them)
    assert set(ops._VIEWS) <= set(OP_TABLE), sorted(set(ops._VIEWS) - set(OP_TABLE))
    for n in ops._RANDOM:
        assert OP_TABLE[n].category == Category.SOURCE or n in ops.ATTENTION, n
        assert OP_TABLE[n].random, n
    for n, d in OP_TABLE.items():
        assert d.name == n and not d.fallback
        assert lookup(n) is d and ops.category(n) == d.category


def test_every_op_has_a_case():
    covered = {c.op for c in CASES}
    missing = [n for n in _NAMES if n not in covered and n not in NOT_COVERED]
    assert not missing, f"ops of the table with no case in opinfo_cases.py: {missing}"
    stale = sorted(n for n in covered if n not in OP_TABLE)
    assert not stale, f"cases for ops that are not in the table: {stale}"


def _first_case(name: str) -> tuple[OpCase, str]:
    for c in CASES:
        if c.op == name and (c.xfail is None or not c.xfail.applies(c.dtypes[0])):
            return c, c.dtypes[0]
    pytest.fail(f"no case for view op {name} in opinfo_cases.py")


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("name", sorted(n for n, d in OP_TABLE.items() if d.view))
def test_view_ops_return_views(name):
    case, dtype = _first_case(name)
    dt, ir_inputs, _, call = _materialise(case, dtype)
    graph, _ = _build(case, ir_inputs, call)
    (result,) = Program(plan_none(graph))(ir_inputs)
    base = ir_inputs[0]
    for i, r in enumerate(_as_list(result)):
        assert isinstance(r, torch.Tensor)
        assert r.numel() == 0 or _storage(r) == _storage(base), \
            (f"{name} is flagged as a view but result {i} does not share its input's storage\n"
             f"{_repro(_param_id(case, dtype))}")


# ops that copy by definition: their result must never alias an input
_COPIES = sorted(n for n in OP_TABLE if n.endswith(("_copy.default", "_copy.Tensor",
                                                    "_copy.int"))
                 or n in ("clone.default", "copy.default", "expand_copy.default",
                          "prims.convert_element_type.default"))


@pytest.mark.parametrize("name", _COPIES)
def test_copy_ops_do_not_alias(name):
    assert not OP_TABLE[name].view
    case, dtype = _first_case(name)
    dt, ir_inputs, _, call = _materialise(case, dtype)
    graph, _ = _build(case, ir_inputs, call)
    (result,) = Program(plan_none(graph))(ir_inputs)
    assert all(_storage(result) != _storage(t) for t in ir_inputs), \
        f"{name} returned an alias of its input\n{_repro(_param_id(case, dtype))}"


def test_fallback_lookup():
    assert "_fft_r2c.default" not in OP_TABLE
    d = lookup("_fft_r2c.default")
    assert d.category == Category.LIBRARY and d.fallback and d.is_library
    assert d.name == "_fft_r2c.default" and not d.view and not d.random
    assert d.impl is torch.ops.aten._fft_r2c.default
    assert not lookup("add.Tensor").fallback


def test_unknown_op_raises_naming_it():
    with pytest.raises(KeyError, match="no_such_op.default"):
        lookup("no_such_op.default")
    with pytest.raises(KeyError, match="no_such_op"):
        ops.category("no_such_op.default")
    with pytest.raises(KeyError, match="malformed"):
        lookup("add")
