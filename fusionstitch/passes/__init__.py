"""Canonicalisation passes (CSE, DCE, view folding, constant folding) and their pipeline."""
from .constant_fold import MAX_FOLDED_NUMEL, constant_fold
from .cse import cse
from .dce import dce
from .pipeline import PIPELINE, canonicalize
from .simplify import fold_views

__all__ = ["MAX_FOLDED_NUMEL", "PIPELINE", "canonicalize", "constant_fold", "cse", "dce",
           "fold_views"]
