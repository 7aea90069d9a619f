"""fusionstitch: an operator-fusion compiler for PyTorch graphs.

    import torch, fusionstitch
    f = torch.compile(fn, backend="fusionstitch")
    rep = fusionstitch.explain(fn, *args, strategy="stitch")
    fusionstitch.stats(); fusionstitch.reset_stats()
"""
from .config import __version__
from .frontend.torch import backend, register as _register
from .report.explain import Report, explain
from .runtime.counters import reset_stats, stats
from .runtime import measure as _measure  # noqa: F401  (registers the tuner's timer)

__all__ = ["backend", "explain", "Report", "stats", "reset_stats", "__version__"]

_register()
