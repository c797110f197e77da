"""`SqliteStore`: the embedded default's writes, as SQLAlchemy Core statements.

SQLite has one writer at a time: every write transaction begins IMMEDIATE (a deferred one
that upgrades would fail at once with "database is locked"), and writers of this process
queue on an asyncio lock in arrival order instead of spinning in SQLite's busy handler.
The writes that insert events run as jobs on one writer connection, in its own thread, with
group commit (`writer.py`): one hop per write instead of one per statement.
Under that single writer, position order is commit order, so global event positions come
from the one-row `counters` table and the tenant timeline needs no transaction ids.

Every write that inserts events keeps the ledger's rule: the UPDATE of the session row
that bumps `last_seq` reserves the seqs, and the events are inserted in the same
transaction; an Idempotency-Key is sealed in it too (`seal`). The statements that span
tenants are `SqliteCrossTenant`'s (`cross_tenant.py`).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from operator import attrgetter
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar, cast

from sqlalchemy import (
    BigInteger,
    bindparam,
    case,
    literal,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.runtime.errors import (
    IdempotentReplay,
    InvalidForkPoint,
    RunAlreadyActive,
    RunFenced,
    SeqConflict,
    SessionAlreadyExists,
    SessionNotFound,
    StaleSession,
    VersionConflict,
)
from app.runtime.ports import (
    AppendResult,
    HeldSession,
    IdempotencyToken,
    NewSession,
    RunFinish,
    RunRecord,
    SessionLoad,
    SessionRecord,
    TenantCursor,
    TenantPage,
)
from app.runtime.session.events import Event, NewEvent
from app.runtime.session.metadata import check_metadata_size, merge_patch
from app.store import json_text
from app.store.base import (
    APPENDED,
    EVENT_FIELDS,
    event_from_row,
    note_appended,
    session_from_row,
    utcnow,
)
from app.store.engine import sqlite_synchronous
from app.store.idempotency import committed_result
from app.store.ledger import EVENT_COLUMN_LIST
from app.store.runs import LIVE, run_from_row
from app.store.sqlite.cross_tenant import SqliteCrossTenant
from app.store.sqlite.writer import (
    Done,
    Job,
    JobOf,
    SqliteWriter,
    driver,
    session_from_tuple,
    sqlite_time,
)
from app.store.store import AgentSessionStore
from app.store.tables import (
    idempotency_keys,
    runs,
    session_events,
    session_snapshots,
    sessions,
)
from app.tracing import span

_T = TypeVar("_T")
_POSITION_COUNTER = "event_position"

# The statements every append runs are plain SQL on the writer's driver connection
# (writer.py): SQLAlchemy's per-statement work (cache keys, bind and result processing) was
# most of an append's CPU. They store what SQLAlchemy's types store (JSON text, the
# DATETIME text of `sqlite_time`), so every other read and write sees the same rows.
_SESSION_COLUMNS = ", ".join(c.name for c in sessions.c)
# An event row is its tenant and its Event's fields (EVENT_FIELDS, the columns of the same
# names), the payload as JSON text and the time as `sqlite_time`'s text: a new event column
# (a field of Event) needs nothing here.
_INSERT_EVENT_ROW = (
    f"INSERT INTO session_events (tenant_id, {EVENT_COLUMN_LIST})"
    f" VALUES ({', '.join('?' * (1 + len(EVENT_FIELDS)))})"
)
_EVENT_VALUES = attrgetter(*EVENT_FIELDS)
_PAYLOAD = EVENT_FIELDS.index("payload")
_CREATED_AT = EVENT_FIELDS.index("created_at")
_RESERVE_POSITIONS = (
    "INSERT INTO counters (name, value) VALUES (?1, ?2)"
    " ON CONFLICT (name) DO UPDATE SET value = value + ?2 RETURNING value"
)


# A random (version 4, variant 1) UUID in its text form, from SQLite's own functions.
_UUID4_SQL = (
    "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' ||"
    " substr(hex(randomblob(2)), 2) || '-' || substr('89AB', 1 + (abs(random()) % 4), 1) ||"
    " substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))"
)


@functools.cache
def _reserve_sql(by_seq: bool, by_version: bool) -> str:
    """The UPDATE that reserves an append's seqs, conditional on the expected seq and
    version when given (parameters: n, now, tenant, session[, seq][, version])."""
    where = "tenant_id = ? AND session_id = ?"
    if by_seq:
        where += " AND last_seq = ?"
    if by_version:
        where += " AND version = ?"
    return (
        "UPDATE sessions SET last_seq = last_seq + ?, version = version + 1, updated_at = ?"
        f" WHERE {where} RETURNING {_SESSION_COLUMNS}"
    )


@functools.cache
def _reserve_for_run(finishing: bool) -> Any:
    """Reserve a run step's seqs; when `finishing`, also free the session, in the same
    UPDATE, if (and only if) this run still holds it."""
    c = sessions.c
    values: dict[str, Any] = {
        "last_seq": c.last_seq + bindparam("r_n", type_=BigInteger),
        "version": c.version + 1,
        "updated_at": bindparam("r_now", type_=c.updated_at.type),
    }
    if finishing:
        held = c.active_run_id == bindparam("r_run")
        values["active_run_id"] = case((held, null()), else_=c.active_run_id)
        values["status"] = case((held, literal("idle")), else_=c.status)
    return (
        update(sessions)
        .where(c.tenant_id == bindparam("r_tenant"), c.session_id == bindparam("r_session"))
        .values(**values)
        .returning(*c)
    )


class SqliteStore(SqliteCrossTenant, AgentSessionStore):
    dialect: ClassVar[str] = "sqlite"
    _write_lock: asyncio.Lock  # always one here (__init__)

    def __init__(self, engine: AsyncEngine, **options: Any) -> None:
        super().__init__(engine, **options)
        self._write_lock = asyncio.Lock()
        # Every write that inserts events runs on the one writer connection, with group
        # commit (writer.py); the others take turns with it on `_write_lock`.
        self.writer = SqliteWriter(engine.url, sqlite_synchronous(engine), self._write_lock)
        self.writer.attach(self)

    async def _write(self, work: JobOf[_T], *, held: bool = False) -> _T:
        """`work` in a committed write transaction of the writer; then, as `write` does after
        its commit, this process's listeners are woken and the appended events counted.

        `held`: the caller holds the write lock already (`hold`)."""
        job: Job = functools.partial(self._collected, work=work)
        with span("store.write", **{"db.system": "sqlite"}):
            if held:
                done = await self.writer.run_held(job, self._announce)
            else:
                done = await self.writer.run(job, self._announce)
        if done.error is not None:
            raise done.error
        return cast(_T, done.value)  # what `work` returned

    def _announce(self, done: Done) -> None:
        """After a job's commit (even one whose caller was cancelled meanwhile)."""
        holder = SimpleNamespace(info=done.info)
        self.announcer.after_commit(self.announcer.take(cast(AsyncConnection, holder)))
        appended = done.info.get(APPENDED)
        if appended:
            self.observer.events_appended(appended)

    @staticmethod
    async def _collected(conn: AsyncConnection, *, work: Job) -> Any:
        conn.info[APPENDED] = []  # note_appended collects the job's event types here
        return await work(conn)

    def insert(self, table: Any) -> Any:
        return sqlite.insert(table)

    async def _scope(self, conn: AsyncConnection, tenant_id: str) -> None:
        """Nothing: SQLite, the single-tenant embedded default, has no row-level security;
        the application's own tenant filters are the wall."""

    # ------------------------------------------------------------ idempotency

    async def seal(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        token: IdempotencyToken | None,
        result: dict[str, Any],
    ) -> None:
        """Record `token` with `result` in the open write transaction `conn`.

        Raises:
            IdempotentReplay: a live row holds the key (a duplicate committed first); the
                caller's transaction must roll back, which raising does.
        """
        if token is None:
            return
        now = utcnow()
        t = idempotency_keys.c
        fresh = {
            "request_hash": token.request_hash,
            "result": result,
            "status_code": None,
            "response": None,
            "headers": None,
            "created_at": now,
            "expires_at": now + self.idempotency_ttl,
        }
        stmt = (
            self.insert(idempotency_keys)
            .values(tenant_id=tenant_id, key=token.key, **fresh)
            .on_conflict_do_update(
                index_elements=["tenant_id", "key"], set_=fresh, where=t.expires_at <= now
            )
            .returning(t.key)
        )
        if (await conn.execute(stmt)).first() is None:
            raise IdempotentReplay(token.key)

    # --------------------------------------------------------------- sessions

    async def create_session(
        self,
        tenant_id: str,
        *,
        session: NewSession,
        events: list[NewEvent],
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        now = utcnow()

        async def work(conn: AsyncConnection) -> AppendResult:
            record = await self._insert_session_row(conn, tenant_id, session, len(events), now)
            if record is None:
                raise SessionAlreadyExists(session.session_id)
            written = await self._insert_events(conn, record, events, first_seq=1)
            if snapshot is not None:
                await self._insert_snapshot(conn, record, snapshot[0], snapshot[1], now)
            result = AppendResult(session=record, events=written)
            await self.seal(conn, tenant_id, idempotency, committed_result(result))
            return result

        return cast(AppendResult, await self._write(work))

    async def _insert_session_row(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session: NewSession,
        last_seq: int,
        now: datetime,
    ) -> SessionRecord | None:
        # ON CONFLICT DO NOTHING rather than catching a unique violation.
        stmt = (
            self.insert(sessions)
            .values(
                tenant_id=tenant_id,
                session_id=session.session_id,
                root_session_id=session.root_session_id or session.session_id,
                parent_session_id=session.parent_session_id,
                forked_from_seq=session.forked_from_seq,
                status="idle",
                metadata=self.redactor.value(session.metadata),
                agent=self.redactor.value(session.agent),
                binding=self.redactor.value(session.binding),
                last_seq=last_seq,
                version=1,
                active_run_id=None,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["tenant_id", "session_id"])
            .returning(*sessions.c)
        )
        row = (await conn.execute(stmt)).first()
        return session_from_row(row) if row is not None else None

    async def append_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        events: list[NewEvent],
        expected_seq: int | None = None,
        expected_version: int | None = None,
        metadata_patch: dict[str, Any] | None = None,
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
        held: bool = False,
    ) -> AppendResult:
        """The UPDATE of the session row reserves the seqs (and applies a metadata patch to
        the row as the single writer finds it), then the events are inserted: one job.

        `held`: made by `hold`'s session, whose caller holds the write lock."""
        self.check_append(events, expected_seq, snapshot)
        n = len(events)

        async def work(conn: AsyncConnection) -> AppendResult:
            record = await self._reserve(
                conn, tenant_id, session_id, n, expected_seq, expected_version
            )
            if metadata_patch is not None:
                record = await self._patch_metadata(conn, record, metadata_patch)
            written = await self._insert_events(
                conn, record, events, first_seq=record.last_seq - n + 1
            )
            if snapshot is not None:
                await self._insert_snapshot(conn, record, snapshot[0], snapshot[1], utcnow())
            result = AppendResult(session=record, events=written)
            await self.seal(conn, tenant_id, idempotency, committed_result(result))
            return result

        return cast(AppendResult, await self._write(work, held=held))

    @asynccontextmanager
    async def hold(self, tenant_id: str, session_id: str) -> AsyncIterator[HeldSession]:
        """The write lock of this process, which every SQLite write takes (the writer's
        transactions and the pool's): SQLite has one writer, and one process serves it.
        Reads go on meanwhile (WAL)."""
        async with self._write_lock:
            if await self.get_session(tenant_id, session_id) is None:
                raise SessionNotFound(session_id)
            yield _SqliteHold(self, tenant_id, session_id)

    async def _reserve(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        n: int,
        expected_seq: int | None,
        expected_version: int | None,
    ) -> SessionRecord:
        # The UPDATE reserves last_seq-n+1 .. last_seq; the events inserted after it in this
        # transaction use exactly that range.
        sql = _reserve_sql(expected_seq is not None, expected_version is not None)
        params = [n, sqlite_time(utcnow()), tenant_id, session_id]
        params += [v for v in (expected_seq, expected_version) if v is not None]
        row = driver(conn).execute(sql, params).fetchone()
        if row is not None:
            return session_from_tuple(row)
        current = (
            await conn.execute(
                select(sessions.c.last_seq, sessions.c.version).where(
                    sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id
                )
            )
        ).first()
        if current is None:
            raise SessionNotFound(session_id)
        if expected_version is not None and current.version != expected_version:
            raise VersionConflict(expected_version, current.version)
        raise SeqConflict(expected_seq or 0, current.last_seq)

    async def _patch_metadata(
        self, conn: AsyncConnection, record: SessionRecord, patch: dict[str, Any]
    ) -> SessionRecord:
        merged = self.redactor.value(merge_patch(record.metadata, patch))
        check_metadata_size(merged, limit=self.max_metadata_bytes)
        await conn.execute(
            update(sessions)
            .where(
                sessions.c.tenant_id == record.tenant_id,
                sessions.c.session_id == record.session_id,
            )
            .values(metadata=merged)
        )
        return replace(record, metadata=merged)

    async def _insert_events(
        self,
        conn: AsyncConnection,
        session: SessionRecord,
        events: list[NewEvent],
        *,
        first_seq: int,
    ) -> list[Event]:
        if not events:
            return []
        # Counted for metrics once the transaction commits (see StoreBase.write); a fork's
        # copied prefix (_copy_events) is not new and is not counted.
        note_appended(conn, [str(e.type) for e in events])
        now = utcnow()
        stamp = sqlite_time(now)
        top = await self._reserve_positions(conn, len(events))
        first_position = top - len(events) + 1
        written: list[Event] = []
        rows: list[list[Any]] = []
        for i, e in enumerate(events):
            # The JSON text the size check measured is the text stored: encoded once.
            clean, text = self._persistable_json(e.payload)
            event = e.stored(
                str(uuid.uuid4()), session.session_id, first_seq + i, clean, now,
                first_position + i,
            )  # fmt: skip
            written.append(event)
            values = [session.tenant_id, *_EVENT_VALUES(event)]
            values[1 + _PAYLOAD] = text
            values[1 + _CREATED_AT] = stamp
            rows.append(values)
        driver(conn).executemany(_INSERT_EVENT_ROW, rows)
        # Announced after the commit with the events as written: the bus hands them on.
        self.touch(conn, session.tenant_id, session.session_id, session.last_seq, written)
        return written

    async def _reserve_positions(self, conn: AsyncConnection, n: int) -> int:
        """Reserve `n` global positions and return the highest."""
        row = driver(conn).execute(_RESERVE_POSITIONS, (_POSITION_COUNTER, n)).fetchone()
        return int(row[0])

    async def _insert_snapshot(
        self,
        conn: AsyncConnection,
        session: SessionRecord,
        kind: str,
        state: dict[str, Any],
        now: datetime,
    ) -> None:
        if state.get("seq") != session.last_seq:
            raise ValueError("a snapshot must be the fold at the session's last seq")
        clean, digest = self.persistable_snapshot(state)
        await conn.execute(
            session_snapshots.insert().values(
                tenant_id=session.tenant_id,
                session_id=session.session_id,
                seq=session.last_seq,
                kind=kind,
                state=clean,
                state_hash=digest,
                created_at=now,
            )
        )

    async def _events(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        types: list[str] | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """The bare driver inside the same read transaction, as on PostgreSQL: SQLAlchemy's
        per-row processing (its JSON and DATETIME types) was most of a long read."""
        args: list[Any] = [tenant_id, session_id, after_seq]
        where = ["tenant_id = ?", "session_id = ?", "seq > ?"]
        if until_seq is not None:
            where.append("seq <= ?")
            args.append(until_seq)
        if types:
            where.append(f"type IN ({', '.join('?' * len(types))})")
            args.extend(types)
        if run_id is not None:
            where.append("run_id = ?")
            args.append(run_id)
        sql = (
            f"SELECT {EVENT_COLUMN_LIST} FROM session_events"
            f" WHERE {' AND '.join(where)} ORDER BY seq"
        )
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None  # the checked-out connection's aiosqlite one
        async with driver.execute(sql, args) as cursor:
            rows = await cursor.fetchall()
        loads, parse = json_text.loads, datetime.fromisoformat
        events = []
        for row in rows:
            values = list(row)
            values[_PAYLOAD] = loads(values[_PAYLOAD])
            values[_CREATED_AT] = parse(values[_CREATED_AT]).replace(tzinfo=UTC)
            events.append(Event(*values))
        return events

    async def list_tenant_events(
        self,
        tenant_id: str,
        *,
        after: TenantCursor,
        types: list[str] | None = None,
        limit: int = 500,
    ) -> TenantPage:
        """Events of every session of the tenant after `after`: with one writer at a time,
        position order is commit order."""
        ev = session_events.c
        stmt = select(session_events).where(ev.tenant_id == tenant_id)
        if types:
            stmt = stmt.where(ev.type.in_(types))
        stmt = stmt.where(ev.position > after.position).order_by(ev.position).limit(limit)
        async with self.read(tenant_id) as conn:
            rows = (await conn.execute(stmt)).all()
        entries = [(event_from_row(r), TenantCursor(0, r.position)) for r in rows]
        return TenantPage(entries=entries, more=len(rows) == limit, pending=False)

    # ------------------------------------------------------------------ forks

    async def fork_session(
        self,
        tenant_id: str,
        source_session_id: str,
        *,
        at_seq: int,
        session: NewSession,
        events: list[NewEvent],
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """The prefix and the source's nearest snapshot at or below `at_seq` are copied
        with INSERT ... SELECT (see `SessionStore.fork_session`); only the child's own
        events are built here."""
        now = utcnow()

        async def work(conn: AsyncConnection) -> Any:
            source = (
                await conn.execute(
                    select(sessions.c.last_seq, sessions.c.root_session_id).where(
                        sessions.c.tenant_id == tenant_id,
                        sessions.c.session_id == source_session_id,
                    )
                )
            ).first()
            if source is None:
                raise SessionNotFound(source_session_id)
            if not 0 <= at_seq <= source.last_seq:
                raise InvalidForkPoint(
                    f"at_seq must be between 0 and {source.last_seq}",
                    last_seq=source.last_seq,
                )
            child = NewSession(
                session_id=session.session_id,
                metadata=session.metadata,
                agent=session.agent,
                binding=session.binding,
                root_session_id=source.root_session_id,
                parent_session_id=source_session_id,
                forked_from_seq=at_seq,
            )
            record = await self._insert_session_row(
                conn, tenant_id, child, at_seq + len(events), now
            )
            if record is None:
                raise SessionAlreadyExists(session.session_id)
            await self._copy_events(conn, tenant_id, source_session_id, record, at_seq)
            written = await self._insert_events(conn, record, events, first_seq=at_seq + 1)
            await self._copy_snapshot(conn, tenant_id, source_session_id, record, at_seq, now)
            # Only the child's own events count as appended; the copied prefix is not new.
            result = AppendResult(session=record, events=written)
            await self.seal(conn, tenant_id, idempotency, committed_result(result))
            return result

        return await self._write(work)

    async def _copy_snapshot(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        source_id: str,
        child: SessionRecord,
        at_seq: int,
        now: datetime,
    ) -> None:
        """The source's newest snapshot at or below `at_seq`, as the child's `fork`
        snapshot at the same seq (same state, same hash: the child's events up to it are
        the source's)."""
        snap = session_snapshots.c
        query = (
            select(
                snap.tenant_id,
                literal(child.session_id),
                snap.seq,
                literal("fork"),
                snap.state,
                snap.state_hash,
                literal(now, snap.created_at.type),
            )
            .where(snap.tenant_id == tenant_id, snap.session_id == source_id, snap.seq <= at_seq)
            .order_by(snap.seq.desc())
            .limit(1)
        )
        columns = ["tenant_id", "session_id", "seq", "kind", "state", "state_hash", "created_at"]
        await conn.execute(session_snapshots.insert().from_select(columns, query))

    async def _copy_events(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        source_id: str,
        child: SessionRecord,
        at_seq: int,
    ) -> None:
        """Events 1..at_seq of the source into the child, server-side (INSERT ... SELECT),
        with new ids and positions base+1 .. base+at_seq in seq order."""
        if at_seq == 0:
            return
        self.touch(conn, tenant_id, child.session_id, child.last_seq)
        src = session_events.c
        base = await self._reserve_positions(conn, at_seq) - at_seq
        # Every column is copied as it is (a new one too), but these.
        new_values: dict[str, Any] = {
            "session_id": literal(child.session_id),
            # A version-4 UUID made in SQL: a Python function (asr_uuid4) called back once
            # per copied row was a fifth of a large fork.
            "event_id": literal_column(_UUID4_SQL),
            "xact_id": literal(None, BigInteger),
            "position": literal(base, BigInteger) + src.seq,
        }
        columns = [c.name for c in src]
        query = (
            select(*(new_values.get(name, src[name]) for name in columns))
            .where(src.tenant_id == tenant_id, src.session_id == source_id, src.seq <= at_seq)
            .order_by(src.seq)
        )
        await conn.execute(session_events.insert().from_select(columns, query))

    # ------------------------------------------------------------------- runs

    async def start_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        values: dict[str, Any],
        start_events: list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
        held: bool = False,
    ) -> tuple[RunRecord, AppendResult]:
        """The run's row and its first events, with the session claimed for it: one job.

        `held`: made by `hold`'s session, whose caller holds the write lock."""

        async def work(conn: AsyncConnection) -> Any:
            await self.check_live_runs(conn, tenant_id, max_live_runs)
            now = values["created_at"]
            session = await self._claim_session(
                conn, tenant_id, session_id, values["run_id"], len(start_events), now, expected
            )
            first = session.last_seq - len(start_events) + 1
            row = (
                await conn.execute(
                    runs.insert()
                    .values(
                        {
                            **values,
                            "status": "running",
                            "started_at": now,
                            "first_seq": first,
                            "last_seq": session.last_seq,
                        }
                    )
                    .returning(*runs.c)
                )
            ).one()
            written = await self._insert_events(conn, session, start_events, first_seq=first)
            run, started = run_from_row(row), AppendResult(session=session, events=written)
            await self.seal(conn, tenant_id, idempotency, committed_result(started, run.run_id))
            return run, started

        return cast(tuple[RunRecord, AppendResult], await self._write(work, held=held))

    async def claim_run(
        self,
        tenant_id: str,
        run_id: str,
        *,
        owner: str,
        lease_until: datetime,
        events: list[NewEvent],
        oldest_only: bool = False,
    ) -> tuple[RunRecord, AppendResult]:

        async def work(conn: AsyncConnection) -> Any:
            run = await self._get_run(conn, tenant_id, run_id)
            if run is None or run.status != "queued":
                raise RunFenced(f"run {run_id} is not queued")
            if oldest_only and await self._older_queued(conn, run):
                raise RunAlreadyActive(None)
            now = utcnow()
            session = await self._claim_session(
                conn, run.tenant_id, run.session_id, run.run_id, len(events), now
            )
            first = session.last_seq - len(events) + 1
            written = await self._insert_events(conn, session, events, first_seq=first)
            claimed = (
                await conn.execute(
                    update(runs)
                    .where(runs.c.tenant_id == run.tenant_id, runs.c.run_id == run.run_id)
                    .values(
                        status="running",
                        lease_owner=owner,
                        lease_expires_at=lease_until,
                        started_at=now,
                        updated_at=now,
                        first_seq=first,
                        last_seq=session.last_seq,
                    )
                    .returning(*runs.c)
                )
            ).one()
            return run_from_row(claimed), AppendResult(session=session, events=written)

        return await self._write(work)

    async def _claim_session(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        run_id: str,
        n: int,
        now: datetime,
        expected: tuple[int, datetime] | None = None,
    ) -> SessionRecord:
        """Make `run_id` the session's active run and reserve `n` seqs, or raise.

        Raises:
            SessionNotFound, RunAlreadyActive, StaleSession (`expected` (version,
            created_at) given and the session is no longer that).
        """
        stmt = update(sessions).where(
            sessions.c.tenant_id == tenant_id,
            sessions.c.session_id == session_id,
            sessions.c.active_run_id.is_(None),
        )
        if expected is not None:
            stmt = stmt.where(
                sessions.c.version == expected[0], sessions.c.created_at == expected[1]
            )
        stmt = stmt.values(
            active_run_id=run_id,
            status="running",
            last_seq=sessions.c.last_seq + n,
            version=sessions.c.version + 1,
            updated_at=now,
        ).returning(*sessions.c)
        row = (await conn.execute(stmt)).first()
        if row is not None:
            return session_from_row(row)
        active = (
            await conn.execute(
                select(sessions.c.active_run_id).where(
                    sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id
                )
            )
        ).first()
        if active is None:
            raise SessionNotFound(session_id)
        if active.active_run_id is None and expected is not None:
            raise StaleSession(session_id)
        raise RunAlreadyActive(active.active_run_id)

    async def _older_queued(self, conn: AsyncConnection, run: RunRecord) -> bool:
        older = (
            await conn.execute(
                select(runs.c.run_id)
                .where(
                    runs.c.tenant_id == run.tenant_id,
                    runs.c.session_id == run.session_id,
                    runs.c.status == "queued",
                    runs.c.created_at < run.created_at,
                )
                .limit(1)
            )
        ).first()
        return older is not None

    async def append_run_events(
        self,
        tenant_id: str,
        run_id: str,
        *,
        session_id: str,
        epoch: int,
        events: list[NewEvent],
        lease_until: datetime,
        progress: dict[str, Any] | None = None,
        finish: RunFinish | None = None,
    ) -> AppendResult:
        """Three statements: reserve the seqs (and, when finishing, free the session if this
        run holds it), the fenced update of the run row, the events. A fenced run finds no
        run row and rolls the whole transaction back, reservation included."""
        now = utcnow()
        n = len(events)

        async def work(conn: AsyncConnection) -> Any:
            params = {
                "r_tenant": tenant_id,
                "r_session": session_id,
                "r_n": n,
                "r_now": now,
                "r_run": run_id,
            }
            row = (await conn.execute(_reserve_for_run(finish is not None), params)).first()
            if row is None:
                raise SessionNotFound(session_id)
            record = session_from_row(row)
            values: dict[str, Any] = {
                "lease_expires_at": lease_until,
                "updated_at": now,
                "last_seq": record.last_seq,
                **(progress or {}),
            }
            if finish is not None:
                values.update(
                    status=finish.status,
                    stop_reason=finish.stop_reason,
                    output=self.redactor.value(finish.output),
                    error=self.redactor.value(finish.error),
                    finished_at=now,
                    lease_expires_at=None,
                )
            fenced = (
                update(runs)
                .where(
                    runs.c.tenant_id == tenant_id,
                    runs.c.run_id == run_id,
                    runs.c.epoch == epoch,
                    runs.c.status == "running",
                )
                .values(**values)
                .returning(*runs.c)
            )
            ended = (await conn.execute(fenced)).first()
            if ended is None:
                raise RunFenced(f"run {run_id} was taken over")
            written = await self._insert_events(
                conn, record, events, first_seq=record.last_seq - n + 1
            )
            run = run_from_row(ended) if finish is not None else None
            return AppendResult(session=record, events=written, run=run)

        return await self._write(work)

    async def close_fenced_run(
        self, tenant_id: str, run_id: str, *, events: list[NewEvent]
    ) -> AppendResult | None:

        async def work(conn: AsyncConnection) -> Any:
            run = await self._get_run(conn, tenant_id, run_id)
            if run is None or run.status in LIVE:
                return None
            row = (
                await conn.execute(
                    update(sessions)
                    .where(
                        sessions.c.tenant_id == tenant_id,
                        sessions.c.session_id == run.session_id,
                        sessions.c.active_run_id == run_id,
                    )
                    .values(
                        last_seq=sessions.c.last_seq + len(events),
                        version=sessions.c.version + 1,
                        updated_at=utcnow(),
                        active_run_id=None,
                        status="idle",
                    )
                    .returning(*sessions.c)
                )
            ).first()
            if row is None:
                return None  # no longer held by this run: closed already
            record = session_from_row(row)
            written = await self._insert_events(
                conn, record, events, first_seq=record.last_seq - len(events) + 1
            )
            await conn.execute(
                update(runs)
                .where(runs.c.tenant_id == tenant_id, runs.c.run_id == run_id)
                .values(last_seq=record.last_seq)
            )
            return AppendResult(session=record, events=written)

        return await self._write(work)


class _SqliteHold:
    """A session held by `SqliteStore.hold`: reads through the pool, writes through the
    writer without taking the lock its caller holds."""

    def __init__(self, store: SqliteStore, tenant_id: str, session_id: str) -> None:
        self.store = store
        self.key = (tenant_id, session_id)

    async def load(self, *, base: tuple[datetime, int] | None = None) -> SessionLoad:
        found = await self.store.load_session(*self.key, base=base)
        if found is None:
            raise SessionNotFound(self.key[1])
        return found

    async def append_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        events: list[NewEvent],
        expected_seq: int | None = None,
        expected_version: int | None = None,
        metadata_patch: dict[str, Any] | None = None,
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        self._check(tenant_id, session_id)
        return await self.store.append_events(
            tenant_id, session_id, events=events, expected_seq=expected_seq,
            expected_version=expected_version, metadata_patch=metadata_patch,
            snapshot=snapshot, idempotency=idempotency, held=True,
        )  # fmt: skip

    async def start_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        values: dict[str, Any],
        start_events: list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> tuple[RunRecord, AppendResult]:
        self._check(tenant_id, session_id)
        return await self.store.start_run(
            tenant_id, session_id, values=values, start_events=start_events,
            max_live_runs=max_live_runs, expected=expected, idempotency=idempotency,
            held=True,
        )  # fmt: skip

    def _check(self, tenant_id: str, session_id: str) -> None:
        if (tenant_id, session_id) != self.key:
            raise ValueError("a held session writes to itself only")
