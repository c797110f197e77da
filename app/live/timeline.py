"""A session's or a tenant's timeline: the table after a cursor, then live, each event once.

As docs/reference/streams.md says: subscribe to the bus first, replay the table after the
cursor in short transactions, then pass live events only above the last seq handed on.
`reference.py` is the plain way to follow a session (read the table, wait, read again)
against which this fast path is tested.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TypeVar

import anyio

from app.runtime.ports import TenantCursor, TenantPage
from app.runtime.session.events import Event, EventType
from app.runtime.session.subscription import Delivery, Ephemeral, Subscription

Subscribe = Callable[[], AbstractContextManager[Subscription]]
ReadAfter = Callable[[int], Awaitable[list[Event]]]
ReadPage = Callable[[TenantCursor], Awaitable[TenantPage]]

T = TypeVar("T")

_READ_DEADLINE = 30.0
_PENDING_FIRST_WAIT = 0.05
_PENDING_MAX_WAIT = 1.0


async def read_whole(read: Awaitable[T]) -> T:
    """Await one short table read without letting a disconnect cancel it half-way.

    A cancelled read leaves SQLAlchemy a connection in an unknown state, which it must
    throw away (with aiosqlite, leaking a task each time); shielded, the read finishes and
    returns its connection to the pool, and the cancellation lands right after. The
    deadline keeps a hung database from pinning the stream.
    """
    with anyio.fail_after(_READ_DEADLINE, shield=True):
        return await read


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The stream stops on its own (`overflow`, `shutdown`); resume after `resume_after`."""

    reason: str
    resume_after: str


Batch = list[Delivery | Ephemeral]


class LastBatch(list[Delivery | Ephemeral]):
    """A run's last batch (it holds RUN_FINISHED): its stream ends right after it, so the
    response sends it and the end of its body in one write."""


async def replay_then_live(
    subscribe: Subscribe,
    read_after: ReadAfter,
    *,
    after_seq: int,
    types: frozenset[str] | None,
    batch: int,
    handoff_delay: float = 0.0,
    known: Sequence[Event] = (),
) -> AsyncGenerator[Batch | StreamEnd, None]:
    """A session's events after `after_seq`, then live, with no gap and no duplicate.

    In this order (docs/reference/streams.md): (1) subscribe, so that nothing committed from
    now on can be missed; (2) replay the table after the cursor, in short transactions; (3)
    pass live events only above the last seq handed on. `read_after(seq)` returns up to
    `batch` events after seq (already filtered by `types`). `handoff_delay` is the fault
    point between the replay and the switch to live.

    `known`: the committed events from after `after_seq` up to the head the subscription
    was taken at (a run's start, for a stream opened with it), which replace the replay.

    Yields batches in order: whatever was ready together, so that a stream under load
    sends several frames per write instead of one.
    """
    last = after_seq
    with subscribe() as sub:
        if not known:  # events written elsewhere from now on are announced here
            await sub.announced()
        if handoff_delay:
            await asyncio.sleep(handoff_delay)
        if known:
            last = known[-1].seq
            first: Batch = [
                Delivery(e)
                for e in known
                if e.seq > after_seq and (types is None or e.type in types)
            ]
            if first:
                yield first
        while not known:  # the replay, unless the events after the cursor are in hand
            if sub.overflowed:  # dropped live items are all in the table: read them again
                sub.reset()
            events = await read_whole(read_after(last))
            frames = sub.take_ephemeral() if sub.deltas else []
            if events:
                last = events[-1].seq
            if events or frames:
                yield interleave(events, frames)
            if sub.closed is not None:
                yield StreamEnd(sub.closed, str(last))
                return
            if len(events) < batch and not sub.overflowed:
                break
        while True:
            items = await sub.take()
            if sub.closed is not None or sub.overflowed:
                yield StreamEnd(sub.closed or "overflow", str(last))
                return
            out: Batch = []
            for item in items:
                if isinstance(item, Ephemeral):
                    out.append(item)
                elif item.event.seq > last:
                    last = item.event.seq
                    if types is None or item.event.type in types:
                        out.append(item)
            if out:
                yield out


def interleave(events: list[Event], frames: list[Ephemeral]) -> Batch:
    """Replayed events with the delta frames that arrived meanwhile, each frame just before
    its turn's MODEL_RESPONSE when the batch holds it (so text comes before the response
    that makes it final), else after the batch (its turn is still being written)."""
    out: Batch = [Delivery(event) for event in events]
    if not frames:
        return out
    ends: dict[str | None, int] = {
        e.turn_id: i
        for i, e in reversed(list(enumerate(events)))
        if e.type == EventType.MODEL_RESPONSE and e.turn_id is not None
    }
    before: dict[int, list[Ephemeral]] = {}
    after: list[Ephemeral] = []
    for frame in frames:
        at = ends.get(frame.frame.get("turn_id"))
        (after if at is None else before.setdefault(at, [])).append(frame)
    merged: Batch = []
    for i, item in enumerate(out):
        merged.extend(before.get(i, ()))
        merged.append(item)
    return merged + after


async def run_timeline(
    items: AsyncGenerator[Batch | StreamEnd, None], *, run_id: str
) -> AsyncGenerator[Batch | StreamEnd, None]:
    """A session's timeline (`replay_then_live`) narrowed to one run: the run's events and
    its delta frames, ending right after its RUN_FINISHED (or at an `overflow`/`shutdown`).

    The timeline's reads are expected to hold only the run's events already; live items are
    filtered here (another run's late deltas, events of the session outside the run).
    """
    try:
        async for item in items:
            if isinstance(item, StreamEnd):
                yield item
                return
            out: Batch = []
            finished = False
            for entry in item:
                if isinstance(entry, Ephemeral):
                    if entry.frame.get("run_id") in (None, run_id):
                        out.append(entry)
                elif entry.event.run_id == run_id:
                    out.append(entry)
                    if entry.event.type == EventType.RUN_FINISHED:
                        finished = True
                        break
            if finished:
                yield LastBatch(out)
                return
            if out:
                yield out
    finally:
        await items.aclose()


async def tenant_timeline(
    subscribe: Subscribe, read_page: ReadPage, *, after: TenantCursor
) -> AsyncGenerator[tuple[Event, TenantCursor] | StreamEnd, None]:
    """Every event of a tenant after `after`, then live, each exactly once.

    Wake-ups only prompt a read; the read itself decides what is safe to pass (see
    `TenantCursor`). While committed rows wait behind an older open transaction, the read is
    retried with a short backoff, since that transaction may commit without a wake-up.
    """
    cursor = after
    wait = _PENDING_FIRST_WAIT
    with subscribe() as sub:
        await sub.announced()
        while True:
            page = await read_whole(read_page(cursor))
            for event, position in page.entries:
                cursor = position
                yield event, position
            if sub.closed is not None:
                yield StreamEnd(sub.closed, cursor.encode())
                return
            if page.more:
                continue
            if page.pending:
                await sub.take(max_wait=wait)
                wait = min(wait * 2, _PENDING_MAX_WAIT)
            else:
                wait = _PENDING_FIRST_WAIT
                await sub.take()
