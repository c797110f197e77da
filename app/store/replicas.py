"""Read replicas: which reads may go to a streaming replica, and the fence that keeps each
from showing a caller less than it already saw.

A streaming replica applies the primary's WAL some time after the primary committed it. A
read that tolerates that lag (an event page, an SSE catch-up, an export, a list) may be
served there (and so may a cold load of a session's state for display), but never below what
its caller is known to have seen: the seq after which it asks (`after_seq`,
`Last-Event-ID`), the seq up to which it asks (`until_seq`), and the highest seq this
process knows the session to have (its own commits, every NOTIFY it heard from the primary,
the session rows it read there: `KnownHeads`). That is the **fence**. On the replica, in the
read's own transaction, the session's row is read first; if the replica does not have the
session, or its `last_seq` is below the fence (after waiting up to `ASR_DB_READ_WAIT_MS` for
it), the replica has not applied the caller's past and the read goes to the primary instead.
A read of no session (a list) is fenced by the tenant's latest known (session, seq) the same
way: WAL is applied in commit order, so a replica that shows that commit shows every earlier
one. The row is read before the page in the same transaction; under READ COMMITTED the
page's statement sees a snapshot at least as new, so the page holds everything up to the
fence.

That is `ASR_DB_READ_CONSISTENCY=session`. `strict` (the default) adds a fence for what this
process cannot know (a write another server took a moment ago): the primary's WAL flush
position, asked after the read began (`ReplicaSet.primary_flushed`, one query shared by a
burst of reads). Every acknowledged synchronous commit is at or below it, so a replica that
has applied it (`pg_last_wal_replay_lsn()`, waited for up to `ASR_DB_READ_WAIT_MS`) shows
every write acknowledged before the read began.

A replica that fails (refuses, times out, breaks mid-read) is skipped for a back-off that
doubles up to `MAX_BACKOFF_SECONDS`, and the read it failed is served by the primary: a dead
replica costs the primary its reads, never a client an error. A health probe (every
`ASR_DB_READ_HEALTH_SECONDS`) measures each replica's lag behind the primary (bytes of WAL,
and seconds since the last transaction it replayed while it is behind) and brings a
recovered replica back.

Writes, leases, runs, Idempotency-Keys and every read a write is decided on stay on the
primary: only the store's own read paths named in `docs/how-to/scale-out.md` use
`Database.read_lagging`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.runtime.ports import Wakeup

log = logging.getLogger("app.store.replicas")

MAX_BACKOFF_SECONDS = 30.0
FIRST_BACKOFF_SECONDS = 0.5
# Sessions (and tenants) whose head this process remembers; the least recently heard of go
# first. A forgotten head only weakens that session's fence to what its caller sends.
KNOWN_CAPACITY = 100_000

_PRIMARY_LSN = text("SELECT pg_current_wal_lsn()::text")
# Every synchronous commit acknowledged so far is at or below the primary's flush position.
_PRIMARY_FLUSHED = text("SELECT pg_current_wal_flush_lsn()::text")
# What a replica has applied (None: it is no standby, so it is as current as it gets).
_REPLAYED = text("SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text END")
# Consistency levels (ASR_DB_READ_CONSISTENCY).
STRICT = "strict"
SESSION = "session"
# How often a replica's replay position is asked again while a strict read waits for it.
_WAIT_STEP_SECONDS = 0.002
_REPLICA_PROBE = text(
    "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text,"
    " CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0"
    " ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END"
)


def lsn_bytes(lsn: str) -> int:
    """A WAL position as PostgreSQL writes it (`16/B374D848`), in bytes."""
    high, _, low = lsn.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


class KnownHeads:
    """The highest seq this process knows each session to have, and each tenant's latest
    known (session, seq): from its own commits and from the primary's NOTIFYs."""

    def __init__(self, capacity: int = KNOWN_CAPACITY) -> None:
        self._capacity = capacity
        self._sessions: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._tenants: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def saw(self, wakeup: Wakeup) -> None:
        """A commit of the session up to `last_seq` (a wake-up: local or a NOTIFY)."""
        if wakeup.session_id is None or wakeup.last_seq is None:
            return
        key = (wakeup.tenant_id, wakeup.session_id)
        seq = max(wakeup.last_seq, self._sessions.get(key, 0))
        self._sessions[key] = seq
        self._sessions.move_to_end(key)
        self._tenants[wakeup.tenant_id] = (wakeup.session_id, seq)
        self._tenants.move_to_end(wakeup.tenant_id)
        while len(self._sessions) > self._capacity:
            self._sessions.popitem(last=False)
        while len(self._tenants) > self._capacity:
            self._tenants.popitem(last=False)

    def read(self, tenant_id: str, session_id: str, seq: int) -> None:
        """The primary showed the session at `seq` (a read, not a commit: the tenant's
        latest commit, which fences its lists, is not this one)."""
        key = (tenant_id, session_id)
        self._sessions[key] = max(seq, self._sessions.get(key, 0))
        self._sessions.move_to_end(key)
        while len(self._sessions) > self._capacity:
            self._sessions.popitem(last=False)

    def session(self, tenant_id: str, session_id: str) -> int:
        """The highest seq known of the session (0: none known)."""
        return self._sessions.get((tenant_id, session_id), 0)

    def tenant(self, tenant_id: str) -> tuple[str, int] | None:
        """The tenant's latest known commit: (session, seq), or None."""
        return self._tenants.get(tenant_id)


@dataclass
class Replica:
    """One read replica: its engine, whether it is in use, and what its probe measured."""

    index: int
    engine: AsyncEngine
    up: bool = True
    retry_at: float = 0.0
    failures: int = 0
    lag_bytes: float | None = None
    lag_seconds: float | None = None

    @property
    def label(self) -> str:
        """Its position in ASR_DATABASE_READ_URLS: a bounded metric label, no URL."""
        return str(self.index)


@dataclass
class ReplicaSet:
    """The read replicas, taken in turn; a failed one is skipped until its back-off ends."""

    replicas: list[Replica]
    primary: AsyncEngine
    timeout: float = 1.0
    health_seconds: float = 2.0
    consistency: str = STRICT
    wait_seconds: float = 0.02
    _next: int = 0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)
    _lsn: asyncio.Future[int] | None = field(default=None, repr=False)
    _lsn_started: int = 0

    async def primary_flushed(self) -> int:
        """The primary's WAL flush position, asked after this call began: every write
        acknowledged before the call is at or below it.

        Concurrent callers share one query: a caller waits for a query that began after it
        did (or, if the one in flight began earlier, for the next), so a burst of reads
        costs the primary one round trip, not one each."""
        floor = self._lsn_started
        while True:
            pending = self._lsn
            if pending is not None and self._lsn_started > floor:
                return await asyncio.shield(pending)
            if pending is None or pending.done():
                self._lsn_started += 1
                self._lsn = asyncio.ensure_future(self._ask_flushed())
                return await asyncio.shield(self._lsn)
            with contextlib.suppress(Exception):
                await asyncio.shield(pending)

    async def _ask_flushed(self) -> int:
        async with self.primary.connect() as conn:
            return lsn_bytes((await conn.execute(_PRIMARY_FLUSHED)).scalar_one())

    async def has_applied(self, conn: Any, head: Any, seq: int) -> bool:
        """Whether the replica of `conn` shows the session row `head` selects at `seq` or
        later, waiting up to `wait_seconds` for it (a healthy replica is milliseconds
        behind: the live path's reads right after a commit are served there once it has
        applied the commit, instead of all falling on the primary)."""
        deadline = time.monotonic() + self.wait_seconds
        while True:
            last_seq = await conn.scalar(head)
            if last_seq is not None and last_seq >= seq:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_WAIT_STEP_SECONDS)

    async def caught_up(self, conn: object, lsn: int) -> bool:
        """Whether the replica of `conn` has applied `lsn`, waiting up to `wait_seconds`
        for it (a healthy replica is milliseconds behind)."""
        deadline = time.monotonic() + self.wait_seconds
        while True:
            replayed = (await conn.execute(_REPLAYED)).scalar_one()  # type: ignore[attr-defined]
            if replayed is None or lsn_bytes(replayed) >= lsn:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_WAIT_STEP_SECONDS)

    def pick(self) -> Replica | None:
        """The next usable replica (round robin), or None when none is."""
        now = time.monotonic()
        n = len(self.replicas)
        for i in range(n):
            replica = self.replicas[(self._next + i) % n]
            if replica.up or now >= replica.retry_at:
                self._next = (self._next + i + 1) % n
                return replica
        return None

    def failed(self, replica: Replica, exc: BaseException) -> None:
        """Skip `replica` for a back-off that doubles with each failure in a row."""
        replica.failures += 1
        backoff = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (replica.failures - 1))
        replica.retry_at = time.monotonic() + backoff
        if replica.up:
            log.warning(
                "read replica %s skipped for %.1fs: %s", replica.label, backoff, type(exc).__name__
            )
        replica.up = False

    def succeeded(self, replica: Replica) -> None:
        if not replica.up:
            log.info("read replica %s back in use", replica.label)
        replica.up = True
        replica.failures = 0

    async def probe(self) -> None:
        """Measure each replica's lag behind the primary; mark it up or failed."""
        primary_lsn: str | None = None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.timeout), self.primary.connect() as conn:
                primary_lsn = (await conn.execute(_PRIMARY_LSN)).scalar_one()
        for replica in self.replicas:
            try:
                async with asyncio.timeout(self.timeout), replica.engine.connect() as conn:
                    in_recovery, lsn, seconds = (await conn.execute(_REPLICA_PROBE)).one()
                lag_bytes = None
                if primary_lsn is not None and lsn is not None:
                    lag_bytes = float(max(lsn_bytes(primary_lsn) - lsn_bytes(lsn), 0))
            except Exception as exc:
                replica.lag_bytes = replica.lag_seconds = None
                self.failed(replica, exc)
                continue
            if not in_recovery:
                log.warning("read replica %s is not in recovery (promoted?)", replica.label)
            replica.lag_bytes = lag_bytes
            replica.lag_seconds = float(seconds) if seconds is not None else None
            self.succeeded(replica)

    async def _probe_forever(self) -> None:
        while True:
            try:
                await self.probe()
            except Exception:  # the probe must outlive any one failure
                log.warning("read replica probe failed", exc_info=True)
            await asyncio.sleep(self.health_seconds)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._probe_forever(), name="asr-replica-probe")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for replica in self.replicas:
            await replica.engine.dispose()

    def stats(self) -> list[dict[str, object]]:
        """Per replica: up, lag (bytes, seconds), failures in a row (metrics, /readyz)."""
        return [
            {
                "replica": r.label,
                "up": r.up,
                "lag_bytes": r.lag_bytes,
                "lag_seconds": r.lag_seconds,
                "failures": r.failures,
            }
            for r in self.replicas
        ]
