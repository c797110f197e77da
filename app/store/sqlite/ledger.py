"""`SqliteLedger`: the ledger's writes as SQLAlchemy Core statements and driver SQL.

Every write that inserts events keeps the ledger's rule: the UPDATE of the session row
that bumps `last_seq` reserves the seqs, and the events are inserted in the same
transaction (one job of the single writer: `jobs.py`); an Idempotency-Key is sealed in it
too. Under that single writer, position order is commit order, so the tenant timeline
needs no transaction ids.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from sqlalchemy import BigInteger, literal, literal_column, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.errors import (
    InvalidForkPoint,
    SeqConflict,
    SessionAlreadyExists,
    SessionNotFound,
    VersionConflict,
)
from app.runtime.ports import (
    AppendResult,
    HeldSession,
    IdempotencyToken,
    NewRun,
    NewSession,
    RunRecord,
    SessionLoad,
    SessionRecord,
    TenantCursor,
    TenantPage,
)
from app.runtime.session.events import Event, NewEvent
from app.runtime.session.metadata import check_metadata_size, merge_patch
from app.store import json_text
from app.store.base import event_from_row, events_from_rows, session_from_row, utcnow
from app.store.idempotency import IdempotencyStore, committed_result
from app.store.ledger import EVENT_COLUMN_LIST, LedgerStore, SnapshotRow
from app.store.payloads import Payloads
from app.store.sqlite.database import SqliteDatabase
from app.store.sqlite.jobs import CREATED_AT, PAYLOAD, SESSION_COLUMNS, Jobs, reserve_sql
from app.store.sqlite.runs import SqliteRuns
from app.store.sqlite.writer import driver, session_from_tuple, sqlite_time
from app.store.tables import session_events, session_snapshots, sessions

_T = TypeVar("_T")
_GET_SESSION = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = ? AND session_id = ?"
_SNAPSHOT_ROW = (
    "SELECT seq, kind, CAST(state AS BLOB), state_hash, created_at FROM session_snapshots"
    " WHERE tenant_id = ? AND session_id = ?"
)
_NEWEST_SNAPSHOT = f"{_SNAPSHOT_ROW} ORDER BY seq DESC LIMIT 1"
_NEWEST_SNAPSHOT_UPTO = f"{_SNAPSHOT_ROW} AND seq <= ? ORDER BY seq DESC LIMIT 1"


async def _fetch(conn: AsyncConnection, sql: str, args: Sequence[Any]) -> list[Any]:
    """`sql`'s rows, read by the bare driver inside `conn`'s transaction, as on PostgreSQL:
    one trip to aiosqlite's thread, where a SQLAlchemy cursor takes four (open, execute,
    fetch, close) besides its per-row processing (its JSON and DATETIME types), which was
    most of a long read. The callers decode the columns they read."""
    driver = (await conn.get_raw_connection()).driver_connection
    assert driver is not None  # the checked-out connection's aiosqlite one
    return list(await driver.execute_fetchall(sql, args))


# A copied event's id: a version-7 UUID (RFC 9562) in its text form, made by one printf per
# row. Its first 48 bits are the fork's time in milliseconds, the next 26 (in rand_a and
# rand_b's leading bits, the RFC's "dedicated counter") the event's seq, the last 48 random
# (from random(), the generator randomblob() uses). A fork's ids are thus adjacent in the
# (tenant_id, event_id) index and land on a few hundred of its pages; random (version 4)
# ids touched a page per copied row, and writing those pages was most of a large fork's
# time once the table held a million events.
_UUID7_SQL = (
    "printf('%08x-%04x-7%03x-%04x-%012x', {ms_high}, {ms_low}, (seq >> 14) & 4095,"
    " 32768 | (seq & 16383), random() & 281474976710655)"
)


def _uuid7_sql(now: datetime) -> str:
    """`_UUID7_SQL` for a fork at `now` (integers only are put into the text)."""
    ms = int(now.timestamp() * 1000)
    return _UUID7_SQL.format(ms_high=ms >> 16, ms_low=ms & 65535)


class SqliteLedger(LedgerStore):
    """The ledger's writes as jobs of the single writer; its reads through the pool."""

    def __init__(
        self,
        db: SqliteDatabase,
        payloads: Payloads,
        idempotency: IdempotencyStore,
        *,
        jobs: Jobs,
        runs: SqliteRuns,
    ) -> None:
        super().__init__(db, payloads, idempotency)
        self.db: SqliteDatabase = db
        self.jobs = jobs
        # A held session starts runs too (`_SqliteHold.start_run`).
        self.runs = runs

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
            written = await self.jobs.insert_events(conn, record, events, first_seq=1)
            if snapshot is not None:
                await self._insert_snapshot(conn, record, snapshot[0], snapshot[1], now)
            result = AppendResult(session=record, events=written)
            await self.idempotency.seal(conn, tenant_id, idempotency, committed_result(result))
            return result

        return cast(AppendResult, await self.jobs.run(work))

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
            self.db.insert(sessions)
            .values(
                tenant_id=tenant_id,
                session_id=session.session_id,
                root_session_id=session.root_session_id or session.session_id,
                parent_session_id=session.parent_session_id,
                forked_from_seq=session.forked_from_seq,
                status="idle",
                metadata=self.payloads.redact(session.metadata),
                agent=self.payloads.redact(session.agent),
                binding=self.payloads.redact(session.binding),
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
        self.payloads.check_append(events, expected_seq, snapshot)
        n = len(events)

        async def work(conn: AsyncConnection) -> AppendResult:
            record = await self._reserve(
                conn, tenant_id, session_id, n, expected_seq, expected_version
            )
            if metadata_patch is not None:
                record = await self._patch_metadata(conn, record, metadata_patch)
            written = await self.jobs.insert_events(
                conn, record, events, first_seq=record.last_seq - n + 1
            )
            if snapshot is not None:
                await self._insert_snapshot(conn, record, snapshot[0], snapshot[1], utcnow())
            result = AppendResult(session=record, events=written)
            await self.idempotency.seal(conn, tenant_id, idempotency, committed_result(result))
            return result

        return cast(AppendResult, await self.jobs.run(work, held=held))

    async def _prune_transaction(
        self, tenant_id: str, work: Callable[[AsyncConnection], Coroutine[Any, Any, _T]]
    ) -> _T:
        """A job of the single writer, like every write that inserts events."""
        return cast(_T, await self.jobs.run(work))

    async def _insert_marker(
        self, conn: AsyncConnection, record: SessionRecord, seq: int, marker: NewEvent
    ) -> None:
        await self.jobs.insert_events(conn, record, [marker], first_seq=seq)

    @asynccontextmanager
    async def hold(self, tenant_id: str, session_id: str) -> AsyncIterator[HeldSession]:
        """The write lock of this process, which every SQLite write takes (the writer's
        transactions and the pool's): SQLite has one writer, and one process serves it.
        Reads go on meanwhile (WAL)."""
        async with self.db.write_lock:
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
        sql = reserve_sql(by_seq=expected_seq is not None, by_version=expected_version is not None)
        params = {
            "n": n,
            "now": sqlite_time(utcnow()),
            "tenant": tenant_id,
            "session": session_id,
            "seq": expected_seq,
            "version": expected_version,
        }
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
        merged = self.payloads.redact(merge_patch(record.metadata, patch))
        check_metadata_size(merged, limit=self.payloads.max_metadata_bytes)
        await conn.execute(
            update(sessions)
            .where(
                sessions.c.tenant_id == record.tenant_id,
                sessions.c.session_id == record.session_id,
            )
            .values(metadata=merged)
        )
        return replace(record, metadata=merged)

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
        await conn.execute(
            session_snapshots.insert().values(
                tenant_id=session.tenant_id,
                session_id=session.session_id,
                seq=session.last_seq,
                kind=kind,
                **self._snapshot_columns(self.payloads.redact(state)),
                created_at=now,
            )
        )

    async def _session(
        self, conn: AsyncConnection, tenant_id: str, session_id: str
    ) -> SessionRecord | None:
        rows = await _fetch(conn, _GET_SESSION, (tenant_id, session_id))
        return session_from_tuple(rows[0]) if rows else None

    async def _snapshot_row(
        self, conn: AsyncConnection, tenant_id: str, session_id: str, bound: int | None
    ) -> SnapshotRow | None:
        if bound is None:
            rows = await _fetch(conn, _NEWEST_SNAPSHOT, (tenant_id, session_id))
        else:
            rows = await _fetch(conn, _NEWEST_SNAPSHOT_UPTO, (tenant_id, session_id, bound))
        if not rows:
            return None
        seq, kind, text, digest, created = rows[0]
        return SnapshotRow(seq, kind, text, digest, datetime.fromisoformat(created))

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
        rows = await _fetch(conn, sql, args)
        loads, parse = json_text.loads, datetime.fromisoformat
        for i, row in enumerate(rows):
            values = list(row)
            values[PAYLOAD] = loads(values[PAYLOAD])
            values[CREATED_AT] = parse(values[CREATED_AT]).replace(tzinfo=UTC)
            rows[i] = values  # a row is let go as it is replaced (see `events_from_rows`)
        return events_from_rows(rows)

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
        async with self.db.read(tenant_id) as conn:
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
        with INSERT ... SELECT (see `LedgerPort.fork_session`); only the child's own
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
            await self._copy_events(conn, tenant_id, source_session_id, record, at_seq, now)
            written = await self.jobs.insert_events(conn, record, events, first_seq=at_seq + 1)
            await self._copy_snapshot(conn, tenant_id, source_session_id, record, at_seq, now)
            # Only the child's own events count as appended; the copied prefix is not new.
            result = AppendResult(session=record, events=written)
            await self.idempotency.seal(conn, tenant_id, idempotency, committed_result(result))
            return result

        return await self.jobs.run(work)

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
        now: datetime,
    ) -> None:
        """Events 1..at_seq of the source into the child, server-side (INSERT ... SELECT),
        with new ids (`_UUID7_SQL`) and positions base+1 .. base+at_seq in seq order."""
        if at_seq == 0:
            return
        self.db.touch(conn, tenant_id, child.session_id, child.last_seq)
        src = session_events.c
        base = await self.jobs.reserve_positions(conn, at_seq) - at_seq
        # Every column is copied as it is (a new one too), but these.
        new_values: dict[str, Any] = {
            "session_id": literal(child.session_id),
            # Made in SQL: a Python function (asr_uuid4) called back once per copied row was
            # a fifth of a large fork.
            "event_id": literal_column(_uuid7_sql(now)),
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


class _SqliteHold:
    """A session held by `SqliteLedger.hold`: reads through the pool, writes through the
    writer without taking the lock its caller holds."""

    def __init__(self, store: SqliteLedger, tenant_id: str, session_id: str) -> None:
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
        run: NewRun,
        start_events: list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> tuple[RunRecord, AppendResult]:
        self._check(tenant_id, session_id)
        return await self.store.runs.start_run(
            tenant_id, session_id, run=run, start_events=start_events,
            max_live_runs=max_live_runs, expected=expected, idempotency=idempotency,
            held=True,
        )  # fmt: skip

    def _check(self, tenant_id: str, session_id: str) -> None:
        if (tenant_id, session_id) != self.key:
            raise ValueError("a held session writes to itself only")
