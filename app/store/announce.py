"""Commits announced to live readers: what a write transaction announces, and how.

The store owns this half of the live path because it runs in the store's transaction
machinery (a transaction's touched sessions, the NOTIFY after its commit); the other half,
the bus that listens and fans out, is `app.live`, which registers itself as a listener.

A transaction that inserts events records the sessions it touched on its connection (the
stored-function writes report theirs directly). After the commit, in-process listeners
(this replica's bus) are called at once, which is all SQLite has; on PostgreSQL the
wake-ups are also handed to the `Notifier`, which sends them to every replica as NOTIFYs.

The NOTIFY goes out after the commit, from its own short transaction, not from inside the
writing one: a transaction with a pending NOTIFY takes PostgreSQL's global notify lock at
commit and holds it through its WAL flush, which made concurrent appends commit one at a
time (about 0.35x of the raw insert loop at 16 writers, against 0.7-0.85x without). Only
committed writes are announced. A session's wake-up goes out only while another replica
listens to it, as the live path tells the Notifier (its gates, `app.live.interest`); one
kept back goes when a replica starts to (`resend`). The Notifier coalesces: while one send
is in flight, new wake-ups wait and go out together in the next, one per session with the
highest seq, and sends are at least `min_interval` apart: a wake-up after a quiet spell
goes at once, one under load waits at most that long. Each NOTIFY is a transaction of its
own on the database, and one per commit cost about as much database CPU as the append it
announced (16 writers: 0.58x of the raw insert loop; one NOTIFY per 5 ms at most:
0.6-0.75x). If the process dies between a commit and its NOTIFY, other replicas see those
events at their next poll (the bus polls as a fallback); this replica's own listeners were
already called.

The payload is `<tenant_id>:<session_id>:<last_seq>`: a wake-up, never the event. Readers
fetch the rows from the table. A payload that would exceed `MAX_PAYLOAD_BYTES` (only with
very long ids) is sent as `<tenant_id>:` — "something changed in this tenant" — so nothing is
ever truncated into a wrong session id.

The same sender carries the live path's other NOTIFYs (`Notifier.send`, `notify_all`): run
control (`app.live.control_wire`), token deltas (`app.live.delta_wire`) and what replicas
listen to (`app.live.interest`) have channels of their own, but one way of sending; the
last two queue through a `PacedChannel` (in order, packed, paced as the wake-ups are).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.runtime.ports import Wakeup
from app.runtime.session.events import Event
from app.store.postgres.calls import call

log = logging.getLogger("app.store.announce")

CHANNEL = "asr_events"
MAX_PAYLOAD_BYTES = 200  # PostgreSQL allows 8000; a wake-up needs far less
PACK_BYTES = 7900  # a pack of payloads stays under PostgreSQL's limit of 8000
# Sessions whose wake-ups were kept back (no other replica listened to them) that are
# remembered, the least recently written first to go: a replica that starts listening to
# one of them is sent its wake-up then. One forgotten costs that listener a poll's delay.
SUPPRESSED_CAPACITY = 10_000
# The least time between two sends of wake-ups (ASR_SSE_NOTIFY_INTERVAL_MS), in seconds.
NOTIFY_INTERVAL = 0.005
_TOUCHED = "asr_touched_sessions"
_ASCII_JSON = json.JSONEncoder(separators=(",", ":"))  # ensure_ascii
# One statement for a batch; the transaction is a notification only, so it commits without
# waiting for a WAL flush (synchronous_commit off for it alone): durability is the events'.
_NOTIFY = (
    "SELECT set_config('synchronous_commit', 'off', true), count(pg_notify($1, p))"
    " FROM unnest($2::text[]) AS p"
)


def encode_wakeup(wakeup: Wakeup) -> str:
    payload = f"{wakeup.tenant_id}:{wakeup.session_id}:{wakeup.last_seq}"
    if wakeup.session_id is None or len(payload.encode()) > MAX_PAYLOAD_BYTES:
        return f"{wakeup.tenant_id}:"
    return payload


def decode_wakeup(payload: str) -> Wakeup | None:
    """The wake-up in a payload, or None for a payload that is not ours."""
    tenant_id, sep, rest = payload.partition(":")
    if not tenant_id or not sep:
        return None
    if not rest:
        return Wakeup(tenant_id)
    session_id, sep, seq = rest.rpartition(":")
    if not session_id or not sep or not seq.isdigit():
        return None
    return Wakeup(tenant_id, session_id, int(seq))


async def notify_all(
    engine: AsyncEngine, channel: str, payloads: list[str], *, in_transaction: bool
) -> None:
    """One NOTIFY per payload on `channel`, in order, in one short transaction of its own."""
    await call(engine, _NOTIFY, (channel, payloads), in_transaction=in_transaction)


class Pace:
    """Sends at least `min_interval` apart: the first after a quiet spell at once, later
    ones when the interval since the last began has run out, or at once when hurried (a
    caller waits for what is queued). The NOTIFY senders' one timing rule."""

    def __init__(self, min_interval: float) -> None:
        self.min_interval = min_interval
        self._last = -float("inf")  # loop time of the last send's start
        self._hurry = asyncio.Event()

    async def turn(self) -> None:
        """Wait until the next send may start, and count it as started."""
        loop = asyncio.get_running_loop()
        wait = self._last + self.min_interval - loop.time()
        if wait > 0 and not self._hurry.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._hurry.wait()
        self._hurry.clear()
        self._last = loop.time()

    def hurry(self) -> None:
        """Let the send waiting for its turn (or the next one) go at once."""
        self._hurry.set()


def ascii_json(value: Any) -> str:
    """JSON text in ASCII (valid in any server encoding, its size in bytes known before it
    is sent): orjson's when that is ASCII already (the common case, many times faster),
    else `json`'s escaped."""
    text = orjson.dumps(value).decode()
    return text if text.isascii() else _ASCII_JSON.encode(value)


def pack(payloads: list[str], limit: int = PACK_BYTES) -> list[str]:
    """JSON-array payloads joined in order into as few NOTIFY payloads as fit `limit` (a
    pack is a JSON array of them; one alone is sent as it is)."""
    packed: list[str] = []
    group: list[str] = []
    size = 1
    for payload in payloads:
        if group and size + len(payload) + 1 > limit:
            packed.append(_joined(group))
            group, size = [], 1
        group.append(payload)
        size += len(payload) + 1
    if group:
        packed.append(_joined(group))
    return packed


def _joined(group: list[str]) -> str:
    return group[0] if len(group) == 1 else "[" + ",".join(group) + "]"


class PacedChannel:
    """Sends JSON-array payloads on one channel, in order, one send at a time, those that
    waited for it packed (`pack`), sends at least `min_interval` apart."""

    def __init__(
        self,
        engine: AsyncEngine,
        channel: str,
        *,
        in_transaction: bool,
        min_interval: float = NOTIFY_INTERVAL,
    ) -> None:
        self.engine = engine
        self.channel = channel
        self.in_transaction = in_transaction
        self._pace = Pace(min_interval)
        self._queue: deque[str] = deque()
        self._confirms: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self.failures = 0

    def send_encoded(self, payloads: list[str]) -> None:
        """Queue payloads for sending, in order."""
        self._queue.extend(payloads)
        if self._queue and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(
                self._drain(), name=f"asr-send-{self.channel}"
            )

    def send_confirmed(self, payloads: list[str]) -> asyncio.Future[None]:
        """Queue payloads to go at once (not waiting out the interval); the future is done
        when they were sent (or their send failed)."""
        done = asyncio.get_running_loop().create_future()
        self._confirms.append(done)
        self.send_encoded(payloads)
        self._pace.hurry()
        return done

    async def _drain(self) -> None:
        while self._queue:
            await self._pace.turn()
            payloads = pack(list(self._queue))
            self._queue.clear()
            confirms, self._confirms = self._confirms, []
            try:
                await notify_all(
                    self.engine, self.channel, payloads, in_transaction=self.in_transaction
                )
            except Exception:  # what these channels carry is ephemeral or has a fallback
                self.failures += 1
                log.warning("sending %d payloads on %s failed", len(payloads), self.channel,
                            exc_info=True)  # fmt: skip
            finally:
                _release(confirms)

    async def flush(self) -> None:
        """Wait until every payload queued so far has been sent, sending what waits at once."""
        while self._task is not None and not self._task.done():
            self._pace.hurry()
            await asyncio.shield(self._task)

    async def close(self) -> None:
        """Drop what waits and stop sending: for payloads that are no use once their sender
        stops (an announcement of what it listens to)."""
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        confirms, self._confirms = self._confirms, []
        _release(confirms)


def _release(confirms: list[asyncio.Future[None]]) -> None:
    """Wake whoever waits for these payloads' send (sent, failed or dropped alike)."""
    for done in confirms:
        if not done.done():
            done.set_result(None)


# Whether some other replica listens to a session: (tenant_id, session_id) -> bool.
Gate = Callable[[str, str], bool]


class Notifier:
    """Sends committed wake-ups as NOTIFYs, coalesced, one send at a time (PostgreSQL).

    With `gates` (the live path's knowledge of what other replicas listen to,
    `app.live.interest`), a session's wake-up is sent only if some gate says another
    replica listens to it; the others are remembered (`SUPPRESSED_CAPACITY`) and sent when
    a replica starts listening (`resend`). Without gates every wake-up is sent.
    """

    def __init__(
        self, engine: AsyncEngine, *, in_transaction: bool, min_interval: float = NOTIFY_INTERVAL
    ) -> None:
        self.engine = engine
        self.in_transaction = in_transaction
        self.gates: list[Gate] = []
        self._pace = Pace(min_interval)
        self._pending: dict[tuple[str, str | None], int | None] = {}
        self._suppressed: OrderedDict[tuple[str, str], int | None] = OrderedDict()
        self._task: asyncio.Task[None] | None = None
        self.counters = {"suppressed": 0, "resent": 0}

    def post(self, wakeups: list[Wakeup]) -> None:
        gates = self.gates
        for w in wakeups:
            if gates and w.session_id is not None:
                if not any(wanted(w.tenant_id, w.session_id) for wanted in gates):
                    self._suppress(w)
                    continue
            self._queue(w.tenant_id, w.session_id, w.last_seq)
        self._kick()

    def _kick(self) -> None:
        """Start the sending task if wake-ups wait and none runs."""
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._drain())

    def _queue(self, tenant_id: str, session_id: str | None, last_seq: int | None) -> None:
        key = (tenant_id, session_id)
        self._pending[key] = _later(self._pending.get(key), last_seq)

    def _suppress(self, w: Wakeup) -> None:
        assert w.session_id is not None
        self.counters["suppressed"] += 1
        key = (w.tenant_id, w.session_id)
        self._suppressed[key] = _later(self._suppressed.pop(key, None), w.last_seq)
        if len(self._suppressed) > SUPPRESSED_CAPACITY:
            self._suppressed.popitem(last=False)

    def resend(self, tenant_id: str, session_id: str | None) -> None:
        """Another replica started listening to a session (None: every session of the
        tenant): send the wake-up kept back of it, if any (for a tenant, one for all)."""
        if session_id is not None:
            if (tenant_id, session_id) not in self._suppressed:
                return
            self._queue(tenant_id, session_id, self._suppressed.pop((tenant_id, session_id)))
        else:
            keys = [key for key in self._suppressed if key[0] == tenant_id]
            if not keys:
                return
            for key in keys:
                del self._suppressed[key]
            self._queue(tenant_id, None, None)
        self.counters["resent"] += 1
        self._kick()

    async def _drain(self) -> None:
        while self._pending:
            await self._pace.turn()
            batch, self._pending = self._pending, {}
            payloads = [encode_wakeup(Wakeup(t, s, q)) for (t, s), q in batch.items()]
            try:
                await notify_all(self.engine, CHANNEL, payloads, in_transaction=self.in_transaction)
            except Exception:  # the events are committed; readers' polls will find them
                log.warning("sending %d wake-ups failed", len(payloads), exc_info=True)

    async def send(self, channel: str, payloads: list[str]) -> None:
        """Payloads on another channel to every replica, at once (not coalesced: a run
        control message is rare and each one names a different run)."""
        await notify_all(self.engine, channel, payloads, in_transaction=self.in_transaction)

    async def flush(self) -> None:
        """Wait until every posted wake-up was sent (shutdown, tests)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)


def _later(seq: int | None, last_seq: int | None) -> int | None:
    """The seq a coalesced wake-up carries: the higher one (the newer one if either is
    unknown)."""
    return last_seq if seq is None or last_seq is None else max(seq, last_seq)


@dataclass(slots=True)
class _Touched:
    """What one transaction wrote of one session: up to `last_seq`, and the events if the
    writer has them all (None once any of them were not in hand)."""

    last_seq: int
    events: list[Event] | None

    def complete(self) -> bool:
        return self.events is not None and self.events[-1].seq == self.last_seq


class Announcer:
    """Collects the sessions a write transaction appended to, and announces them.

    `listeners` are called after every commit, in this process: the live path's
    `publish_committed` (`app.runtime.ports.LiveDelivery`) registers itself there, so the
    store needs nothing of it but this callable.
    """

    def __init__(self, *, notifier: Notifier | None = None) -> None:
        self.notifier = notifier
        self.listeners: list[Callable[[Wakeup], None]] = []

    def begin(self, conn: AsyncConnection) -> None:
        conn.info[_TOUCHED] = {}

    def touch(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        last_seq: int,
        events: Sequence[Event] | None = None,
    ) -> None:
        """Record that this transaction wrote events of the session up to `last_seq`.

        `events` are the events it inserted, as written (None: rows copied server-side,
        not in hand). The wake-up carries them only if the transaction's events of the
        session are all in hand and follow one another, so that a hand-on is complete.
        """
        touched: dict[tuple[str, str], _Touched] = conn.info.setdefault(_TOUCHED, {})
        key = (tenant_id, session_id)
        mine = list(events) if events else None
        before = touched.get(key)
        if before is None:
            touched[key] = _Touched(last_seq, mine)
            return
        joined = None
        if before.events and mine and before.events[-1].seq + 1 == mine[0].seq:
            joined = before.events + mine
        touched[key] = _Touched(max(last_seq, before.last_seq), joined)

    def take(self, conn: AsyncConnection) -> list[Wakeup]:
        """The wake-ups of the transaction on `conn` (taken off it)."""
        touched: dict[tuple[str, str], _Touched] = conn.info.pop(_TOUCHED, None) or {}
        return [
            Wakeup(t, s, x.last_seq, tuple(x.events or ()) if x.complete() else ())
            for (t, s), x in touched.items()
        ]

    def discard(self, conn: AsyncConnection) -> None:
        """Forget what a rolled-back transaction touched (conn.info outlives it).

        Not on an invalidated connection (lost, or cancelled in the middle of its COMMIT at
        shutdown): its info went with it, and reading `info` would reconnect it, which
        cannot be done here and raised an error that hid the transaction's own."""
        if not conn.invalidated:
            conn.info.pop(_TOUCHED, None)

    def after_commit(self, wakeups: list[Wakeup]) -> None:
        if not wakeups:
            return
        for wakeup in wakeups:
            for listener in list(self.listeners):
                try:
                    listener(wakeup)
                except Exception:  # a listener must never fail a committed write
                    log.exception("wake-up listener failed")
        if self.notifier is not None:
            self.notifier.post(wakeups)
