"""Context projection: fit memory into a model's input budget without rewriting memory.

Newest first: the kept part is a suffix of memory that starts at a whole interaction (pairs
stay whole), the summary is always kept, and the report says what was kept and dropped.
"""

from __future__ import annotations

from typing import Any

from app.runtime.memory.calibration import scaled
from app.runtime.memory.items import estimate_tokens, item_text, tokens_for
from app.runtime.session.event_payloads import ProjectionReport
from app.runtime.session.projector import cuts_newest_first


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

    def tokens(chars: int, count: int) -> int:
        return scaled(tokens_for(chars, count, summary), ratio)

    before = scaled(estimate_tokens(items, summary), ratio)
    kept, after = items, before  # nothing cut (the common case): one pass over memory
    if budget is not None and before > budget:
        # The longest suffix from a cut that fits, else the newest interaction alone. Walked
        # from the newest cut back, and stopped at the first that does not fit: a longer
        # suffix never estimates smaller. So a long memory over its budget costs what is
        # kept, where estimating every suffix afresh cost time quadratic in the memory.
        best, best_chars, chars, counted = 0, 0, 0, len(items)
        for cut in cuts_newest_first(items):
            chars += sum(len(item_text(item)) for item in items[cut:counted])
            counted = cut
            if best and tokens(chars, len(items) - cut) > budget:
                break
            best, best_chars = cut, chars
        if best:
            kept, after = items[best:], tokens(best_chars, len(items) - best)
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
