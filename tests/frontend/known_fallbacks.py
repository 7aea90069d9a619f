"""The fallbacks zoo and model tests allow, each a lowering no code generator has yet
(README: Status and limits): scatters (scatter, index_put, the embedding gradient) and
advanced indexing (`index.Tensor`, BERT's position ids). Each run must count exactly the
fallbacks its plans show, and each of them must be one of these."""
import logging

from fusionstitch.fusion.legality import SCATTER_OPS

ALLOWED = frozenset(SCATTER_OPS | {"index.Tensor"})


def _allowed(reason: str) -> bool:
    return any(f"({op})" in reason for op in ALLOWED)


def check(stats: dict, report, what: str, steps: int = 1) -> None:
    """`stats()` of `steps` steps against the plans `report` (explain's, or sink_report's)."""
    reasons = [r for g in report.graphs for r in g.fallbacks]
    assert stats["fallbacks"] == steps * report.num_fallbacks, (what, stats["fallbacks"],
                                                                reasons)
    for r in reasons:
        assert _allowed(r), f"{what}: unexpected fallback: {r}"


def check_logged(stats: dict, records: list[logging.LogRecord], what: str) -> None:
    """`stats()` of one call of each compiled graph against the frontend's per-graph
    warnings (caplog's records): the same number of parts, each allowed."""
    parts = []
    for r in records:
        if r.name == "fusionstitch.frontend" and "run through torch" in r.msg:
            parts += str(r.args[2]).split("; ")
        elif r.name == "fusionstitch.frontend" and "runs through torch" in r.msg:
            parts.append(f"the whole graph: {r.args[1]}")
    assert stats["fallbacks"] == len(parts), (what, stats["fallbacks"], parts)
    for p in parts:
        assert _allowed(p), f"{what}: unexpected fallback: {p}"
