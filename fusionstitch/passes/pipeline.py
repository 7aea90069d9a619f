"""The canonicalisation pipeline: every pass, in order, with why it is there."""
from __future__ import annotations

import logging
from typing import Callable

from ..ir.graph import Graph
from .constant_fold import constant_fold
from .attention_layout import attention_query_layout
from .conv_layout import channels_last_convs
from .cse import cse
from .broadcast_bmm import unbroadcast_bmm
from .dce import dce
from .gemm_accumulate import accumulate_products
from .keepdim_views import drop_kept_dims
from .distinct_outputs import keep_apart
from .matvec import decompose_matvec
from .output_layouts import spell_output_layouts
from .read_copies import read_channels_last_copies
from .saved_layouts import save_channels_last
from .simplify import fold_views
from .strided_scatter import rewrite_strided_scatters
from .view_hoist import hoist_views

log = logging.getLogger("fusionstitch.passes")

Pass = Callable[[Graph], Graph]

# One pass over this list reaches a fixpoint on typical graphs: no pass creates
# work for an earlier one (CSE and DCE only merge or drop nodes, never making a
# new view chain or a new all-constant node). conv_layout makes permute pairs on
# purpose (a layout the runtime keeps); it must stay after fold_views. A pass
# marked `needs_context` is called as run(graph, target, free_outputs); one marked
# `needs_orders` as run(graph, output_orders).
PIPELINE: tuple[tuple[str, Pass, str], ...] = (
    ("unbroadcast_bmm", unbroadcast_bmm,
     "first: a bmm of broadcasts becomes one mm before matvec looks at bmm shapes"),
    ("matvec", decompose_matvec,
     "early: its permutes and reductions then go through folding like the graph's own"),
    ("strided_scatter", rewrite_strided_scatters,
     "before fold_views, which folds the views it makes into their neighbours'"),
    ("view_hoist", hoist_views,
     "before fold_views, which folds the squeeze and unsqueeze pairs it leaves, and CSE, "
     "which merges the equal ops it makes (one per step of a stacked mean's backward)"),
    ("fold_views", fold_views,
     "first: collapsed view chains give CSE one spelling per view and expose identities"),
    ("keepdim_views", drop_kept_dims,
     "after fold_views, whose one view per chain it folds into a keepdim reduction "
     "(a bias gradient's view of its [1, n] sum)"),
    ("constant_fold", constant_fold,
     "before CSE so that equal folded constants merge; needs no CSE itself"),
    ("cse", cse,
     "after folding, when equal computations are spelled alike"),
    ("conv_layout", channels_last_convs,
     "after fold_views, which would cancel its permute pairs, and after CSE, so that "
     "twin convolutions are one; target-gated (Target.conv_layout: cpu runs convolutions "
     "channels-last)"),
    ("attention_layout", attention_query_layout,
     "after fold_views, which would cancel its permute pair, and after CSE; a query "
     "computed by a kernel is stored in its attention output's reading order"),
    ("saved_layouts", save_channels_last,
     "after conv_layout, whose channels-last results it follows, and before read_copies, "
     "whose rewrite then reaches the other readers of a value saved channels-last; "
     "target-gated as conv_layout is"),
    ("output_layouts", spell_output_layouts,
     "after fold_views, which would cancel its permute pair, and before read_copies, "
     "whose rewrite then reaches a channels-last output's other readers; gets eager's "
     "output layouts (output_orders)"),
    ("read_copies", read_channels_last_copies,
     "right after conv_layout, whose NHWC copies it has the other readers of a value read; "
     "target-gated as conv_layout is"),
    ("gemm_accumulate", accumulate_products,
     "after CSE, so that a product has its true readers, and after conv_layout, whose "
     "GEMMs may be addends: a sum of products becomes addmms that add into it"),
    ("dce", dce,
     "last: drops what folding and CSE left without users"),
)


def canonicalize(g: Graph, *, verify: bool = False,
                 dump: Callable[[str, Graph], None] | None = None,
                 target=None, free_outputs: frozenset[int] = frozenset(),
                 output_orders: dict[int, tuple[int, ...]] | None = None) -> Graph:
    """Run every pass of PIPELINE in order, then keep apart the outputs they merged
    (passes/distinct_outputs.py).

    target: the Target the graph is compiled for (a duck: passes sit below targets),
    read by the passes marked `needs_context` (conv_layout); None: no target-gated
    rewrite runs. free_outputs: positions of graph outputs whose memory layout the
    caller does not see (a training forward's values saved for its backward); the others
    keep the layout eager gives them. output_orders: graph output position -> the order
    of its dims in eager's memory, where that is not row-major (frontend/output_layout);
    outputs our kernels compute are stored in it (passes/output_layouts.py).

    verify: check the graph with `ir.verify.verify` before the first pass and
    after each one. dump: called as dump(pass_name, graph) after each pass.
    """
    check = None
    if verify:
        from ..ir.verify import verify as check  # lazy: the verifier is a debug tool
        check(g)
    given = g
    for name, run, _reason in PIPELINE:
        before = len(g)
        if getattr(run, "needs_context", False):
            g = run(g, target, free_outputs)
        elif getattr(run, "needs_orders", False):
            g = run(g, output_orders or {})
        else:
            g = run(g)
        log.debug("pass %s: %d -> %d nodes", name, before, len(g))
        if check is not None:
            check(g)
        if dump is not None:
            dump(name, g)
    # last: outputs the passes merged (or made a parameter) get memory of their own again
    g = keep_apart(given, g)
    if check is not None:
        check(g)
    return g
