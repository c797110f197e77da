"""`Database`: the engine and its transactions, shared by every store; row conversion."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from sqlalchemy import Row, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.runtime.observer import NullObserver, Observer
from app.runtime.ports import SessionRecord, Wakeup
from app.runtime.session.events import Event
from app.store.announce import Announcer, Notifier
from app.store.engine import WRITE_OPTION
from app.store.replicas import STRICT, KnownHeads, ReplicaSet
from app.store.tables import sessions
from app.tracing import span

# The tenant of a transaction that names none. On PostgreSQL the row-level policies admit
# no tenant's rows to it; it is for what belongs to no tenant (a round trip to the server,
# the schema's revision) and for SQLite's cross-tenant statements (`app.store.sqlite`).
# There is no value that admits every tenant: see `app.store.cross_tenant`.
NO_TENANT = None


T = TypeVar("T")

# Why a lagging read was served where it was (the `reason` of `Observer.db_read`).
READ_NO_REPLICA = "no_replica"  # none configured, or every one backed off
READ_FENCED = "fenced"  # the replica had applied the fence: served there
READ_BEHIND = "behind"  # the replica had not (or lacks the session): the primary
READ_UNAVAILABLE = "unavailable"  # the replica failed: the primary


def _recovery_conflict(exc: BaseException) -> bool:
    """Whether `exc` is a standby's "canceling statement due to conflict with recovery"
    (SQLSTATE class 40, which a read-only transaction meets only so)."""
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return isinstance(state, str) and state.startswith("40")


class _Behind(Exception):
    """The replica has not applied the read's fence: the primary serves it."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """SQLite hands datetimes back naive; everything the store writes is UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Database(ABC):
    """Owns the engine and opens read and write transactions on it: the one small object
    every store by concern (`app.store.stores.Stores`) is built on.

    What differs between the databases is not decided here but by the backend's class
    (`SqliteDatabase`, `PostgresDatabase`), through these hooks: `insert` (the dialect's
    INSERT), `_scope` (the tenant of a transaction), `_write_lock` and the `Notifier`.
    """

    # The backend's SQLAlchemy dialect name ("sqlite" or "postgresql"), for tools and tests
    # that measure or set up per backend; the store's own code never branches on it.
    dialect: ClassVar[str]

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        notifier: Notifier | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.engine = engine
        # Told about committed events (metrics).
        self.observer: Observer = observer or NullObserver()
        # Live readers are woken by every transaction that inserts events (see announce.py).
        self.announcer = Announcer(notifier=notifier)
        # Writers queue here in order (SQLite's single writer) instead of in the database.
        self._write_lock: asyncio.Lock | None = None
        # Read replicas (PostgreSQL, ASR_DATABASE_READ_URLS), and what fences reads there:
        # the heads of this process's own commits here, the NOTIFYs' by the live listener.
        self.replicas: ReplicaSet | None = None
        self.heads = KnownHeads()
        self.announcer.listeners.append(self.heads.saw)

    @asynccontextmanager
    async def write(self, tenant_id: str | None) -> AsyncIterator[AsyncConnection]:
        """One write transaction for `tenant_id`: committed on exit, rolled back on error.

        On PostgreSQL the transaction is scoped to the tenant (`app.tenant_id`), so the
        row-level policies hide, and refuse to write, any other tenant's rows even if a
        query forgets its `tenant_id` filter. `NO_TENANT` names none, and no value names
        them all: work that spans tenants goes through `CrossTenantStore`'s few methods.

        The sessions whose events it inserted (`touch`) are announced after the commit:
        this process's listeners at once, other replicas by a NOTIFY the `Notifier` sends
        right after (announce.py); a rolled-back transaction announces nothing. Events
        inserted in it are reported to the observer (metrics) after the commit, once per
        transaction.
        """
        appended: list[str] = []
        with span("store.write", **{"db.system": self.engine.dialect.name}):
            async with AsyncExitStack() as stack:
                if self._write_lock is not None:
                    await stack.enter_async_context(self._write_lock)
                conn = await stack.enter_async_context(self.engine.connect())
                await conn.execution_options(**{WRITE_OPTION: True})
                self.announcer.begin(conn)
                try:
                    async with conn.begin(), _collecting(conn, appended):
                        if tenant_id is not NO_TENANT:
                            await self._scope(conn, tenant_id)
                        yield conn
                        wakeups = self.announcer.take(conn)
                finally:
                    self.announcer.discard(conn)
            self.announcer.after_commit(wakeups)
        if appended:
            self.observer.events_appended(appended)

    def committed(self, tenant_id: str, session_id: str, events: list[Event]) -> None:
        """What `write` does after its commit, for a write that committed on its own (a
        stored function's): wake this process's listeners, count the events."""
        if not events:
            return
        self.announcer.after_commit([Wakeup(tenant_id, session_id, events[-1].seq, tuple(events))])
        self.observer.events_appended([e.type for e in events])

    async def flush_wakeups(self) -> None:
        """Wait for the NOTIFYs of every commit so far (before the engine is disposed)."""
        if self.announcer.notifier is not None:
            await self.announcer.notifier.flush()

    def touch(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        last_seq: int,
        events: Sequence[Event] | None = None,
    ) -> None:
        """Mark this write transaction as having inserted events of the session (`events`:
        those it inserted, as written, when it has them; see `Announcer.touch`)."""
        self.announcer.touch(conn, tenant_id, session_id, last_seq, events)

    @asynccontextmanager
    async def read(self, tenant_id: str | None) -> AsyncIterator[AsyncConnection]:
        """One read transaction for `tenant_id` (scoped as in `write`); a consistent
        snapshot on PostgreSQL and in SQLite WAL."""
        async with self.engine.connect() as conn, conn.begin():
            if tenant_id is not NO_TENANT:
                await self._scope(conn, tenant_id)
            yield conn

    async def read_lagging(
        self,
        tenant_id: str,
        work: Callable[[AsyncConnection], Awaitable[T]],
        *,
        session_id: str | None = None,
        fence: int = 0,
    ) -> T:
        """`work` in a read transaction for `tenant_id`, on a read replica when one has
        applied the fence, else on the primary (`app.store.replicas` says why it is sound).

        Only for reads that tolerate a bounded lag and decide no write. With `session_id`,
        the fence is the higher of `fence` (the least seq the caller has seen) and the
        session's head known to this process, and a replica without the session is not
        trusted either; without it, the tenant's latest known commit.
        """
        replica = self.replicas.pick() if self.replicas is not None else None
        reason = READ_NO_REPLICA
        if replica is not None:
            assert self.replicas is not None
            if session_id is not None:
                need: tuple[str, int] | None = (
                    session_id,
                    max(fence, self.heads.session(tenant_id, session_id)),
                )
            else:
                need = self.heads.tenant(tenant_id)
            flushed: int | None = None
            if self.replicas.consistency == STRICT:
                try:
                    flushed = await self.replicas.primary_flushed()
                except Exception:  # the primary's trouble: its own read below reports it
                    replica = None
        if replica is not None:
            assert self.replicas is not None
            try:
                async with replica.engine.connect() as conn, conn.begin():
                    if flushed is not None and not await self.replicas.caught_up(conn, flushed):
                        raise _Behind
                    await self._scope(conn, tenant_id)
                    if need is None or await self.replicas.has_applied(
                        conn,
                        select(sessions.c.last_seq).where(
                            sessions.c.tenant_id == tenant_id,
                            sessions.c.session_id == need[0],
                        ),
                        need[1],
                    ):
                        result = await work(conn)
                        self.observer.db_read(target="replica", reason=READ_FENCED)
                        return result
                raise _Behind
            except _Behind:
                reason = READ_BEHIND
                self.replicas.succeeded(replica)
            except Exception as exc:  # a replica's failure is never the caller's
                if _recovery_conflict(exc):
                    # A hot standby cancels a query that WAL replay must not wait for:
                    # this read goes to the primary, the replica stays in use.
                    reason = READ_BEHIND
                else:
                    self.replicas.failed(replica, exc)
                    reason = READ_UNAVAILABLE
        self.observer.db_read(target="primary", reason=reason)
        async with self.read(tenant_id) as conn:
            return await work(conn)

    @abstractmethod
    async def _scope(self, conn: AsyncConnection, tenant_id: str) -> None:
        """Bind the transaction to `tenant_id` (PostgreSQL's row-level security). The
        application's own tenant filters are the first wall everywhere."""

    @abstractmethod
    def insert(self, table: Any) -> Any:
        """The dialect's INSERT, which knows ON CONFLICT on both databases."""


# conn.info key of the event types a write transaction inserted (see note_appended).
APPENDED = "asr_appended_event_types"


@asynccontextmanager
async def _collecting(conn: AsyncConnection, into: list[str]) -> AsyncIterator[None]:
    # conn.info lives as long as the pooled DBAPI connection: always take the list off again,
    # unless the connection was invalidated (its info went with it; reading it would try to
    # reconnect, and that error would hide the transaction's own, see `Announcer.discard`).
    conn.info[APPENDED] = into
    try:
        yield
    finally:
        if not conn.invalidated:
            conn.info.pop(APPENDED, None)


def note_appended(conn: AsyncConnection, types: list[str]) -> None:
    """Record event types inserted in this write transaction (reported after commit)."""
    collected = conn.info.get(APPENDED)
    if collected is not None:
        collected.extend(types)


def session_from_row(row: Row[Any]) -> SessionRecord:
    return session_from_mapping(row._mapping)


def session_from_mapping(m: Any) -> SessionRecord:
    """From anything that maps column names to values: a SQLAlchemy row's mapping, or an
    asyncpg record (the composites the stored functions return)."""
    return SessionRecord(
        tenant_id=m["tenant_id"],
        session_id=m["session_id"],
        root_session_id=m["root_session_id"],
        parent_session_id=m["parent_session_id"],
        forked_from_seq=m["forked_from_seq"],
        status=m["status"],
        metadata=m["metadata"] or {},
        agent=m["agent"] or {},
        binding=m["binding"] or {},
        last_seq=m["last_seq"],
        version=m["version"],
        active_run_id=m["active_run_id"],
        created_at=as_utc(m["created_at"]),
        updated_at=as_utc(m["updated_at"]),
        expires_at=as_utc(m["expires_at"]) if m.get("expires_at") is not None else None,
        idle_ttl_seconds=m.get("idle_ttl_seconds"),
    )


def event_from_row(row: Row[Any]) -> Event:
    return event_from_mapping(row._mapping)


# Event's fields in its constructor's order: they are session_events' columns of the same
# names, so reads need no list of their own (a new event column is a field of Event).
EVENT_FIELDS = tuple(f.name for f in fields(Event))
_CREATED_AT = EVENT_FIELDS.index("created_at")


def event_from_mapping(m: Any) -> Event:
    values = [m[name] for name in EVENT_FIELDS]
    values[_CREATED_AT] = as_utc(values[_CREATED_AT])
    return Event(*values)


def events_from_rows(rows: list[Any]) -> list[Event]:
    """Events from a driver's rows holding Event's fields in its order, each row let go as
    soon as its event is made (`rows` is emptied in place).

    A row and its event are both objects the cycle collector tracks, and on a long read its
    collections cost about as much as the rest of the read's Python. Kept until the end, the
    rows made the conversion set off one collection per 700 events (and full ones, over
    everything, sooner). Freed one by one, each row makes room for its event, and the
    conversion sets off next to none (only while the drivers' free lists for rows fill up).
    """
    events = []
    for i, row in enumerate(rows):
        rows[i] = None
        events.append(Event(*row))
    return events
