"""The event bus: committed events to this process's live subscribers, on every replica.

The table is the only data of record. A wake-up (a local commit, a NOTIFY from another
replica, a poll tick, a listener reconnect) only says "session S may have rows after seq
L"; the bus then reads those rows ONCE per session and fans them out to every local
subscriber of S. A commit of this process whose writer has its events (a stored function's
append on PostgreSQL, a job of SQLite's writer) hands them on instead of the read, when
they start right after the
cursor: a stream-mode run's events then cost no read back (its server CPU per run went from
2.2-2.4x a wait-mode run's to 1.7-2.0x). Each session topic keeps a cursor with one
invariant: every event at or below it was committed before any current subscriber
subscribed, or has been pushed to it.
A stream that subscribes first and then replays the table therefore sees every event, and
drops the overlap by seq (`app.live.timeline.replay_then_live`).

`InProcessBus` (SQLite) is woken by this process's commits (the store's `Announcer` calls
`publish_committed`) and by polling (the only way to hear another process writing the same
file). `PostgresNotifyBus` (`listener.py`) adds one dedicated LISTEN connection per process
for the NOTIFYs of every replica (`app.store.announce`).

Run control rides the same connection on a channel of its own (`asr_control`): a cancel
taken by any replica reaches the one that executes the run (`send_control`/`on_control`,
the runtime's `RunControl`). On SQLite it stays in the process.

Token deltas are not in the table: `delta_relay.py` carries them, and keeps the
turn in progress for a subscriber that arrives mid-turn; on PostgreSQL its messages travel
as NOTIFYs on a channel of their own, heard by the same LISTEN connection. Text that follows
events this bus has not passed on yet waits for them in the session's topic
(`_deliver_ephemeral`), so every replica shows a turn's start before its text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from app.live.control_wire import CONTROL_CHANNEL, encode_control
from app.live.delta_relay import DeltaRelay
from app.live.delta_wire import DeltaNotifier
from app.live.timeline import interleave
from app.runtime.ports import RunSignal, Wakeup
from app.runtime.session.events import Event
from app.runtime.session.subscription import Delivery, Ephemeral, Subscription
from app.store.ledger import LedgerStore
from app.store.tables import sessions

log = logging.getLogger("app.live.bus")

_DRAIN_CONCURRENCY = 8
_HEADS_CHUNK = 500
_CONTROL_SEND_SECONDS = 2.0


@dataclass(slots=True)
class _Held:
    """Delta frames that follow events this topic has not passed on yet (`after_seq`), for
    the subscribers that were there when they came (a later one had them in its catch-up)."""

    after_seq: int
    items: list[Ephemeral]
    subscribers: list[Subscription]
    reads: int  # the topic's reads begun before these frames came


@dataclass(eq=False)
class _Topic:
    cursor: int
    subscribers: set[Subscription] = field(default_factory=set)
    held: list[_Held] = field(default_factory=list)
    reads: int = 0  # reads of the table begun for this topic
    ready: asyncio.Future[None] | None = None  # the other replicas told of it


class EventBus:
    """Fan-out core shared by both buses; implements the runtime's `LiveBus` (its live
    path, `LiveDelivery`: subscribe, publish committed, publish ephemeral)."""

    def __init__(
        self,
        store: LedgerStore,
        *,
        queue_size: int = 1000,
        poll_seconds: float = 2.0,
        read_batch: int = 500,
        delta_notifier: DeltaNotifier | None = None,
    ) -> None:
        self._store = store
        self.deltas = DeltaRelay(self._deliver_ephemeral, notifier=delta_notifier)
        self._queue_size = queue_size
        self._poll_seconds = poll_seconds
        self._batch = read_batch
        self._topics: dict[tuple[str, str], _Topic] = {}
        self._tenants: dict[str, set[Subscription]] = {}
        self._dirty: dict[tuple[str, str], int | None] = {}
        self._dirty_event = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._control_handlers: list[Callable[[RunSignal], None]] = []
        self.counters = {
            "wakeups": 0,
            "handed_on": 0,
            "drains": 0,
            "polls": 0,
            "catch_ups": 0,
            "overflows": 0,
            "deltas_held": 0,
        }
        self.control_counters = {"sent": 0, "received": 0, "send_failures": 0}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._store.db.announcer.listeners.append(self.publish_committed)
        self._tasks.append(asyncio.create_task(self._pump(), name="asr-bus-pump"))
        self._tasks.append(asyncio.create_task(self._poll_forever(), name="asr-bus-poll"))

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self._store.db.announcer.listeners.remove(self.publish_committed)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for topic in self._topics.values():
            for sub in topic.subscribers:
                sub.close("shutdown")
        for subs in self._tenants.values():
            for sub in subs:
                sub.close("shutdown")

    # --------------------------------------------------------------- subscribing

    @contextmanager
    def subscribe(
        self, tenant_id: str, session_id: str, *, head: int, deltas: bool = False
    ) -> Iterator[Subscription]:
        """Subscribe to a session. `head` must be a last_seq read before this call: the
        events up to it are committed, so a new topic may start its cursor there."""
        key = (tenant_id, session_id)
        topic = self._topics.get(key)
        if topic is None:
            topic = self._topics[key] = _Topic(cursor=head)
            topic.ready = self._listening(tenant_id, session_id)
        sub = Subscription(limit=self._queue_size, deltas=deltas, on_overflow=self._overflowed)
        sub.ready = topic.ready
        if deltas:  # the turn in progress first, then (no await between) its live frames
            sub.push([Ephemeral(frame) for frame in self.deltas.catch_up(tenant_id, session_id)])
        topic.subscribers.add(sub)
        try:
            yield sub
        finally:
            topic.subscribers.discard(sub)
            if not topic.subscribers and self._topics.get(key) is topic:
                del self._topics[key]

    @contextmanager
    def subscribe_tenant(self, tenant_id: str) -> Iterator[Subscription]:
        """Wake-ups for every session of the tenant; the reader fetches rows itself."""
        sub = Subscription(limit=1)
        if tenant_id not in self._tenants:
            sub.ready = self._listening(tenant_id, None)
        self._tenants.setdefault(tenant_id, set()).add(sub)
        try:
            yield sub
        finally:
            subs = self._tenants.get(tenant_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._tenants[tenant_id]

    def _listening(self, tenant_id: str, session_id: str | None) -> asyncio.Future[None] | None:
        """A session (None: every session of the tenant) got its first subscriber here:
        the bus of several replicas tells the others (`app.live.interest`), and returns
        what is done once they have been told (streams read the table only after it)."""
        return None

    def listened(self) -> list[tuple[str, str | None]]:
        """The sessions (None: every session of a tenant) this process has subscribers of."""
        return [*self._topics, *((tenant_id, None) for tenant_id in self._tenants)]

    def publish_ephemeral(
        self,
        tenant_id: str,
        session_id: str,
        frame: dict[str, Any],
        *,
        after_seq: int | None = None,
    ) -> None:
        """A delta of this process's model: to the session's subscribers on every replica,
        after the events up to `after_seq`."""
        self.deltas.publish(tenant_id, session_id, frame, after_seq=after_seq)

    async def end_turn(
        self, tenant_id: str, session_id: str, *, run_id: str | None, turn_id: str | None
    ) -> None:
        """The turn's text is final (its model call returned): see `DeltaRelay.end_turn`."""
        await self.deltas.end_turn(tenant_id, session_id, run_id=run_id, turn_id=turn_id)

    def _deliver_ephemeral(
        self,
        tenant_id: str,
        session_id: str,
        frames: list[dict[str, Any]],
        after_seq: int | None,
    ) -> None:
        """Delta frames to this process's subscribers of the session that want them, after
        the events up to `after_seq`.

        On another replica than the owner, a turn's first text usually arrives before the
        turn's opening events do (their wake-up is coalesced, then read): the frames wait
        in the topic, the topic is read at once, and they follow the events it passes on.
        Frames held once keep every later one of the session behind them (their order).
        No more are held than a subscription's inbox holds: past that (a read that hangs),
        all of them go on, and a subscriber that cannot take them overflows as it would.
        """
        key = (tenant_id, session_id)
        topic = self._topics.get(key)
        if topic is None:
            return
        items = [Ephemeral(frame) for frame in frames]
        subscribers = [sub for sub in topic.subscribers if sub.deltas]
        if not subscribers:
            return
        if topic.held or (after_seq is not None and after_seq > topic.cursor):
            wait = max(after_seq or 0, topic.held[-1].after_seq if topic.held else 0)
            topic.held.append(_Held(wait, items, subscribers, topic.reads))
            self.counters["deltas_held"] += 1
            if len(topic.held) > self._queue_size:
                self._release(topic, before_read=topic.reads + 1)  # every held frame
            self._mark(key, wait)
            return
        for sub in subscribers:
            sub.push(items)

    # --------------------------------------------------------------- run control

    def on_control(self, handler: Callable[[RunSignal], None]) -> None:
        """Call `handler` for every control message, from this replica or another."""
        self._control_handlers.append(handler)

    async def send_control(self, signal: RunSignal) -> None:
        """Deliver a control message here at once, and to every other replica (NOTIFY on
        PostgreSQL). A failed send is logged, not raised: the owner's lease renewal finds
        the fence one heartbeat later."""
        self.control_counters["sent"] += 1
        self._deliver_control(signal)
        notifier = self._store.db.announcer.notifier
        payload = encode_control(signal.kind, signal.tenant_id, signal.run_id)
        if notifier is None or payload is None:
            return
        try:
            # Bounded: a cancel must not hang on a stalled database; the fallback remains.
            async with asyncio.timeout(_CONTROL_SEND_SECONDS):
                await notifier.send(CONTROL_CHANNEL, [payload])
        except Exception:
            self.control_counters["send_failures"] += 1
            log.warning("sending %s of run %s failed", signal.kind, signal.run_id, exc_info=True)

    def _deliver_control(self, signal: RunSignal) -> None:
        self.control_counters["received"] += 1
        for handler in list(self._control_handlers):
            try:
                handler(signal)
            except Exception:  # one handler's failure must not keep the others from it
                log.exception("control handler failed")

    # ------------------------------------------------------------------ wake-ups

    def publish_committed(self, wakeup: Wakeup) -> None:
        """A session (or, without session_id, any session of a tenant) has new rows: from
        this process's commits (with their events when the writer has them) or a NOTIFY."""
        self.counters["wakeups"] += 1
        for sub in self._tenants.get(wakeup.tenant_id, ()):
            sub.poke()
        if wakeup.session_id is None:
            for key in [k for k in self._topics if k[0] == wakeup.tenant_id]:
                self._mark(key, None)
        elif (topic := self._topics.get((wakeup.tenant_id, wakeup.session_id))) is not None:
            if wakeup.events and wakeup.events[0].seq == topic.cursor + 1:
                # This process committed exactly the rows after the cursor: hand them on
                # as they are, instead of reading them back (what a stream-mode run pays).
                self.counters["handed_on"] += 1
                self._push(topic, wakeup.events)
            else:
                self._mark((wakeup.tenant_id, wakeup.session_id), wakeup.last_seq)

    def catch_up(self) -> None:
        """Re-read every subscribed session from its cursor (wake-ups may have been lost)."""
        self.counters["catch_ups"] += 1
        for key in list(self._topics):
            self._mark(key, None)
        for subs in self._tenants.values():
            for sub in subs:
                sub.poke()

    def _overflowed(self) -> None:
        self.counters["overflows"] += 1

    def _mark(self, key: tuple[str, str], hint: int | None) -> None:
        if key in self._dirty:
            old = self._dirty[key]
            hint = None if old is None or hint is None else max(old, hint)
        self._dirty[key] = hint
        self._dirty_event.set()

    async def _pump(self) -> None:
        """Drain the sessions marked dirty, a few at a time; one task per process."""
        while True:
            await self._dirty_event.wait()
            self._dirty_event.clear()
            dirty, self._dirty = self._dirty, {}
            jobs = []
            for key, hint in dirty.items():
                topic = self._topics.get(key)
                if topic is not None and (hint is None or hint > topic.cursor):
                    jobs.append((key, topic))
            for i in range(0, len(jobs), _DRAIN_CONCURRENCY):
                chunk = jobs[i : i + _DRAIN_CONCURRENCY]
                await asyncio.gather(*(self._drain(key, topic) for key, topic in chunk))

    async def _drain(self, key: tuple[str, str], topic: _Topic) -> None:
        """Read the topic's new rows once and push them to each of its subscribers."""
        self.counters["drains"] += 1
        topic.reads += 1
        started = topic.reads
        try:
            while True:
                events = await self._store.list_events(
                    key[0], key[1], after_seq=topic.cursor, limit=self._batch
                )
                if not events:
                    break
                self._push(topic, events)
                if len(events) < self._batch:
                    break
        except Exception:  # the cursor did not move: the next wake-up or poll reads again
            log.warning("reading new events of %s failed", key[1], exc_info=True)
        # Text held before this read began is not kept past it (a read that found all that
        # was committed when the text came, or one that failed): late rather than never.
        self._release(topic, before_read=started)

    @staticmethod
    def _push(topic: _Topic, events: Sequence[Event]) -> None:
        """Events after the topic's cursor to each subscriber, the cursor moved past them.
        Those at or below the cursor were pushed already: a read that began before a
        commit was handed on may return them again.

        Delta frames held for these events go with them, each just before its turn's
        MODEL_RESPONSE when this batch holds it (`interleave`): a read that found a whole
        turn committed must still show its text before the response that makes it final.
        """
        fresh = [e for e in events if e.seq > topic.cursor]
        if not fresh:
            return
        topic.cursor = fresh[-1].seq
        due: list[_Held] = []
        while topic.held and topic.held[0].after_seq <= topic.cursor:
            due.append(topic.held.pop(0))
        if not due:
            items: list[Delivery | Ephemeral] = [Delivery(e) for e in fresh]
            for sub in list(topic.subscribers):
                sub.push(items)
            return
        for sub in list(topic.subscribers):
            frames = [item for held in due if sub in held.subscribers for item in held.items]
            sub.push(interleave(fresh, frames))

    @staticmethod
    def _release(topic: _Topic, *, before_read: int = 0) -> None:
        """Held delta frames whose events were passed on (and those held before read number
        `before_read` began), in order, to those of their subscribers still there."""
        while topic.held and (
            topic.held[0].after_seq <= topic.cursor or topic.held[0].reads < before_read
        ):
            held = topic.held.pop(0)
            for sub in held.subscribers:
                if sub in topic.subscribers:
                    sub.push(held.items)

    # ------------------------------------------------------------------- polling

    async def _poll_forever(self) -> None:
        """The fallback that completes delivery when wake-ups are lost or unavailable."""
        while True:
            await asyncio.sleep(self._poll_seconds)
            try:
                await self.poll_once()
            except Exception:
                log.warning("polling for new events failed", exc_info=True)

    async def poll_once(self) -> None:
        self.counters["polls"] += 1
        for subs in self._tenants.values():
            for sub in subs:
                sub.poke()
        by_tenant: dict[str, list[str]] = {}
        for tenant_id, session_id in self._topics:
            by_tenant.setdefault(tenant_id, []).append(session_id)
        for tenant_id, session_ids in by_tenant.items():
            for i in range(0, len(session_ids), _HEADS_CHUNK):
                chunk = session_ids[i : i + _HEADS_CHUNK]
                for session_id, last_seq in await self._heads(tenant_id, chunk):
                    topic = self._topics.get((tenant_id, session_id))
                    if topic is not None and last_seq > topic.cursor:
                        self._mark((tenant_id, session_id), last_seq)

    async def _heads(self, tenant_id: str, session_ids: list[str]) -> list[tuple[str, int]]:
        stmt = select(sessions.c.session_id, sessions.c.last_seq).where(
            sessions.c.tenant_id == tenant_id, sessions.c.session_id.in_(session_ids)
        )
        async with self._store.db.read(tenant_id) as conn:
            return [(r.session_id, r.last_seq) for r in await conn.execute(stmt)]

    # --------------------------------------------------------------------- gauges

    def stats(self) -> dict[str, Any]:
        return {
            "topics": len(self._topics),
            "subscriptions": sum(len(t.subscribers) for t in self._topics.values()),
            "tenant_subscriptions": sum(len(s) for s in self._tenants.values()),
            **self.counters,
            "control": dict(self.control_counters),
            **self.deltas.stats(),
        }


class InProcessBus(EventBus):
    """SQLite: woken by this process's commits; polling hears other processes."""
