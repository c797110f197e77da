"""`PostgresNotifyBus`: the bus of PostgreSQL deployments, with its LISTEN connection, and
`make_bus`, which picks the bus for a deployment.

The one dedicated connection per process hears three channels: committed wake-ups
(`app.store.announce`, sent by every replica's store after its commits), run control
(`control_wire`) and token deltas (`delta_wire`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

import asyncpg

from app.live.bus import EventBus, InProcessBus
from app.live.control_wire import CONTROL_CHANNEL, decode_control
from app.live.delta_wire import DELTA_CHANNEL, DeltaNotifier, sent_by
from app.live.delta_wire import decode_all as decode_deltas
from app.runtime.ports import RunSignal
from app.settings import Settings
from app.store.announce import CHANNEL, decode_wakeup
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
        **kwargs: Any,
    ) -> None:
        super().__init__(store, **kwargs)
        self._dsn = listen_dsn
        self._keepalive = keepalive_seconds
        # Operators (and the tests) find this process's listener by this name.
        self.application_name = f"asr-listen:{os.getpid()}"
        self.listener: dict[str, Any] = {"connected": False, "backend_pid": None, "connects": 0}

    async def start(self) -> None:
        await super().start()
        self._tasks.append(asyncio.create_task(self._listen_forever(), name="asr-bus-listen"))

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
        return {**super().stats(), "listener": dict(self.listener)}


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
            **options,
        )
    return InProcessBus(store, **options)
