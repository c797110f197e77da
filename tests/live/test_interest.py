"""Wake-ups and deltas go to other replicas only while one of them listens
(`app.live.interest`), and nothing is lost for it: what was kept back is sent when a
replica starts listening. On PostgreSQL with real LISTEN connections and buses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from app.assembly import runtime_over
from app.live.delta_relay import DeltaRelay
from app.live.delta_wire import DELTA_CHANNEL, END, DeltaMessage, decode_all, encode
from app.live.interest import (
    ALL,
    ASK,
    FRESH,
    INTEREST_CHANNEL,
    OPEN_SECONDS,
    RENEWAL,
    RemoteInterest,
    decode_interest,
    encode_interest,
)
from app.live.listener import PostgresNotifyBus, make_bus
from app.runtime.session.events import EventType, NewEvent
from app.runtime.session.subscription import Ephemeral
from app.settings import Settings
from app.store.announce import CHANNEL, PACK_BYTES
from app.store.stores import Stores
from tests.conftest import TenantKey

RENEW = 0.5  # seconds: the buses here renew (and open after connecting) this fast


def test_interest_payloads_round_trip_under_the_notify_limit() -> None:
    keys = [(f"tenant-{i % 3}", f"session-{i:05d}-" + "x" * 30) for i in range(400)]
    payloads = encode_interest("me", keys, fresh=FRESH)
    assert len(payloads) > 1 and all(len(p.encode()) < PACK_BYTES for p in payloads)
    decoded = [m for p in payloads for m in decode_interest(p)]
    assert all(origin == "me" and fresh == FRESH for origin, fresh, _ in decoded)
    assert [k for _, _, ks in decoded for k in ks] == keys
    assert decode_interest("nonsense") == [] and decode_interest("[9,1]") == []
    assert encode_interest("me", [("t", "s" * 9000)], fresh=RENEWAL) == []  # never truncated
    assert encode_interest("me", [], fresh=RENEWAL) == []
    assert decode_interest(encode_interest("me", [], fresh=ASK)[0]) == [("me", ASK, [])]


def test_remote_interest_wants_what_others_listen_to_until_it_expires() -> None:
    interest = RemoteInterest("me", renew_seconds=RENEW)
    assert interest.wants("t", "s")  # before the listener ever connected: everything
    interest.open()
    assert interest.wants("t", "s")  # messages may have been missed: everything for now
    time.sleep(OPEN_SECONDS + 0.1)
    assert not interest.wants("t", "s")

    def heard(origin: str, keys: list[tuple[str, str]], fresh: int) -> tuple[list[Any], bool]:
        return interest.heard(encode_interest(origin, keys, fresh=fresh)[0])

    assert heard("me", [("t", "s")], FRESH) == ([], False)  # its own: ignored
    assert not interest.wants("t", "s")
    # Fresh keys are owed what was kept back of them, and so are keys new to this replica.
    assert heard("other", [("t", "s")], FRESH) == ([("t", "s")], False)
    assert heard("other", [("t", "s")], RENEWAL) == ([], False)
    assert heard("other", [("t", ALL)], RENEWAL) == ([("t", ALL)], False)
    assert interest.wants("t", "s") and interest.wants("t", "any") and not interest.wants("u", "s")
    assert heard("third", [(ALL, ALL)], ASK) == ([(ALL, ALL)], True)  # it asks for ours
    assert interest.wants("u", "s")
    time.sleep(RENEW * 3.2)  # three renewals missed: forgotten
    assert not interest.wants("t", "s") and not interest.wants("u", "s")
    interest.deaf()  # the listener is down: nothing can be heard, so everything is wanted
    assert interest.wants("t", "s")
    interest.open()
    assert interest.wants("t", "s")
    interest.sweep()
    assert interest.stats()["interest_remote"] == 0


class Sink:
    """A DeltaNotifier that keeps what it would send."""

    def __init__(self) -> None:
        self.sent: list[DeltaMessage] = []

    def send(self, messages: list[DeltaMessage]) -> None:
        self.send_encoded([encode(m) for m in messages])

    def send_encoded(self, payloads: list[str]) -> None:
        self.sent += [m for p in payloads for m in decode_all(p)]

    async def flush(self) -> None:
        return None


async def test_a_turn_nobody_else_hears_sends_nothing_until_someone_listens() -> None:
    """The owner's relay: text kept back while no replica listens, then all of it at
    offset 0 when one starts to (a replica with part of it keeps only what is new), and
    the END of a turn whose text went out even if nobody listens any more."""
    sink = Sink()
    listening = {"on": False}
    owner = DeltaRelay(lambda *_: None, notifier=sink)  # type: ignore[arg-type]
    owner.wanted = lambda _t, _s: listening["on"]
    remote_frames: list[dict[str, Any]] = []
    remote = DeltaRelay(lambda _t, _s, frames, _a: remote_frames.extend(frames))

    def chunk(text: str) -> dict[str, Any]:
        return {"type": "delta", "text": text, "run_id": "r", "turn_id": "r.t1"}

    owner.publish("t", "s", chunk("hello "))
    owner.publish("t", "s", chunk("big "))
    owner.catch_up_remote("t", "other")  # no turn there: nothing
    assert sink.sent == []
    listening["on"] = True
    owner.catch_up_remote("t", "s")
    owner.publish("t", "s", chunk("world"))
    assert [(m.offset, m.text) for m in sink.sent] == [(0, "hello big "), (10, "world")]
    listening["on"] = False
    owner.publish("t", "s", chunk("!"))  # nobody listens now: kept back
    await owner.end_turn("t", "s", run_id="r", turn_id="r.t1")
    assert [m.kind for m in sink.sent] == ["delta", "delta", END]
    for message in sink.sent:
        remote.receive(message)
    assert "".join(f["text"] for f in remote_frames) == "hello big world"
    assert remote.catch_up("t", "s") == []  # the END dropped the turn there

    # A replica that already has a prefix of the text takes only the rest of a catch-up.
    sink.sent.clear()
    remote_frames.clear()
    listening["on"] = True
    owner.publish("t", "s2", chunk("abc"))
    remote.receive(sink.sent[-1])
    owner.publish("t", "s2", chunk("def"))  # lost to the remote, say
    owner.catch_up_remote("t", "s2")
    remote.receive(sink.sent[-1])
    assert [(f["offset"], f["text"]) for f in remote_frames] == [(0, "abc"), (3, "def")]


@asynccontextmanager
async def pg_listener(store: Stores, *channels: str) -> AsyncIterator[list[tuple[str, str]]]:
    url = make_url(store.database.engine.url).set(drivername="postgresql")
    conn = await asyncpg.connect(url.render_as_string(hide_password=False))
    heard: list[tuple[str, str]] = []
    for channel in channels:
        await conn.add_listener(channel, lambda _c, _p, ch, payload: heard.append((ch, payload)))
    try:
        yield heard
    finally:
        await conn.close()


async def started_bus(store: Stores, settings: Settings, renew: float = RENEW) -> PostgresNotifyBus:
    bus = make_bus(settings.model_copy(update={"sse_interest_renew_seconds": renew}), store.ledger)
    assert isinstance(bus, PostgresNotifyBus)
    await bus.start()
    for _ in range(200):  # bounded: 10 s
        if bus.listener["connected"]:
            return bus
        await asyncio.sleep(0.05)
    await bus.stop()
    raise AssertionError("the bus's LISTEN connection did not come up")


async def until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.05)):  # bounded
        if check():
            return
        await asyncio.sleep(0.05)


async def test_wakeups_go_out_while_another_replica_listens_and_the_kept_back_one_then(
    store: Stores, settings: Settings, tenant: TenantKey
) -> None:
    if store.dialect != "postgresql":
        pytest.skip("wake-ups cross replicas by NOTIFY on PostgreSQL only")
    t = tenant.tenant_id
    runtime = runtime_over(store)
    sid = (await runtime.create(t, session_id=None, metadata={}, agent={}, binding={})).session
    bus = await started_bus(store, settings)
    try:
        async with pg_listener(store, CHANNEL) as heard:
            await asyncio.sleep(OPEN_SECONDS + 0.1)  # past the bus's open spell after connecting
            heard.clear()
            session = sid.session_id
            first = await store.ledger.append_events(t, session, events=[_item("a")])
            await asyncio.sleep(0.3)
            assert heard == []  # nobody else listens to it: no NOTIFY
            # Another replica starts listening: the kept-back wake-up goes at once.
            notify = encode_interest("other", [(t, session)], fresh=FRESH)[0]
            await _notify(store, INTEREST_CHANNEL, notify)
            await until(lambda: bool(heard))
            assert heard == [(CHANNEL, f"{t}:{session}:{first.session.last_seq}")]
            second = await store.ledger.append_events(t, session, events=[_item("b")])
            await until(lambda: len(heard) == 2)
            assert heard[1] == (CHANNEL, f"{t}:{session}:{second.session.last_seq}")
            # Not renewed: forgotten after three renewals, and wake-ups stop again.
            await asyncio.sleep(RENEW * 3.3)
            heard.clear()
            await store.ledger.append_events(t, session, events=[_item("c")])
            await asyncio.sleep(0.3)
            assert heard == []
            assert store.database.announcer.notifier is not None
            assert store.database.announcer.notifier.counters["suppressed"] >= 2
    finally:
        await bus.stop()


async def test_a_replica_that_subscribes_mid_turn_gets_the_whole_text_and_the_rest(
    store: Stores, settings: Settings
) -> None:
    """Two buses for two replicas: the owner sends nothing of a turn nobody else hears;
    when the other subscribes, it announces it, and the owner sends the text so far, then
    the rest as it comes."""
    if store.dialect != "postgresql":
        pytest.skip("token deltas cross replicas by NOTIFY on PostgreSQL only")
    owner = await started_bus(store, settings)
    other = await started_bus(store, settings)
    try:
        async with pg_listener(store, DELTA_CHANNEL, INTEREST_CHANNEL) as heard:
            await asyncio.sleep(OPEN_SECONDS + 0.1)
            heard.clear()

            def chunk(text: str) -> dict[str, Any]:
                return {"type": "delta", "text": text, "run_id": "r", "turn_id": "r.t1"}

            owner.publish_ephemeral("t-int", "s-int", chunk("hello "))
            await asyncio.sleep(0.3)
            assert [ch for ch, _ in heard] == []  # no subscriber anywhere else
            with other.subscribe("t-int", "s-int", head=0, deltas=True) as sub:
                await until(lambda: any(ch == DELTA_CHANNEL for ch, _ in heard))
                owner.publish_ephemeral("t-int", "s-int", chunk("world"))
                await owner.end_turn("t-int", "s-int", run_id="r", turn_id="r.t1")
                frames: list[dict[str, Any]] = []
                for _ in range(100):  # bounded: 5 s
                    frames += [i.frame for i in sub.take_ephemeral() if isinstance(i, Ephemeral)]
                    if "".join(f["text"] for f in frames) == "hello world":
                        break
                    await asyncio.sleep(0.05)
                assert [(f["offset"], f["text"]) for f in frames] == [(0, "hello "), (6, "world")]
            assert next(ch for ch, _ in heard) == INTEREST_CHANNEL  # it said so first
    finally:
        await other.stop()
        await owner.stop()


async def test_a_session_announced_less_than_a_renewal_ago_is_not_announced_again(
    store: Stores, settings: Settings
) -> None:
    """A conversation's next run opens its stream on a session this replica announced a
    moment ago: the others still hold it, so no NOTIFY, and the stream does not wait. A
    replica that asks (it may have missed the announcement) makes the next one go."""
    if store.dialect != "postgresql":
        pytest.skip("interest crosses replicas by NOTIFY on PostgreSQL only")
    renew = 3.0  # long enough for a busy machine to open three topics inside one
    bus = await started_bus(store, settings, renew=renew)
    key = ("t-told", "s-told")
    try:
        async with pg_listener(store, INTEREST_CHANNEL) as heard:

            def fresh() -> list[list[tuple[str, str]]]:
                return [
                    keys
                    for _, payload in heard
                    for origin, kind, keys in decode_interest(payload)
                    if kind == FRESH and origin == bus.deltas.origin
                ]

            with bus.subscribe(*key, head=0) as sub:
                assert sub.ready is not None
                await sub.announced()
            await until(lambda: len(fresh()) == 1)
            with bus.subscribe(*key, head=0) as sub:  # the next run, a moment later
                assert sub.ready is None
            assert bus.interest is not None
            await _notify(store, INTEREST_CHANNEL, encode_interest("other", [], fresh=ASK)[0])
            await until(
                lambda: bus.interest is not None and bus.interest.counters["interest_heard"] > 0
            )
            with bus.subscribe(*key, head=0) as sub:
                assert sub.ready is not None
                await sub.announced()
            await until(lambda: len(fresh()) == 2)
            assert fresh() == [[key], [key]]
    finally:
        await bus.stop()


def _item(text: str) -> NewEvent:
    item = {"type": "message", "role": "user", "content": text}
    return NewEvent(EventType.MEMORY_ITEMS_APPENDED, {"items": [item]})


async def _notify(store: Stores, channel: str, payload: str) -> None:
    url = make_url(store.database.engine.url).set(drivername="postgresql")
    conn = await asyncpg.connect(url.render_as_string(hide_password=False))
    try:
        await conn.execute("SELECT pg_notify($1, $2)", channel, payload)
    finally:
        await conn.close()
