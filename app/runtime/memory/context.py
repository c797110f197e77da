"""Context projection: fit memory into a model's input budget without rewriting memory.

Newest first: the kept part is a suffix of memory that starts at a whole interaction (pairs
stay whole), the summary is always kept, and the report says what was kept and dropped.
"""

from __future__ import annotations

from typing import Any

from app.runtime.memory.calibration import scaled
from app.runtime.memory.items import estimate_tokens
from app.runtime.session.event_payloads import ProjectionReport
from app.runtime.session.projector import cut_points


def project(
    items: list[dict[str, Any]], summary: str | None, budget: int | None, ratio: float = 1.0
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(items to send, projection report as its JSON). `budget` None means no limit."""
    kept, report = projection(items, summary, budget, ratio)
    return kept, report.to_payload()


def projection(
    items: list[dict[str, Any]], summary: str | None, budget: int | None, ratio: float = 1.0
) -> tuple[list[dict[str, Any]], ProjectionReport]:
    """(items to send, projection report): the report is the MEMORY_COMPRESS payload a run
    records when the projection dropped items. `ratio` is the calibration of the estimate
    for the model the prompt is for (calibration.py; 1.0: the heuristic as is)."""

    def estimate(part: list[dict[str, Any]]) -> int:
        return scaled(estimate_tokens(part, summary), ratio)

    before = estimate(items)
    kept = items
    if budget is not None and before > budget:
        cuts = cut_points(items)
        fitting = [c for c in cuts if estimate(items[c:]) <= budget]
        if fitting:
            kept = items[fitting[0] :]
        elif cuts:
            kept = items[cuts[-1] :]  # the newest interaction alone, even if over budget
    # Nothing cut (the common case): the estimate is the one just made, not a second pass.
    after = before if kept is items else estimate(kept)
    report = ProjectionReport(
        budget=budget,
        tokens_before=before,
        tokens_after=after,
        items_kept=len(kept),
        items_dropped=len(items) - len(kept),
        summary_kept=summary is not None,
        fits=budget is None or after <= budget,
    )
    return kept, report


def budget_of(max_input_tokens: int | None, reserved_output_tokens: int) -> int | None:
    if max_input_tokens is None:
        return None
    return max(1, max_input_tokens - reserved_output_tokens)
