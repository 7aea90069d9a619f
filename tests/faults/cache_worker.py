"""One run of the cache fault tests (tests/faults/test_cache_faults.py), in its own process:
compile two small graphs on the targets named in argv (cpu, interpret) with the cache
folder of FUSIONSTITCH_CACHE_DIR, check every result against eager, print one JSON line of
stats prefixed by OK. Any crash, hang or wrong number makes the calling test fail."""
import json
import sys

import torch

import fusionstitch


def softmax_scale(x, w):
    return torch.softmax(x * 3, -1) + w


def norm_gelu(x, w):
    h = torch.nn.functional.layer_norm(x, x.shape[-1:]) * w
    return torch.nn.functional.gelu(h).sum(0), h.exp().amax(-1)


def main() -> None:
    targets = sys.argv[1].split(",")
    torch.manual_seed(0)
    x, w = torch.randn(16, 48), torch.randn(48)
    stats = {}
    for target in targets:
        for fn in (softmax_scale, norm_gelu):
            torch._dynamo.reset()
            compiled = torch.compile(fn, backend=fusionstitch.backend(target=target))
            with torch.no_grad():   # inference graphs: the graph cache takes them
                got, want = compiled(x, w), fn(x, w)
            for g, r in zip(got if isinstance(got, tuple) else (got,),
                            want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
        stats[target] = fusionstitch.stats()
        fusionstitch.reset_stats()
    print("OK " + json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
