"""NOTIFY discipline (R11) and the bus's own guarantees, on the real store.

On PostgreSQL a raw LISTEN connection counts what the store really sends; on SQLite the
same counts are taken from the in-process listeners, which play NOTIFY's role there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from app.assembly import runtime_over
from app.live.bus import InProcessBus
from app.live.control_wire import decode_control, encode_control
from app.live.delta_wire import DELTA_CHANNEL, DeltaMessage, DeltaNotifier, decode_all
from app.live.listener import make_bus
from app.runtime.ports import RunSignal, Wakeup
from app.runtime.session.events import EventType, NewEvent
from app.runtime.session.subscription import Delivery, Ephemeral, Subscription
from app.settings import Settings
from app.store.announce import CHANNEL, MAX_PAYLOAD_BYTES, decode_wakeup, encode_wakeup
from app.store.stores import Stores
from app.store.tables import session_events
from tests.conftest import TenantKey


def test_r11_payload_is_tiny_and_never_the_event() -> None:
    longest = Wakeup("t" * 32, "s" * 128, 10**18)  # uuid-hex tenant, longest session id
    assert len(encode_wakeup(longest).encode()) <= MAX_PAYLOAD_BYTES <= 200
    assert decode_wakeup(encode_wakeup(longest)) == longest
    # Session ids may hold ':'; the payload still parses.
    odd = Wakeup("abc", "a:b:c", 7)
    assert decode_wakeup(encode_wakeup(odd)) == odd
    # Too long for the budget: the wake-up widens to the whole tenant, it is never cut.
    huge = Wakeup("t" * 64, "s" * 200, 1)
    assert encode_wakeup(huge) == "t" * 64 + ":"
    assert decode_wakeup(encode_wakeup(huge)) == Wakeup("t" * 64)
    assert decode_wakeup("not ours") is None and decode_wakeup("t:s:x") is None


class Notifications:
    """What the store announces: real NOTIFYs on PostgreSQL, local listeners on SQLite."""

    def __init__(self, store: Stores, tenant_id: str) -> None:
        self.store = store
        self.tenant_id = tenant_id
        self.payloads: list[str] = []
        self._conn: asyncpg.Connection | None = None

    async def __aenter__(self) -> Notifications:
        if self.store.dialect == "postgresql":
            url = make_url(self.store.database.engine.url).set(drivername="postgresql")
            self._conn = await asyncpg.connect(url.render_as_string(hide_password=False))
            await self._conn.add_listener(CHANNEL, self._on_notify)
        else:
            self.store.database.announcer.listeners.append(self._on_local)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._conn is not None:
            await self._conn.close()
        else:
            self.store.database.announcer.listeners.remove(self._on_local)

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        if payload.startswith(self.tenant_id + ":"):
            self.payloads.append(payload)

    def _on_local(self, wakeup: Wakeup) -> None:
        if wakeup.tenant_id == self.tenant_id:
            self.payloads.append(encode_wakeup(wakeup))

    async def settle(self) -> list[str]:
        await asyncio.sleep(0.2)  # NOTIFY is asynchronous; give it time to arrive
        out, self.payloads = self.payloads, []
        return out

    async def queue_usage(self) -> float:
        if self._conn is None:
            return 0.0
        return float(await self._conn.fetchval("SELECT pg_notification_queue_usage()"))


def item_event(text: str) -> NewEvent:
    item = {"type": "message", "role": "user", "content": text}
    return NewEvent(EventType.MEMORY_ITEMS_APPENDED, {"items": [item]})


async def count_rows(store: Stores, tenant_id: str, session_id: str) -> int:
    ev = session_events.c
    stmt = select(func.count()).where(ev.tenant_id == tenant_id, ev.session_id == session_id)
    async with store.database.read(tenant_id) as conn:
        return int((await conn.execute(stmt)).scalar_one())


async def test_r11_one_notification_per_transaction_and_none_on_rollback(
    store: Stores, tenant: TenantKey
) -> None:
    runtime = runtime_over(store)
    t = tenant.tenant_id
    async with Notifications(store, t) as notes:
        created = await runtime.create(t, session_id="r11", metadata={}, agent={}, binding={})
        assert await notes.settle() == [f"{t}:r11:{created.session.last_seq}"]

        hundred = [item_event(str(i)) for i in range(100)]
        result = await store.ledger.append_events(t, "r11", events=hundred)
        assert result.session.last_seq == 101
        assert await notes.settle() == [f"{t}:r11:101"]  # 100 events, one wake-up

        # A transaction that fails after inserting its events: rolled back, announces nothing.
        with pytest.raises(ValueError):
            await store.ledger.append_events(
                t,
                "r11",
                events=[item_event("doomed")],
                expected_seq=101,
                snapshot=("save", {"seq": 999}),
            )
        assert await notes.settle() == []
        assert await count_rows(store, t, "r11") == 101

        forked = await runtime.fork(t, "r11", at_seq=50, new_session_id="r11-child")
        assert await notes.settle() == [f"{t}:r11-child:{forked.last_seq}"]
        assert await notes.queue_usage() < 0.01


@contextlib.asynccontextmanager
async def running_bus(
    store: Stores, tenant_id: str, *, queue_size: int = 1000
) -> AsyncIterator[tuple[InProcessBus, str]]:
    """A started bus that polls only when a test asks it to, and a new session to watch."""
    bus = InProcessBus(store.ledger, poll_seconds=30, queue_size=queue_size)
    await bus.start()
    try:
        created = await runtime_over(store).create(
            tenant_id, session_id=None, metadata={}, agent={}, binding={}
        )
        yield bus, created.session.session_id
    finally:
        await bus.stop()


async def test_polling_delivers_when_wakeups_are_lost(store: Stores, tenant: TenantKey) -> None:
    """With the bus deaf to commits (as when NOTIFY is lost), the poll still delivers."""
    bus = InProcessBus(store.ledger, poll_seconds=0.2)
    await bus.start()
    store.database.announcer.listeners.remove(bus.publish_committed)
    try:
        runtime = runtime_over(store)
        created = await runtime.create(
            tenant.tenant_id, session_id=None, metadata={}, agent={}, binding={}
        )
        sid = created.session.session_id
        with bus.subscribe(tenant.tenant_id, sid, head=1) as sub:
            await store.ledger.append_events(tenant.tenant_id, sid, events=[item_event("a")] * 3)
            got: list[int] = []
            async with asyncio.timeout(2):
                while len(got) < 3:
                    got += [i.event.seq for i in await sub.take() if isinstance(i, Delivery)]
        assert got == [2, 3, 4]
        assert bus.counters["polls"] >= 1 and bus.counters["wakeups"] == 0
    finally:
        await bus.stop()


async def test_committed_events_are_handed_on_or_read_but_reach_a_subscriber_once_in_order(
    store: Stores, tenant: TenantKey
) -> None:
    """A write hands its events to the bus (no read back) when they follow the topic's
    cursor; after a gap (a commit the bus never heard of) it reads the
    table instead. Either way the subscriber gets each event once, in order, exactly as the
    table holds it."""
    t = tenant.tenant_id
    async with running_bus(store, t) as (bus, sid):
        got: list[Delivery] = []

        async def take(until: int) -> None:
            async with asyncio.timeout(5):
                while not got or got[-1].event.seq < until:
                    got.extend(i for i in await sub.take() if isinstance(i, Delivery))

        with bus.subscribe(t, sid, head=1) as sub:
            await store.ledger.append_events(t, sid, events=[item_event("a"), item_event("b")])
            await take(3)
            handed = bus.counters["handed_on"]
            assert handed == 1
            store.database.announcer.listeners.remove(
                bus.publish_committed
            )  # deaf: seqs 4 and 5 go unheard
            await store.ledger.append_events(t, sid, events=[item_event("c"), item_event("d")])
            store.database.announcer.listeners.append(bus.publish_committed)
            await store.ledger.append_events(t, sid, events=[item_event("e")])  # 6: after a gap
            await take(6)
        assert bus.counters["handed_on"] == handed  # not past the gap: read from 4
        assert [d.event.seq for d in got] == [2, 3, 4, 5, 6]
        stored = await store.ledger.list_events(t, sid, after_seq=1)
        assert [d.event.to_json() for d in got] == [e.to_json() for e in stored]


async def test_a_read_that_overlaps_a_hand_on_passes_on_only_what_is_new(
    store: Stores,
    tenant: TenantKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A drain's read that began before a commit was handed on returns the handed-on events
    again: the bus passes on none of them twice, and its cursor never moves back."""
    t = tenant.tenant_id
    async with running_bus(store, t) as (bus, sid):
        gate, reading = asyncio.Event(), asyncio.Event()
        real_read = store.ledger.list_events

        async def read_late(*args: object, **kwargs: object) -> object:
            reading.set()
            await gate.wait()  # the read's snapshot is taken after the commit below
            return await real_read(*args, **kwargs)  # type: ignore[arg-type]

        got: list[Delivery] = []
        with bus.subscribe(t, sid, head=1) as sub:
            monkeypatch.setattr(store.ledger, "list_events", read_late)
            bus.catch_up()  # a drain begins: it asks for the rows after the cursor (1)
            await asyncio.wait_for(reading.wait(), 5)
            await store.ledger.append_events(t, sid, events=[item_event("a"), item_event("b")])
            # The writer's events (2, 3) were handed on meanwhile.
            assert bus.counters["handed_on"] == 1
            gate.set()  # the drain's read now returns 2 and 3 as well
            async with asyncio.timeout(5):
                while not got or got[-1].event.seq < 3:
                    got.extend(i for i in await sub.take() if isinstance(i, Delivery))
            for _ in range(3):  # let the drain (and any wake-up after it) finish
                await asyncio.sleep(0.05)
            got.extend(i for i in await sub.take(max_wait=0.05) if isinstance(i, Delivery))
            assert bus._topics[(t, sid)].cursor == 3
        assert [d.event.seq for d in got] == [2, 3]


def _delta(tenant_id: str, sid: str, offset: int, text: str, after: int | None) -> DeltaMessage:
    """A delta message as another replica's model would send it."""
    return DeltaMessage("elsewhere", tenant_id, sid, "r", "r.t1", "delta", offset, 1.0, text, after)


def _arrivals(items: list[object]) -> list[object]:
    return [i.event.seq if isinstance(i, Delivery) else i.frame["text"] for i in items]  # type: ignore[attr-defined]


async def test_a_delta_from_another_replica_waits_for_the_events_it_follows(
    store: Stores, tenant: TenantKey
) -> None:
    """Another replica's text that follows events this bus has not passed on yet (their
    wake-up is late) waits for them: the bus reads them at once, and the subscriber gets
    the turn's start before its text, and the text in order."""
    t = tenant.tenant_id
    async with running_bus(store, t) as (bus, sid):
        with bus.subscribe(t, sid, head=1, deltas=True) as sub:
            # seqs 2 and 3: their wake-up is late
            store.database.announcer.listeners.remove(bus.publish_committed)
            await store.ledger.append_events(t, sid, events=[item_event("a"), item_event("b")])
            store.database.announcer.listeners.append(bus.publish_committed)
            bus.deltas.receive(_delta(t, sid, 0, "Hello", after=3))
            bus.deltas.receive(_delta(t, sid, 5, ",", after=None))  # behind the held one
            got: list[object] = []
            async with asyncio.timeout(5):
                while "," not in got:
                    got += _arrivals(await sub.take())
            assert got == [2, 3, "Hello", ","]
            bus.deltas.receive(_delta(t, sid, 6, " world", after=3))  # passed on: at once
            assert _arrivals(await sub.take(max_wait=0)) == [" world"]
        assert bus.counters["deltas_held"] == 2


async def test_held_text_goes_before_its_turns_response_when_one_read_finds_the_whole_turn(
    store: Stores, tenant: TenantKey
) -> None:
    """Text held for late events, released by a read that finds the turn already ended
    (its MODEL_RESPONSE and what follows): the text still comes before the response."""
    t = tenant.tenant_id
    async with running_bus(store, t) as (bus, sid):
        with bus.subscribe(t, sid, head=1, deltas=True) as sub:
            store.database.announcer.listeners.remove(bus.publish_committed)
            response = NewEvent(
                EventType.MODEL_RESPONSE,
                {"text": "Hello", "tool_calls": [], "usage": {}, "finish_reason": "stop"},
                run_id="r",
                turn_id="r.t1",
            )
            await store.ledger.append_events(
                t, sid, events=[item_event("a"), response, item_event("b")]
            )
            store.database.announcer.listeners.append(bus.publish_committed)
            bus.deltas.receive(_delta(t, sid, 0, "Hello", after=2))
            got: list[object] = []
            async with asyncio.timeout(5):
                while 4 not in got:
                    got += _arrivals(await sub.take())
            assert got == [2, "Hello", 3, 4]


async def test_held_text_is_released_by_a_read_that_fails(
    store: Stores, tenant: TenantKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Text is never held past a read of the table begun after it came, even one that
    failed: late rather than never."""
    t = tenant.tenant_id
    async with running_bus(store, t) as (bus, sid):
        with bus.subscribe(t, sid, head=1, deltas=True) as sub:

            async def broken(*_args: object, **_kwargs: object) -> object:
                raise OSError("the database went away")

            monkeypatch.setattr(store.ledger, "list_events", broken)
            bus.deltas.receive(_delta(t, sid, 0, "Hello", after=2))
            got: list[object] = []
            async with asyncio.timeout(5):
                while not got:
                    got += _arrivals(await sub.take())
        assert got == ["Hello"]


async def test_no_more_text_is_held_than_an_inbox_holds(
    store: Stores, tenant: TenantKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the read that would release it hangs, held text stays bounded: past an inbox's
    size it all goes on, and a subscriber that cannot take it overflows as it would."""
    gate = asyncio.Event()
    t = tenant.tenant_id
    async with running_bus(store, t, queue_size=8) as (bus, sid):
        real_read = store.ledger.list_events

        async def hanging(*args: object, **kwargs: object) -> object:
            await gate.wait()
            return await real_read(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(store.ledger, "list_events", hanging)
        with bus.subscribe(t, sid, head=1, deltas=True) as sub:
            topic = bus._topics[(t, sid)]
            for i in range(8):
                bus.deltas.receive(_delta(t, sid, i, "x", after=2))
            assert len(topic.held) == 8 and not sub.overflowed
            bus.deltas.receive(_delta(t, sid, 8, "x", after=2))
            assert topic.held == [] and sub.overflowed
        assert bus.counters["overflows"] == 1


async def test_subscription_inbox_is_bounded() -> None:
    overflows: list[int] = []
    sub = Subscription(limit=3, on_overflow=lambda: overflows.append(1))
    batch = [Ephemeral({"n": i}) for i in range(5)]
    sub.push(batch)  # a whole batch is accepted into an inbox that is not full...
    assert not sub.overflowed
    sub.push(batch)  # ...but nothing more once `limit` items wait
    assert sub.overflowed and overflows == [1]
    assert await sub.take() == []  # the queue was dropped, not kept
    sub.push(batch)
    assert await sub.take(max_wait=0.01) == []  # ignored until reset
    sub.reset()
    sub.push(batch[:1])
    assert await sub.take() == batch[:1] and not sub.overflowed
    assert await sub.take(max_wait=0.05) == []  # nothing: returns after max_wait


@pytest.fixture
async def started_bus(store: Stores) -> AsyncIterator[InProcessBus]:
    bus = InProcessBus(store.ledger, poll_seconds=30)
    await bus.start()
    yield bus
    await bus.stop()


async def test_topics_and_tenant_subscriptions_are_released(
    started_bus: InProcessBus, tenant: TenantKey
) -> None:
    bus = started_bus
    with bus.subscribe(tenant.tenant_id, "a", head=0), bus.subscribe(tenant.tenant_id, "a", head=0):
        with bus.subscribe_tenant(tenant.tenant_id) as woken:
            bus.publish_committed(Wakeup(tenant.tenant_id, "zzz", 3))
            assert await woken.take(max_wait=1) == []  # a poke, no data
            assert bus.stats()["topics"] == 1 and bus.stats()["subscriptions"] == 2
    stats = bus.stats()
    assert (stats["topics"], stats["subscriptions"], stats["tenant_subscriptions"]) == (0, 0, 0)


# ------------------------------------------------------------------- run control (#16)


def test_control_payloads_round_trip_and_never_exceed_the_budget() -> None:
    payload = encode_control("interrupt", "t" * 32, "run_" + "r" * 32)
    assert payload is not None and len(payload.encode()) <= MAX_PAYLOAD_BYTES
    assert decode_control(payload) == ("interrupt", "t" * 32, "run_" + "r" * 32)
    assert encode_control("interrupt", "t", "r" * 300) is None  # too long: left to the lease
    assert decode_control("interrupt:") is None and decode_control("nothing") is None


async def test_run_control_reaches_every_replica_bus(store: Stores, settings: Settings) -> None:
    """Two buses on one database stand for two replicas: a control message sent on one is
    delivered there at once and, on PostgreSQL, to the other through NOTIFY; on SQLite it
    stays in its process (the lease renewal is the fallback there)."""
    buses = [make_bus(settings, store.ledger), make_bus(settings, store.ledger)]
    got: list[list[RunSignal]] = [[], []]
    for bus, seen in zip(buses, got, strict=True):
        bus.on_control(seen.append)
        await bus.start()
    try:
        if store.dialect == "postgresql":
            for _ in range(200):  # both LISTEN connections up (bounded: 10 s)
                if all(b.stats()["listener"]["connected"] for b in buses):
                    break
                await asyncio.sleep(0.05)
        signal = RunSignal("interrupt", "tenant-x", "run_x")
        await buses[0].send_control(signal)
        assert got[0][:1] == [signal]  # at once, before any NOTIFY comes back
        if store.dialect == "postgresql":
            for _ in range(100):  # bounded: 5 s
                if got[1]:
                    break
                await asyncio.sleep(0.05)
            assert got[1] == [signal]
        else:
            await asyncio.sleep(0.1)
            assert got[1] == []
    finally:
        for bus in buses:
            await bus.stop()


async def test_delta_sends_are_paced_but_the_end_of_a_turn_goes_at_once(store: Stores) -> None:
    """PostgreSQL: messages queued while the interval runs go together in one NOTIFY, in
    order; a flush (a turn's end) sends what waits without waiting out the interval."""
    if store.dialect != "postgresql":
        pytest.skip("token deltas cross replicas by NOTIFY on PostgreSQL only")
    engine = store.database.engine
    url = make_url(engine.url).set(drivername="postgresql")
    conn = await asyncpg.connect(url.render_as_string(hide_password=False))
    heard: list[str] = []
    await conn.add_listener(DELTA_CHANNEL, lambda _c, _p, _ch, payload: heard.append(payload))
    notifier = DeltaNotifier(engine, in_transaction=False, min_interval=30.0)
    messages = [_delta("paced", "s", i, "x", None) for i in range(4)]
    try:
        notifier.send(messages[:1])  # after a quiet spell: at once
        for _ in range(100):  # bounded: 5 s
            if heard:
                break
            await asyncio.sleep(0.05)
        assert [decode_all(p) for p in heard] == [messages[:1]]
        notifier.send(messages[1:])  # inside the interval: they wait, together
        await asyncio.sleep(0.2)
        assert len(heard) == 1
        async with asyncio.timeout(5):  # far less than the interval
            await notifier.flush()
        for _ in range(100):
            if len(heard) == 2:
                break
            await asyncio.sleep(0.05)
        assert [m for p in heard for m in decode_all(p)] == messages and len(heard) == 2
    finally:
        await conn.close()
