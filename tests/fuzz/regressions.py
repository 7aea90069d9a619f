"""Fuzzer programs that once failed, as (JSON line, target): checked on every run.

Add the JSON line a failure prints (tests/fuzz/check.py) with the target it failed on,
and a comment naming the bug.
"""
REGRESSIONS: list[tuple[str, str]] = [
    # a reduction over a 0-d input read its dim as an index (IndexError in lowering, run through
    # torch); found by CI's training fuzz, fixed in schedule.reduced_dims
    ('{"inputs":[{"shape":[],"dtype":"float32","grad":true,"fill":"uniform"}],"body":["v0 = torch.mean(a0, dim=(0,), keepdim=False)","v1 = v0.mean()","v2 = v1.to(torch.bfloat16).to(v1.dtype)","v3 = v1.amax()"],"outputs":["v3"],"tolerance":{"v3":0.0001},"train":true,"seed":14033}', "cpu"),
    ('{"inputs":[{"shape":[],"dtype":"float32","grad":true,"fill":"uniform"}],"body":["v0 = torch.mean(a0, dim=(0,), keepdim=False)","v1 = v0.mean()","v2 = v1.to(torch.bfloat16).to(v1.dtype)","v3 = v1.amax()"],"outputs":["v3"],"tolerance":{"v3":0.0001},"train":true,"seed":14033}', "interpret"),
    # x.half().float() was dropped (the result equalled x): the explicit round trip must round
    ('{"inputs":[{"shape":[3,5],"dtype":"float32","grad":false,"fill":"randn"}],"body":["v0 = a0.to(torch.float16).to(torch.float32)","v1 = a0.to(torch.bfloat16).to(torch.float32)","v2 = v0 - v1"],"outputs":["v0","v1","v2"],"tolerance":{"v0":0.0,"v1":0.0,"v2":0.0},"train":false,"seed":1}', "cpu"),
]
