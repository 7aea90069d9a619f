"""Execution of fusion plans: programs, counters, (later) kernel cache and CUDA graphs."""
from .counters import reset_stats, stats

__all__ = ["stats", "reset_stats"]
