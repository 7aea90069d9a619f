"""Canonicalisation passes (bmm rewrites, view folding, constant folding, CSE, GEMM
accumulation, DCE) and their pipeline."""
from .broadcast_bmm import unbroadcast_bmm
from .constant_fold import MAX_FOLDED_NUMEL, constant_fold
from .cse import cse
from .dce import dce
from .gemm_accumulate import accumulate_products
from .matvec import decompose_matvec
from .pipeline import PIPELINE, canonicalize
from .simplify import fold_views
from .view_hoist import hoist_views

__all__ = ["MAX_FOLDED_NUMEL", "PIPELINE", "accumulate_products", "canonicalize", "constant_fold", "cse", "dce",
           "decompose_matvec", "fold_views", "hoist_views", "unbroadcast_bmm"]
