"""The plain way to follow a session: read the table after the cursor, wait, read again.

No bus, no wake-up, no hand-on, no merge: only the table, which is the data of record, read
in order from a cursor that moves past what was read. It is obviously correct and slow (a
read per follower per `poll_seconds`, and up to that much latency), which makes it the
reference the fast path is held to: for the same history, `timeline.replay_then_live` over
the bus delivers the same events as this, in the same order, with no gap and no duplicate
(`tests/live/test_reference.py`, on SQLite and PostgreSQL). It yields what the fast path
yields (batches of `Delivery`), so the same frame writer can send either.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from app.live.timeline import Batch, ReadAfter, read_whole
from app.runtime.session.subscription import Delivery


async def follow_table(
    read_after: ReadAfter, *, after_seq: int, poll_seconds: float
) -> AsyncGenerator[Batch, None]:
    """A session's events after `after_seq`, forever: `read_after(seq)` (a batch of the
    events after seq, in seq order) until it comes back empty, then again every
    `poll_seconds`."""
    last = after_seq
    while True:
        events = await read_whole(read_after(last))
        if not events:
            await asyncio.sleep(poll_seconds)
            continue
        last = events[-1].seq
        yield [Delivery(event) for event in events]
