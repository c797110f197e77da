"""A long read turns its rows into events without running the cycle collector over and over:
each row is let go as its event is made (`events_from_rows`)."""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from typing import Any

from app.runtime.session.events import Event
from app.store.base import events_from_rows


def test_rows_become_events_one_for_one_without_a_collection_per_700() -> None:
    now = datetime.now(UTC)
    rows: list[Any] = [
        (f"e{i}", "s", i, "T", {"n": [i]}, now, None, f"t{i}", i) for i in range(20_000)
    ]
    expected = [Event(*row) for row in rows]
    started: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        events = events_from_rows(rows)
    finally:
        gc.callbacks.remove(count)
    assert events == expected
    assert rows == [None] * len(expected)
    # The first rows go to the interpreter's free list for tuples instead of being freed:
    # a collection or two then, against one per 700 new events when the rows were kept.
    assert len(started) <= 3
