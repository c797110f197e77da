"""`PostgresNotifyBus`: the bus of PostgreSQL deployments, with its LISTEN connection, and
`make_bus`, which picks the bus for a deployment.

The one dedicated connection per process hears four channels: committed wake-ups
(`app.store.announce`, sent by every replica's store after its commits), run control
(`control_wire`), token deltas (`delta_wire`) and what the other replicas listen to
(`interest`: wake-ups and deltas of a session go out only while some replica does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from typing import Any

import asyncpg

from app.live.bus import EventBus, InProcessBus
from app.live.control_wire import CONTROL_CHANNEL, decode_control
from app.live.delta_wire import DELTA_CHANNEL, DeltaNotifier, sent_by
from app.live.delta_wire import decode_all as decode_deltas
from app.live.interest import (
    ALL,
    ASK,
    FRESH,
    INTEREST_CHANNEL,
    RENEWAL,
    RemoteInterest,
    encode_interest,
)
from app.runtime.ports import RunSignal
from app.settings import Settings
from app.store.announce import CHANNEL, PacedChannel, decode_wakeup
from app.store.engine import behind_pgbouncer
from app.store.ledger import LedgerStore
from app.store.pg_tls import asyncpg_dsn

log = logging.getLogger("app.live.bus")


class PostgresNotifyBus(EventBus):
    """PostgreSQL: plus one dedicated LISTEN connection per process, outside the pool.

    A pooled connection is recycled and shared, and a dead one is noticed only at its next
    use; this one is owned by a task that checks it every `keepalive_seconds` (a LISTEN
    round trip, which also keeps `pg_stat_activity.query` reading LISTEN), reconnects with
    backoff when it is lost, re-LISTENs, and only then catches up from the table, so a
    notification lost while it was down costs latency, never an event.
    """

    def __init__(
        self,
        store: LedgerStore,
        *,
        listen_dsn: str,
        keepalive_seconds: float = 5.0,
        interest_renew_seconds: float | None = None,
        min_interval: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(store, **kwargs)
        self._dsn = listen_dsn
        self._keepalive = keepalive_seconds
        # What the other replicas listen to (None: every wake-up and delta goes to all).
        self.interest: RemoteInterest | None = None
        self._interest_out: PacedChannel | None = None
        if interest_renew_seconds is not None:
            self.interest = RemoteInterest(self.deltas.origin, renew_seconds=interest_renew_seconds)
            self._interest_out = PacedChannel(
                store.db.engine,
                INTEREST_CHANNEL,
                in_transaction=behind_pgbouncer(store.db.engine),
                min_interval=min_interval,
            )
            self.deltas.wanted = self.interest.wants
        # Sessions this replica announced fresh, and when (loop time of the send), while
        # the others still hold them: a new topic on one needs no announcement of its own.
        self._told: dict[tuple[str, str], float] = {}
        self._asks = 0  # ASKs heard: an announcement sent before one may not have been heard
        # A read replica's fence is every session's head, which every wake-up carries.
        self._wants_everything = store.db.replicas is not None
        # Operators (and the tests) find this process's listener by this name.
        self.application_name = f"asr-listen:{os.getpid()}"
        self.listener: dict[str, Any] = {"connected": False, "backend_pid": None, "connects": 0}

    async def start(self) -> None:
        await super().start()
        notifier = self._store.db.announcer.notifier
        if self.interest is not None and notifier is not None:
            notifier.gates.append(self.interest.wants)
        self._tasks.append(asyncio.create_task(self._listen_forever(), name="asr-bus-listen"))
        if self.interest is not None:
            self._tasks.append(asyncio.create_task(self._renew_forever(), name="asr-interest"))

    async def stop(self) -> None:
        notifier = self._store.db.announcer.notifier
        if self.interest is not None and notifier is not None:
            with contextlib.suppress(ValueError):
                notifier.gates.remove(self.interest.wants)
        await super().stop()
        if self._interest_out is not None:
            await self._interest_out.close()

    # ------------------------------------------------------------------ interest

    def _listening(self, tenant_id: str, session_id: str | None) -> asyncio.Future[None] | None:
        if self._interest_out is None or self.interest is None:
            return None
        key = (tenant_id, ALL if session_id is None else session_id)
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._told.get(key, -math.inf) < self.interest.renew_seconds:
            # Announced less than a renewal ago (a conversation's next run): the others
            # keep it for two renewals more, and this topic's renewals extend that.
            return None
        payloads = encode_interest(self.deltas.origin, [key], fresh=FRESH)
        if not payloads:
            return None
        # At once, and the stream waits for it: a client that saw the stream open and then
        # wrote through another replica must find that replica told.
        out, failures, asks = self._interest_out, self._interest_out.failures, self._asks
        sent = out.send_confirmed(payloads)

        def told(_: asyncio.Future[None]) -> None:
            # Only an announcement known to have gone, to replicas that have not asked
            # since (one that asks may have missed it), spares the next one.
            if out.failures == failures and self._asks == asks:
                self._told[key] = now

        sent.add_done_callback(told)
        return sent

    def _announce(self, keys: list[tuple[str, str]], *, fresh: int) -> None:
        if self._interest_out is None:
            return
        if self._wants_everything:
            keys = [(ALL, ALL), *keys]
        payloads = encode_interest(self.deltas.origin, keys, fresh=fresh)
        if payloads:
            self._interest_out.send_encoded(payloads)

    def _announce_all(self, *, fresh: int) -> None:
        self._announce([(t, ALL if s is None else s) for t, s in self.listened()], fresh=fresh)

    async def _renew_forever(self) -> None:
        """Every replica hears again what this one listens to, before it expires there."""
        assert self.interest is not None
        while True:
            await asyncio.sleep(self.interest.renew_seconds)
            self.interest.sweep()
            since = asyncio.get_running_loop().time() - self.interest.renew_seconds
            self._told = {key: at for key, at in self._told.items() if at > since}
            self._announce_all(fresh=RENEWAL)

    def _on_interest(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        if self.interest is None:
            return
        notifier = self._store.db.announcer.notifier
        keys, asked = self.interest.heard(payload)
        if asked:  # a replica that just connected: it wants to hear this one's at once
            self._asks += 1
            self._told.clear()
            self._announce_all(fresh=RENEWAL)
        for tenant_id, session_id in keys:
            if tenant_id == ALL:
                continue  # heads for a read replica: from the next wake-ups on
            if notifier is not None:
                notifier.resend(tenant_id, None if session_id == ALL else session_id)
            if session_id != ALL:
                self.deltas.catch_up_remote(tenant_id, session_id)

    async def _listen_forever(self) -> None:
        delay = 0.1
        while True:
            try:
                await self._listen_once()
                delay = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure of the connection: back off, reconnect
                log.warning("LISTEN connection failed (%s); reconnecting", type(exc).__name__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _listen_once(self) -> None:
        """Connect, LISTEN, catch up, then watch the connection until it is lost."""
        lost = asyncio.Event()
        conn = await asyncpg.connect(
            self._dsn,
            timeout=10,
            server_settings={"application_name": self.application_name},
        )
        try:
            conn.add_termination_listener(lambda _conn: lost.set())
            # Deltas heard before now may have gaps: no catch-up is made from them.
            self.deltas.forget_remote()
            await conn.add_listener(CHANNEL, self._on_notification)
            await conn.add_listener(CONTROL_CHANNEL, self._on_control_notification)
            await conn.add_listener(DELTA_CHANNEL, self._on_delta)
            await conn.add_listener(INTEREST_CHANNEL, self._on_interest)
            if self.interest is not None:
                # What others announced while this one was deaf is unknown: send them
                # everything until they answer, and tell them all this one listens to.
                self.interest.open()
                self._announce_all(fresh=ASK)
            self.listener.update(
                connected=True,
                backend_pid=conn.get_server_pid(),
                connects=self.listener["connects"] + 1,
            )
            self.catch_up()
            while not lost.is_set() and not conn.is_closed():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._keepalive):
                        await lost.wait()
                if not lost.is_set():
                    async with asyncio.timeout(self._keepalive):
                        await conn.execute(f'LISTEN "{CHANNEL}"')
        finally:
            self.listener["connected"] = False
            if self.interest is not None:
                self.interest.deaf()
            await _close(conn, graceful=not lost.is_set())

    def _on_notification(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        wakeup = decode_wakeup(payload)
        if wakeup is not None:
            # The seq a NOTIFY announced fences this process's reads on a read replica.
            self._store.db.heads.saw(wakeup)
            self.publish_committed(wakeup)

    def _on_control_notification(
        self, _conn: object, _pid: int, _channel: str, payload: str
    ) -> None:
        decoded = decode_control(payload)
        if decoded is not None:
            self._deliver_control(RunSignal(*decoded))

    def _on_delta(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        if sent_by(payload, self.deltas.origin):
            return  # this replica's own, applied when it was sent
        for message in decode_deltas(payload):
            self.deltas.receive(message)

    def stats(self) -> dict[str, Any]:
        stats = {**super().stats(), "listener": dict(self.listener)}
        if self.interest is not None:
            stats.update(self.interest.stats())
        return stats


async def _close(conn: asyncpg.Connection, *, graceful: bool) -> None:
    if graceful and not conn.is_closed():
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await conn.close()
    conn.terminate()


def listen_dsn(settings: Settings) -> str:
    """The asyncpg DSN of the LISTEN connection: ASR_LISTEN_DATABASE_URL, else the DB URL."""
    # A pooler in transaction mode cannot LISTEN: prefer the LISTEN URL, then the direct one.
    # Its TLS parameters are read as the pool reads them (an `ssl=` left in a DSN would go to
    # the server as a setting, which it refuses).
    return asyncpg_dsn(settings.listen_database_url or settings.direct_url)


def make_bus(settings: Settings, store: LedgerStore) -> EventBus:
    """The bus for this deployment: NOTIFY on PostgreSQL unless disabled, else in-process."""
    options: dict[str, Any] = {
        "queue_size": settings.sse_queue_size,
        "poll_seconds": settings.sse_poll_seconds,
        "read_batch": settings.sse_replay_batch,
    }
    if store.db.dialect == "postgresql" and settings.sse_notify:
        return PostgresNotifyBus(
            store,
            listen_dsn=listen_dsn(settings),
            keepalive_seconds=settings.sse_listen_keepalive_seconds,
            delta_notifier=DeltaNotifier(
                store.db.engine,
                in_transaction=behind_pgbouncer(store.db.engine),
                min_interval=settings.sse_notify_interval_ms / 1000,
            ),
            interest_renew_seconds=(
                settings.sse_interest_renew_seconds if settings.sse_notify_interest else None
            ),
            min_interval=settings.sse_notify_interval_ms / 1000,
            **options,
        )
    return InProcessBus(store, **options)
