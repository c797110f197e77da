"""The replay-then-live merge (`app.live.timeline.replay_then_live`) on the real bus and store.

R9 at the function level: 100 connects, each with a 200 ms fault delay between subscribing
and reading the table, while a writer appends without pause; every connection must get
exactly the seqs after its cursor. A control shows that the delay does open the race: the
wrong order (replay, then subscribe from "now") loses events under the same load.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import contextmanager, suppress

import pytest

from app.assembly import runtime_over
from app.live.bus import EventBus, InProcessBus
from app.live.timeline import Batch, StreamEnd, replay_then_live
from app.runtime.session.events import Event, EventType, NewEvent
from app.runtime.session.subscription import Delivery, Ephemeral, Subscription
from app.store.stores import Stores
from tests.conftest import TenantKey


@pytest.fixture
async def bus(store: Stores) -> AsyncIterator[EventBus]:
    bus = InProcessBus(store.ledger, queue_size=1000, poll_seconds=30, read_batch=50)
    await bus.start()
    yield bus
    await bus.stop()


async def new_session(store: Stores, tenant: TenantKey) -> str:
    runtime = runtime_over(store)
    loaded = await runtime.create(
        tenant.tenant_id, session_id=None, metadata={}, agent={}, binding={}
    )
    return loaded.session.session_id


def item_event(text: str) -> NewEvent:
    item = {"type": "message", "role": "user", "content": text}
    return NewEvent(EventType.MEMORY_ITEMS_APPENDED, {"items": [item]})


async def append(store: Stores, tenant: TenantKey, sid: str, n: int = 1) -> int:
    events = [item_event(f"e{i}") for i in range(n)]
    result = await store.ledger.append_events(tenant.tenant_id, sid, events=events)
    return result.session.last_seq


def merge(
    store: Stores,
    bus: EventBus,
    tenant: TenantKey,
    sid: str,
    *,
    head: int,
    after_seq: int,
    batch: int = 50,
    types: frozenset[str] | None = None,
    deltas: bool = False,
    handoff_delay: float = 0.0,
):
    async def read_after(seq: int) -> list[Event]:
        wanted = sorted(types) if types else None
        return await store.ledger.list_events(
            tenant.tenant_id, sid, after_seq=seq, types=wanted, limit=batch
        )

    return one_by_one(
        replay_then_live(
            lambda: bus.subscribe(tenant.tenant_id, sid, head=head, deltas=deltas),
            read_after,
            after_seq=after_seq,
            types=types,
            batch=batch,
            handoff_delay=handoff_delay,
        )
    )


async def one_by_one(
    batches: AsyncGenerator[Batch | StreamEnd, None],
) -> AsyncGenerator[Delivery | Ephemeral | StreamEnd, None]:
    """The merge's batches, item by item (closing the merge when closed)."""
    try:
        async for batch in batches:
            if isinstance(batch, StreamEnd):
                yield batch
            else:
                for item in batch:
                    yield item
    finally:
        await batches.aclose()


async def writer(store: Stores, tenant: TenantKey, sid: str, stop: asyncio.Event):
    for i in range(20_000):  # bounded; stopped by the test long before
        if stop.is_set():
            return
        await append(store, tenant, sid)
        await asyncio.sleep(0.001 if i % 2 else 0)


async def test_r9_handoff_with_injected_delay_is_exact(
    store: Stores, bus: EventBus, tenant: TenantKey
) -> None:
    sid = await new_session(store, tenant)
    await append(store, tenant, sid, 20)
    stop = asyncio.Event()
    producing = asyncio.create_task(writer(store, tenant, sid, stop))
    rng = random.Random(9)

    async def connect() -> tuple[int, int, list[int]]:
        head = (await store.ledger.get_session(tenant.tenant_id, sid)).last_seq  # type: ignore[union-attr]
        after = rng.randint(max(0, head - 40), head)
        target = head + rng.randint(3, 15)  # must cross the replay/live switch
        got: list[int] = []
        items = merge(store, bus, tenant, sid, head=head, after_seq=after, handoff_delay=0.2)
        async with asyncio.timeout(20):
            async for item in items:
                assert isinstance(item, Delivery), item
                got.append(item.event.seq)
                if item.event.seq >= target:
                    break
        await items.aclose()
        return after, target, got

    try:
        results = []
        for _wave in range(5):  # 5 waves x 20 concurrent connects = 100
            results += await asyncio.gather(*(connect() for _ in range(20)))
    finally:
        stop.set()
        await producing
    for after, target, got in results:
        assert got == list(range(after + 1, target + 1)), (after, target, got)
    assert bus.stats()["subscriptions"] == 0 and bus.stats()["topics"] == 0


async def test_r9_control_replay_before_subscribe_loses_events(
    store: Stores, bus: EventBus, tenant: TenantKey
) -> None:
    """The classic bug, with the same fault delay: read history, pause, then follow events
    from "now". What commits during the pause is never delivered."""
    sid = await new_session(store, tenant)
    stop = asyncio.Event()
    producing = asyncio.create_task(writer(store, tenant, sid, stop))
    try:
        await asyncio.sleep(0.05)
        history = await store.ledger.list_events(tenant.tenant_id, sid)
        await asyncio.sleep(0.2)  # the fault point
        now = (await store.ledger.get_session(tenant.tenant_id, sid)).last_seq  # type: ignore[union-attr]
        with bus.subscribe(tenant.tenant_id, sid, head=now) as sub:
            async with asyncio.timeout(5):
                items = await sub.take()
                while not items:
                    items = await sub.take()
    finally:
        stop.set()
        await producing
    first_live = items[0].event.seq  # type: ignore[union-attr]
    assert first_live > history[-1].seq + 1, "the pause should have opened a gap"


async def test_types_filter_and_deltas(store: Stores, bus: EventBus, tenant: TenantKey) -> None:
    sid = await new_session(store, tenant)
    await append(store, tenant, sid, 3)  # seqs 2..4
    items = merge(
        store,
        bus,
        tenant,
        sid,
        head=4,
        after_seq=0,
        types=frozenset({"MEMORY_ITEMS_APPENDED"}),
        deltas=True,
    )
    got: list[object] = []
    async with asyncio.timeout(5):
        for _ in range(3):
            got.append(await anext(items))
        bus.publish_ephemeral(tenant.tenant_id, sid, {"type": "delta", "text": "hi"})
        await store.ledger.append_events(
            tenant.tenant_id, sid, events=[NewEvent(EventType.METADATA_UPDATED, {"patch": {}})]
        )
        await append(store, tenant, sid)  # seq 6 matches, 5 does not
        got.append(await anext(items))
        got.append(await anext(items))
    await items.aclose()
    seqs = [g.event.seq for g in got if isinstance(g, Delivery)]
    assert seqs == [2, 3, 4, 6]
    frames = [g.frame for g in got if isinstance(g, Ephemeral)]
    assert [(f["type"], f["text"], f["offset"]) for f in frames] == [("delta", "hi", 0)]


async def test_overflow_while_replaying_is_absorbed_then_cuts_off_live(
    store: Stores, tenant: TenantKey
) -> None:
    """A tiny inbox overflows while the consumer is still reading history: the merge
    re-reads the table and loses nothing. Once live, a consumer that stops reading gets a
    final StreamEnd("overflow") naming where to resume."""
    bus = InProcessBus(store.ledger, queue_size=4, poll_seconds=30, read_batch=5)
    await bus.start()
    try:
        sid = await new_session(store, tenant)
        head = await append(store, tenant, sid, 20)
        items = merge(store, bus, tenant, sid, head=head, after_seq=0, batch=5)
        got: list[int] = []
        async with asyncio.timeout(10):
            async for item in items:
                assert isinstance(item, Delivery)
                got.append(item.event.seq)
                if len(got) == 3:  # mid-replay: 12 more events overflow the inbox of 4
                    for _ in range(12):
                        head = await append(store, tenant, sid)
                    await asyncio.sleep(0.1)
                if item.event.seq == head:
                    break
            assert got == list(range(1, head + 1))
            waiting = asyncio.create_task(anext(items))
            await asyncio.sleep(0.1)  # nothing new to read: the merge is live and waits
            head = await append(store, tenant, sid)
            live = await waiting
            assert isinstance(live, Delivery) and live.event.seq == head
            # The consumer does not read. An inbox of 4 refuses a push only when 4 wait, so
            # it may take 3 + one read batch of 5 = 8 events: 12 always overflow it.
            for _ in range(12):
                await append(store, tenant, sid)
            await asyncio.sleep(0.2)
            end = await anext(items)
        assert end == StreamEnd("overflow", str(head))
        with suppress(StopAsyncIteration):
            await anext(items)
    finally:
        await bus.stop()


async def test_closing_ends_the_stream_with_its_resume_point(
    store: Stores, bus: EventBus, tenant: TenantKey
) -> None:
    sid = await new_session(store, tenant)
    watched: list[Subscription] = []

    @contextmanager
    def subscribe() -> Iterator[Subscription]:
        with bus.subscribe(tenant.tenant_id, sid, head=1) as sub:
            watched.append(sub)
            yield sub

    async def read_after(seq: int) -> list[Event]:
        return await store.ledger.list_events(tenant.tenant_id, sid, after_seq=seq, limit=10)

    items = one_by_one(replay_then_live(subscribe, read_after, after_seq=0, types=None, batch=10))
    async with asyncio.timeout(5):
        first = await anext(items)
        assert isinstance(first, Delivery) and first.event.seq == 1
        reader = asyncio.create_task(anext(items))
        await asyncio.sleep(0.05)
        watched[0].close("shutdown")
        assert await reader == StreamEnd("shutdown", "1")
        with suppress(StopAsyncIteration):
            await anext(items)  # the merge returns after its end marker
    assert bus.stats()["subscriptions"] == 0


async def test_known_events_replace_the_replay_read(
    store: Stores, bus: EventBus, tenant: TenantKey
) -> None:
    """A run's stream opened with its start has the start's committed events in hand: they
    are sent as they are, nothing is read from the table, and live events follow."""
    sid = await new_session(store, tenant)
    start = await store.ledger.append_events(
        tenant.tenant_id, sid, events=[item_event("a"), item_event("b")]
    )  # seqs 2..3
    reads: list[int] = []

    async def read_after(seq: int) -> list[Event]:
        reads.append(seq)
        return await store.ledger.list_events(tenant.tenant_id, sid, after_seq=seq)

    items = one_by_one(
        replay_then_live(
            lambda: bus.subscribe(tenant.tenant_id, sid, head=3),
            read_after,
            after_seq=1,
            types=None,
            batch=50,
            known=start.events,
        )
    )
    got: list[int] = []
    async with asyncio.timeout(5):
        for _ in range(2):
            item = await anext(items)
            assert isinstance(item, Delivery)
            got.append(item.event.seq)
        await append(store, tenant, sid)  # seq 4, live
        item = await anext(items)
        assert isinstance(item, Delivery)
        got.append(item.event.seq)
    await items.aclose()
    assert got == [2, 3, 4]
    assert reads == []
