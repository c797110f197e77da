"""Context projection: fit memory into a model's input budget without rewriting memory.

Newest first: the kept part is a suffix of memory that starts at a whole interaction (pairs
stay whole), the summary is always kept, and the report says what was kept and dropped.
"""

from __future__ import annotations

from typing import Any

from app.runtime.memory.calibration import scaled
from app.runtime.memory.items import estimate_tokens, item_text
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

    extra = len(summary or "")

    def tokens(chars: int, count: int) -> int:
        """`estimate_tokens` of `count` items of `chars` characters, scaled."""
        return scaled((chars + extra) // 4 + 4 * count, ratio)

    before = scaled(estimate_tokens(items, summary), ratio)
    kept, after = items, before  # nothing cut (the common case): one pass over memory
    if budget is not None and before > budget:
        # The longest suffix starting at a cut that fits. Each suffix's size comes from one
        # running sum, not a pass of its own: estimating every suffix afresh made a long
        # session over its budget cost time quadratic in its memory, on every model call.
        cuts = cut_points(items)
        sizes = [len(item_text(item)) for item in items]
        total, upto, at = sum(sizes), 0, 0
        for cut in cuts:
            upto += sum(sizes[at:cut])
            at = cut
            if tokens(total - upto, len(items) - cut) <= budget:
                break
        # If none fits, the loop ended at the newest interaction: kept alone, though over.
        if at:
            kept, after = items[at:], tokens(total - upto, len(items) - at)
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
