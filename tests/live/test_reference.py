"""The fast path and the plain reference path deliver the same frames for the same history.

The fast path is what every stream uses (`replay_then_live` over the bus): subscribe, replay
the table after the cursor, then take what the bus delivers, which is events handed on by this
process's commits without a read, or read once per wake-up (a NOTIFY from another replica
on PostgreSQL, a poll on SQLite). The reference path (`app.live.reference.follow_table`)
only reads the table. Followers of both start at several cursors, some before and some
while a writer commits appends of varied sizes; each must get exactly the seqs after its
cursor, in order, and both paths must send the same frames, byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from app.api.streams.frames import event_frame
from app.assembly import runtime_over
from app.live.bus import EventBus
from app.live.listener import make_bus
from app.live.reference import follow_table
from app.live.timeline import Batch, StreamEnd, replay_then_live
from app.runtime.session.events import Event, EventType, NewEvent
from app.runtime.session.subscription import Delivery
from app.settings import Settings
from app.store.engine import make_engine
from app.store.stores import Stores, open_stores
from tests.conftest import TenantKey

_BATCH = 7  # smaller than some appends: replays and reads take several rounds
Frame = tuple[int, str, dict[str, Any]]


@pytest.fixture
async def other_replica(settings: Settings) -> AsyncIterator[Stores]:
    """A store on an engine of its own: its commits reach the bus only as another
    replica's would (NOTIFY on PostgreSQL, polling on SQLite), never handed on."""
    engine = make_engine(settings)
    yield open_stores(engine)
    await engine.dispose()


def history(rng: random.Random) -> list[list[NewEvent]]:
    """Appends of 1 to 9 events of two types, 120 events in all."""
    appends: list[list[NewEvent]] = []
    total = 0
    while total < 120:
        size = min(rng.choice([1, 1, 1, 2, 3, 5, 9]), 120 - total)
        appends.append([event(total + i) for i in range(size)])
        total += size
    return appends


def event(i: int) -> NewEvent:
    if i % 4 == 3:
        return NewEvent(EventType.STEP_END, {"i": i, "text": "héllo ✓"}, "run_1", f"t{i}")
    item = {"type": "message", "role": "user", "content": f"e{i}"}
    return NewEvent(EventType.MEMORY_ITEMS_APPENDED, {"items": [item]})


def parse(frame: bytes) -> dict[str, Any]:
    """A frame's fields, its data decoded."""
    lines = frame.decode().removesuffix("\r\n\r\n").split("\r\n")
    fields: dict[str, Any] = dict(line.split(": ", 1) for line in lines)
    fields["data"] = json.loads(fields["data"])
    return fields


async def frames(items: AsyncGenerator[Batch | StreamEnd, None], *, until: int) -> list[Frame]:
    """The frames of the events a path delivers, up to seq `until` (then it is closed)."""
    got: list[Frame] = []
    try:
        async with asyncio.timeout(60):
            async for batch in items:
                assert not isinstance(batch, StreamEnd), batch
                for delivery in batch:
                    assert isinstance(delivery, Delivery), delivery
                    e = delivery.event
                    got.append((e.seq, str(e.type), parse(event_frame(delivery))))
                if got and got[-1][0] >= until:
                    return got
    finally:
        await items.aclose()
    return got


@pytest.mark.parametrize("writer", ["this_process", "another_replica"])
async def test_the_fast_path_and_the_reference_path_deliver_the_same_frames(
    store: Stores,
    other_replica: Stores,
    settings: Settings,
    tenant: TenantKey,
    writer: str,
) -> None:
    t = tenant.tenant_id
    source = store if writer == "this_process" else other_replica
    bus: EventBus = make_bus(settings.model_copy(update={"sse_poll_seconds": 0.2}), store.ledger)
    await bus.start()
    created = await runtime_over(store).create(
        t, session_id=None, metadata={}, agent={}, binding={}
    )
    sid = created.session.session_id
    rng = random.Random(f"reference-{writer}")
    for append in history(rng)[:4]:  # some history before anyone follows
        await source.ledger.append_events(t, sid, events=append)
    appends = history(rng)
    head = (await store.ledger.get_session(t, sid)).last_seq  # type: ignore[union-attr]
    final = head + sum(len(a) for a in appends)

    async def read_after(seq: int) -> list[Event]:
        return await store.ledger.list_events(t, sid, after_seq=seq, limit=_BATCH)

    async def fast(after: int) -> list[Frame]:
        now = (await store.ledger.get_session(t, sid)).last_seq  # type: ignore[union-attr]
        items = replay_then_live(
            lambda: bus.subscribe(t, sid, head=now),
            read_after,
            after_seq=after,
            types=None,
            batch=_BATCH,
        )
        return await frames(items, until=final)

    async def reference(after: int) -> list[Frame]:
        return await frames(
            follow_table(read_after, after_seq=after, poll_seconds=0.05), until=final
        )

    late_starts = [(20, 0), (60, 11)]  # (events written before they join, cursor back)
    written = {n: asyncio.Event() for n, _ in late_starts}

    async def write() -> None:
        done = 0
        for append in appends:
            await source.ledger.append_events(t, sid, events=append)
            done += len(append)
            for n, reached in written.items():
                if done >= n:
                    reached.set()
            await asyncio.sleep(rng.choice([0, 0, 0.001, 0.01]))

    async def join_later(n: int, back: int) -> tuple[list[Frame], list[Frame]]:
        """A pair of followers that start while the history is being written."""
        await written[n].wait()
        cursor = head + n - back
        return await asyncio.gather(fast(cursor), reference(cursor))

    try:
        cursors = [0, 3, head]
        early = [asyncio.create_task(fast(c)) for c in cursors]
        early += [asyncio.create_task(reference(c)) for c in cursors]
        late = [asyncio.create_task(join_later(n, back)) for n, back in late_starts]
        await asyncio.sleep(0.05)  # the early followers are subscribed (or reading)
        await write()
        results = await asyncio.gather(*early)
        pairs = await asyncio.gather(*late)
    finally:
        await bus.stop()

    table = await store.ledger.list_events(t, sid, after_seq=0, limit=final + 1)
    assert [e.seq for e in table] == list(range(1, final + 1))
    for i, cursor in enumerate(cursors):
        fast_frames, reference_frames = results[i], results[i + len(cursors)]
        assert [f[0] for f in fast_frames] == list(range(cursor + 1, final + 1)), cursor
        assert fast_frames == reference_frames, cursor
        assert [f[1] for f in fast_frames] == [str(e.type) for e in table[cursor:]]
    for (fast_frames, reference_frames), (n, back) in zip(pairs, late_starts, strict=True):
        cursor = head + n - back
        assert [f[0] for f in fast_frames] == list(range(cursor + 1, final + 1)), cursor
        assert fast_frames == reference_frames, cursor
    stats = bus.stats()
    if writer == "this_process":
        assert stats["handed_on"] > 0  # the fast path's own shortcut was taken
    else:  # heard as another replica's commits are: a NOTIFY or a poll, then a read
        assert stats["handed_on"] == 0 and stats["drains"] > 0
