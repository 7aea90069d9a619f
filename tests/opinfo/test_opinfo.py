"""torch's OpInfo database (`op_db`) through the backend, as Inductor's OpInfo test does.

Every OpInfo entry runs in float32, bfloat16 and float16 (an op with none of them in the
first other dtype it has), forward (`fwd`) and, where autograd supports the dtype,
outputs and gradients (`grad`), through `torch.compile(fn, backend=fusionstitch
.backend(target="cpu"), dynamic=False)`; float32 forward also on `interpret` (one
sample). Under FUSIONSTITCH_STRICT=1 an internal error fails the case. A case is right
when every output, gradient and updated input matches eager within the dtype's tolerance
or is no further from a float64 run than eager is (opinfo_sweep.py says exactly how).

Size (FUSIONSTITCH_OPINFO): `ci` (the default) runs a fixed share of the cases, one
sample each, with at least one case of every op (CI_SHARE below: 30%, 1231 cases, about
4 minutes of `make test` on two cores); `all` every case and every sample; a number N
every case with N samples. The cases are split over two files (this one and test_opinfo_b.py) so
that `make test`'s two workers share them; SKIPS below is the one skip list of both.

Repro of a failing case: the message names the sample; all of an op's samples run with
    FUSIONSTITCH_OPINFO=all python -m pytest tests/opinfo -k "<op id>"
    python tests/opinfo/opinfo_sweep.py --ops '^<op id>$' --samples all
"""
from __future__ import annotations

import fnmatch
import os
import zlib
from dataclasses import dataclass

import pytest
import torch

from opinfo_sweep import (case_id, check_sample, combos, describe, op_id, pick_samples,
                          samples_per_case, seed_of)


@dataclass(frozen=True)
class Skip:
    """Cases not run: ops (globs on op ids) in `dtypes` / `modes` / `targets` (None: all),
    and why. Every reason is torch's, not ours."""

    ops: tuple[str, ...]
    reason: str
    dtypes: tuple[str, ...] | None = None
    modes: tuple[str, ...] | None = None
    targets: tuple[str, ...] | None = None

    def applies(self, op: str, dtype: str, mode: str, target: str) -> bool:
        return (any(fnmatch.fnmatchcase(op, p) for p in self.ops)
                and (self.dtypes is None or dtype in self.dtypes)
                and (self.modes is None or mode in self.modes)
                and (self.targets is None or target in self.targets))


# The skip list: every case not run, with the reason (none is a fusionstitch bug).
SKIPS = (
    Skip(("bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial",
          "normal", "normal.*", "uniform", "rand*", "randn", "randint", "randint_like",
          "nn.functional.*dropout*", "nn.functional.rrelu", "nn.functional.fractional_max_pool*",
          "svd_lowrank", "pca_lowrank", "nn.functional.scaled_dot_product_attention",
          "nn.functional.multi_head_attention_forward"),
         "random: op_db reseeds torch's generator inside the call (wrapper_set_seed), which "
         "Dynamo does not trace, so the op runs eagerly and nothing reaches the backend"),
    Skip(("nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount",
          "combinations", "nn.functional.one_hot", "nn.functional.ctc_loss", "corrcoef", "cov",
          "nn.functional.gaussian_nll_loss", "linalg.lstsq*"),
         "nothing to compile: Dynamo runs the op eagerly (a data-dependent output shape, or "
         "a data-dependent check on the values)"),
    Skip(("item", "allclose", "equal"),
         "nothing to compile: the op returns a Python value, which Dynamo runs eagerly"),
    Skip(("to_sparse", "sparse.*"), "nothing to compile: Dynamo does not trace sparse tensors"),
    Skip(("resize_", "resize_as_"), "nothing to compile: Dynamo does not trace resize_"),
    Skip(("empty_strided",),
         "nothing to compile: op_db calls it through wrapper_set_seed (see random), and "
         "its values are undefined"),
    Skip(("jiterator_*",), "CUDA only: eager raises 'Jiterator is only supported on CUDA'"),
    Skip(("torch.ops.aten._flash_attention_forward", "torch.ops.aten._efficient_attention_forward",
          "nn.functional.batch_norm.without_cudnn"),
         "CUDA only: op_db gives it no CPU dtype"),
)


def skip_reason(op: str, dtype: str, mode: str, target: str) -> str | None:
    return next((s.reason for s in SKIPS if s.applies(op, dtype, mode, target)), None)


# The CI share: every case whose id hashes into the first CI_SHARE of 1000 buckets, one
# sample each, and of an op none of whose cases does, the case that hashes lowest: a
# fixed, deterministic set that spreads over ops, dtypes and modes and has every op.
CI_SHARE = 300


def _bucket(case: str) -> int:
    return zlib.crc32(case.encode()) % 1000


def ci_share(ids: list[str]) -> list[str]:
    """The ids of an op's cases (`ids`) that the CI share runs."""
    return [i for i in ids if _bucket(i) < CI_SHARE] or [min(ids, key=_bucket)]


def all_cases(part: int, parts: int = 2):
    """pytest params of this file's part of the sweep (op_db split by position)."""
    from torch.testing._internal.common_methods_invocations import op_db
    count = samples_per_case()
    ci = os.environ.get("FUSIONSTITCH_OPINFO", "ci").strip().lower() in ("", "ci")
    out = []
    for k, op in enumerate(op_db):
        if k % parts != part:
            continue
        mine = {case_id(op, *c): c for c in combos(op)}
        for cid in (ci_share(list(mine)) if ci else mine):
            target, mode, dtype = mine[cid]
            reason = skip_reason(op_id(op), dtype, mode, target)
            n = 1 if target == "interpret" else count
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            out.append(pytest.param(op, dtype, mode, target, n, id=cid, marks=marks))
    return out


# torch's deprecation notes and numpy's log(0) in the interpreter, for op_db's samples
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")


def run_case(op, dtype: str, mode: str, target: str, count: int | None) -> None:
    """Every picked sample of the case; fails with each sample's problems."""
    if dtype == "none":
        pytest.fail(f"{op_id(op)}: op_db gives it no dtype to run on the CPU; add it to "
                    "SKIPS if that is torch's")
    failures = []
    for i, sample in pick_samples(op, dtype, mode, count):
        seed = seed_of(op_id(op), dtype, mode, i)
        try:
            problems = check_sample(op, mode, target, sample, seed)
        except Exception as e:   # noqa: BLE001 -- every error of a sample is reported
            problems = [f"{type(e).__name__}: {str(e)[:1500]}"]
        if problems:
            failures.append(f"sample {i} ({describe(sample)[:300]}):\n  " +
                            "\n  ".join(problems))
    torch._dynamo.reset()
    if failures:
        pytest.fail(f"{op_id(op)} {dtype} {mode} on {target}:\n" + "\n".join(failures) +
                    f"\nrepro: python tests/opinfo/opinfo_sweep.py --ops '^{op_id(op)}$' "
                    "--samples all", pytrace=False)


@pytest.mark.parametrize("op,dtype,mode,target,count", all_cases(0))
def test_opinfo(op, dtype, mode, target, count):
    run_case(op, dtype, mode, target, count)


def test_skip_list_names_real_ops():
    """Every glob of SKIPS matches some op of op_db (a renamed op is noticed)."""
    from torch.testing._internal.common_methods_invocations import op_db
    ids = [op_id(op) for op in op_db]
    for s in SKIPS:
        for pattern in s.ops:
            assert fnmatch.filter(ids, pattern), f"SKIPS: {pattern!r} matches no op"


def test_ci_share_has_every_op(monkeypatch):
    """The CI share runs at least one case of every op of op_db, and about CI_SHARE of the
    cases, the same ones in every run."""
    from torch.testing._internal.common_methods_invocations import op_db
    monkeypatch.setenv("FUSIONSTITCH_OPINFO", "ci")
    ci = [p.id for part in (0, 1) for p in all_cases(part)]
    assert {op_id(op) for op in op_db} <= {i.rsplit("-", 3)[0] for i in ci}
    assert ci == [p.id for part in (0, 1) for p in all_cases(part)]
    monkeypatch.setenv("FUSIONSTITCH_OPINFO", "all")
    every = [p.id for part in (0, 1) for p in all_cases(part)]
    assert set(ci) <= set(every) and 0.25 < len(ci) / len(every) < 0.4
