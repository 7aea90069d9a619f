"""A float cast to an integer type and back gives eager's value and sign of zero.

GCC compiles (float)(int32_t)x as trunc(x) under -fno-trapping-math, and trunc(-0.5) is
-0.0 where eager's integer 0 gives +0.0: copysign of it read the wrong sign (training
fuzz, seed 140777). The printer now writes that round trip as trunc(x) + 0.0
(targets/cpp/printer.cast). Every integer type, from and to both float widths and the
half types, on the cpu target and Triton's interpreter; values in range of every integer
type (out of range the conversion is undefined in C and in torch).
"""
import shutil

import pytest
import torch

import fusionstitch

TARGETS = ["interpret"] + (["cpu"] if shutil.which("g++") else [])
VALUES = [-0.5, -0.0, 0.0, 0.7, -0.99, -1.5, 2.5, -3.99, 100.25, -100.75, 1e-3, -1e-3]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mid", [torch.int32, torch.int16, torch.int8, torch.uint8,
                                 torch.int64])
def test_round_trip_through_an_integer(target, src, mid):
    def fn(x, s):
        back = [x.to(mid).to(d) for d in (torch.float32, torch.float64, torch.float16,
                                          torch.bfloat16)]
        # the sign of each result, as copysign reads it
        return back + [torch.copysign(s, b.to(s.dtype)) for b in back]

    torch._dynamo.reset()
    vals = VALUES if mid != torch.uint8 else [v for v in VALUES if v > -1]
    x = torch.tensor(vals * 3, dtype=src)
    s = torch.ones(x.shape, dtype=src)
    want = fn(x, s)
    got = torch.compile(fn, backend=fusionstitch.backend(target=target))(x, s)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype
        assert torch.equal(g, w) and torch.equal(torch.signbit(g), torch.signbit(w)), (g, w)
