"""`PostgresLedger`: every ledger write that inserts events is one stored-function call.

Creating and forking a session and an append (with or without a metadata patch or a
snapshot): each is one call of its function in `sql/*.sql` (see `calls.py`), one round trip
and one commit, with the tenant scope, the seq reservation under the session row lock, the
events, a snapshot and the Idempotency-Key all inside it. Appends go through group commit
(`group_commit.py`): concurrent appends share one call and one commit. Wake-ups go out
after the commit (`app.store.announce`).

Reads are the shared SQL of `LedgerStore`, except two that this database does in its own
way: the event read goes through the bare driver inside the read transaction, and the
tenant-wide timeline reads in (transaction id, position) order below the oldest running
transaction, so that a cursor never steps over an event that commits late.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnClause, bindparam, literal_column, select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.errors import SeqConflict, SessionNotFound, VersionConflict
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
from app.store.base import (
    event_from_mapping,
    event_from_row,
    events_from_rows,
    note_appended,
    session_from_mapping,
    session_from_row,
    utcnow,
)
from app.store.idempotency import IdempotencyStore
from app.store.ledger import EVENT_COLUMN_LIST, HISTORY_PRUNED, LedgerStore
from app.store.payloads import Payloads
from app.store.postgres.calls import APPEND_FRESH, EventArrays, Refused, call_in, refusal
from app.store.postgres.database import PostgresDatabase
from app.store.postgres.runs import PostgresRuns
from app.store.postgres.writes import SESSION_COLUMNS, SPAN, FunctionWrites
from app.store.runs import json_text
from app.store.tables import session_events, sessions
from app.tracing import span

_T = TypeVar("_T")
# A prune's marker: the writers' shared insert, in the prune's own transaction.
_INSERT_MARKER = text(
    "SELECT asr_insert_events(:tenant, :session, :seq, pg_current_xact_id()::text::bigint,"
    " now(), CAST(:events AS jsonb))"
)

# The session row, locked against every other writer until the transaction ends (`hold`).
_LOCK_SESSION = (
    select(sessions)
    .where(
        sessions.c.tenant_id == bindparam("g_tenant"),
        sessions.c.session_id == bindparam("g_session"),
    )
    .with_for_update()
)


class PostgresLedger(LedgerStore):
    """The ledger's writes as stored-function calls; two reads of its own (the tail, the
    tenant timeline)."""

    def __init__(
        self,
        db: PostgresDatabase,
        payloads: Payloads,
        idempotency: IdempotencyStore,
        *,
        writes: FunctionWrites,
        runs: PostgresRuns,
    ) -> None:
        super().__init__(db, payloads, idempotency)
        self.writes = writes
        # A held session starts runs too (`_PostgresHold.start_run`).
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
        self.payloads.check_append(events, 0, snapshot)
        arrays = self.writes.arrays(events)
        now = utcnow()
        with span("store.write", **SPAN):
            row = await self.writes.functions.call(
                "asr_create_session",
                columns=SESSION_COLUMNS,
                p_tenant=tenant_id,
                p_session=session.session_id,
                p_root=session.root_session_id,
                p_parent=session.parent_session_id,
                p_forked_from=session.forked_from_seq,
                p_metadata=json_text(self.payloads.redact(session.metadata)),
                p_agent=json_text(self.payloads.redact(session.agent)),
                p_binding=json_text(self.payloads.redact(session.binding)),
                p_now=now,
                **arrays.params(),
                **self.writes.snapshot(snapshot),
                **self.writes.key(idempotency),
            )
        return self.writes.committed(row, arrays, now)

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
        """One call of `asr_fork_session`: the prefix and the source's nearest snapshot are
        copied inside the database; only the child's own events travel."""
        arrays = self.writes.arrays(events)
        now = utcnow()
        with span("store.write", **SPAN):
            row = await self.writes.functions.call(
                "asr_fork_session",
                columns=SESSION_COLUMNS,
                p_tenant=tenant_id,
                p_source=source_session_id,
                p_at_seq=at_seq,
                p_session=session.session_id,
                p_metadata=json_text(self.payloads.redact(session.metadata)),
                p_agent=json_text(self.payloads.redact(session.agent)),
                p_binding=json_text(self.payloads.redact(session.binding)),
                p_now=now,
                **arrays.params(),
                **self.writes.key(idempotency),
            )
        # The wake-up names the child's last seq, so it covers the copied prefix too.
        return self.writes.committed(row, arrays, now)

    # ----------------------------------------------------------------- events

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
        """One call of `asr_append_events` (through group commit).

        A metadata patch is merged under the session's lock (`hold`): onto the row as it is
        when no other writer can change it, so concurrent patches queue and none is lost.
        """
        if metadata_patch is not None:
            async with self.hold(tenant_id, session_id) as held:
                return await held.append_events(
                    tenant_id, session_id, events=events, expected_seq=expected_seq,
                    expected_version=expected_version, metadata_patch=metadata_patch,
                    snapshot=snapshot, idempotency=idempotency,
                )  # fmt: skip
        self.payloads.check_append(events, expected_seq, snapshot)
        arrays = self.writes.arrays(events)
        return await self._append(
            tenant_id, session_id, arrays, expected_seq, expected_version, None, snapshot,
            idempotency,
        )  # fmt: skip

    async def _prune_transaction(
        self, tenant_id: str, work: Callable[[AsyncConnection], Coroutine[Any, Any, _T]]
    ) -> _T:
        async with self.db.write(tenant_id) as conn:
            return await work(conn)

    async def _insert_marker(
        self, conn: AsyncConnection, record: SessionRecord, seq: int, marker: NewEvent
    ) -> None:
        """Through `asr_insert_events`, the function that inserts one session's events, as
        one event ending at `seq` (its outbox rows included)."""
        clean, _ = self.payloads.persistable_json(marker.payload)
        event = {
            "id": str(uuid.uuid4()),
            "type": str(marker.type),
            "payload": clean,
            "run_id": marker.run_id,
            "turn_id": marker.turn_id,
        }
        await conn.execute(
            _INSERT_MARKER,
            {
                "tenant": record.tenant_id,
                "session": record.session_id,
                "seq": seq,
                "events": json_text([event]),
            },
        )

    @asynccontextmanager
    async def hold(self, tenant_id: str, session_id: str) -> AsyncIterator[HeldSession]:
        """A write transaction that has locked the session's row (`FOR UPDATE`): every
        other writer of the session, on any replica, waits on that lock until it ends."""
        async with self.db.write(tenant_id) as conn:
            row = (
                await conn.execute(_LOCK_SESSION, {"g_tenant": tenant_id, "g_session": session_id})
            ).first()
            if row is None:
                raise SessionNotFound(session_id)
            yield _PostgresHold(self, conn, session_from_row(row))

    async def _append(
        self,
        tenant_id: str,
        session_id: str,
        arrays: EventArrays,
        expected_seq: int | None,
        expected_version: int | None,
        metadata: dict[str, Any] | None,
        snapshot: tuple[str, dict[str, Any]] | None,
        idempotency: IdempotencyToken | None,
        conn: AsyncConnection | None = None,
    ) -> AppendResult:
        """`asr_append_events`: through group commit, or in `conn`'s open transaction (a
        held session's write, announced when that transaction commits)."""
        now = utcnow()
        snap = self.writes.snapshot(snapshot)
        args = (
            tenant_id,
            session_id,
            expected_seq,
            expected_version,
            now,
            arrays.text,
            *self.idempotency.idempotency_args(idempotency),
            json_text(metadata),
            snap["p_snapshot_kind"],
            snap["p_snapshot_state"],
            snap["p_snapshot_hash"],
        )
        with span("store.write", **SPAN):
            try:
                if conn is None:
                    row = await self.writes.append_groups.append(args)
                else:
                    row = await call_in(conn, APPEND_FRESH, args)  # ids made just now
            except Refused as refused:
                raise refusal(refused.cause, session_id=session_id) from None
        if row is None:
            raise SessionNotFound(session_id)
        if not row["appended"]:
            if expected_version is not None and row["version"] != expected_version:
                raise VersionConflict(expected_version, row["version"])
            raise SeqConflict(expected_seq or 0, row["last_seq"])
        record = session_from_mapping(row)
        written = arrays.written(session_id, row["first_seq"], now, row["positions"] or [])
        if conn is None:
            self.db.committed(tenant_id, session_id, written)
        else:
            self.db.touch(conn, tenant_id, session_id, record.last_seq, written)
            note_appended(conn, [e.type for e in written])
        return AppendResult(session=record, events=written)

    async def load_session(
        self,
        tenant_id: str,
        session_id: str,
        *,
        base: tuple[datetime, int] | None = None,
        lagging: bool = False,
    ) -> SessionLoad | None:
        """With a usable `base` (the caller's cache), one call of `asr_session_tail` on the
        primary: one round trip, whose tail read is bounded by the last seq of the row it
        read. A cold load (no base) for display (`lagging`) may go to a read replica."""
        if base is not None:
            row = await self.writes.functions.call(
                "asr_session_tail",
                columns="o_found, o_session, o_events",
                p_tenant=tenant_id,
                p_session=session_id,
                p_created_at=base[0],
                p_after=base[1],
            )
            if not row["o_found"]:
                return None
            if row["o_events"] is not None:
                tail = [event_from_mapping(e) for e in row["o_events"]]
                if not tail or tail[0].type != HISTORY_PRUNED:
                    record = session_from_mapping(row["o_session"])
                    return SessionLoad(session=record, from_base=True, snapshot=None, tail=tail)
                # The cached state predates a prune: read from the snapshot instead.
                return await super().load_session(tenant_id, session_id)
        return await super().load_session(tenant_id, session_id, base=base, lagging=lagging)

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
        """The bare driver inside the same transaction: no SQLAlchemy row processing on the
        one read whose size grows with the ledger (full histories, long tails)."""
        args: list[Any] = [tenant_id, session_id, after_seq]
        where = ["tenant_id = $1", "session_id = $2", "seq > $3"]
        for column, op, value in (
            ("seq", "<=", until_seq),
            ("type", "= ANY", types or None),
            ("run_id", "=", run_id),
        ):
            if value is not None:
                args.append(value)
                rhs = f"(${len(args)})" if op == "= ANY" else f"${len(args)}"
                where.append(f"{column} {op} {rhs}")
        sql = (
            f"SELECT {EVENT_COLUMN_LIST} FROM session_events"
            f" WHERE {' AND '.join(where)} ORDER BY seq"
        )
        if limit is not None:
            args.append(limit)
            sql += f" LIMIT ${len(args)}"
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None  # the checked-out connection's asyncpg one
        return events_from_rows(await driver.fetch(sql, *args))

    async def list_tenant_events(
        self,
        tenant_id: str,
        *,
        after: TenantCursor,
        types: list[str] | None = None,
        limit: int = 500,
    ) -> TenantPage:
        """Positions come from an identity, which is not commit order, so rows are read in
        (xact_id, position) order and passed only while their transaction is older than the
        oldest one still running (`pg_snapshot_xmin`). Such a prefix can no longer grow, so a
        cursor never steps over a row that commits late."""
        ev = session_events.c
        stmt = select(session_events).where(ev.tenant_id == tenant_id)
        if types:
            stmt = stmt.where(ev.type.in_(types))
        safe_below: ColumnClause[int]
        safe_below = literal_column("pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        stmt = (
            stmt.add_columns(safe_below.label("safe_below"))
            .where(tuple_(ev.xact_id, ev.position) > tuple_(after.xact_id, after.position))
            .order_by(ev.xact_id, ev.position)
            .limit(limit + 1)
        )
        async with self.db.read(tenant_id) as conn:
            rows = (await conn.execute(stmt)).all()
        safe = [r for r in rows if r.xact_id < r.safe_below]  # a prefix: ordered by xact_id
        entries = [(event_from_row(r), TenantCursor(r.xact_id, r.position)) for r in safe]
        return TenantPage(
            entries=entries[:limit],
            more=len(safe) > limit,
            pending=len(safe) < len(rows),
        )


class _PostgresHold:
    """A session held by `PostgresLedger.hold`: its writes are the store's, made in the
    transaction that holds the row lock; a metadata patch is merged onto the row as the
    lock found it (or as this hold's own last write left it)."""

    def __init__(self, store: PostgresLedger, conn: AsyncConnection, record: SessionRecord):
        self.store = store
        self.conn = conn
        self.record = record

    async def load(self, *, base: tuple[datetime, int] | None = None) -> SessionLoad:
        return await self.store._load(self.conn, self.record, base)

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
        store = self.store
        store.payloads.check_append(events, expected_seq, snapshot)
        if expected_version is not None and expected_version != self.record.version:
            raise VersionConflict(expected_version, self.record.version)
        merged = None
        if metadata_patch is not None:
            merged = store.payloads.redact(merge_patch(self.record.metadata, metadata_patch))
            check_metadata_size(merged, limit=store.payloads.max_metadata_bytes)
        arrays = store.writes.arrays(events)
        result = await store._append(
            tenant_id, session_id, arrays, expected_seq, expected_version, merged, snapshot,
            idempotency, self.conn,
        )  # fmt: skip
        self.record = result.session
        return result

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
        record, started = await self.store.runs.start_run(
            tenant_id, session_id, run=run, start_events=start_events,
            max_live_runs=max_live_runs, expected=expected, idempotency=idempotency,
            conn=self.conn,
        )  # fmt: skip
        self.record = started.session
        return record, started

    def _check(self, tenant_id: str, session_id: str) -> None:
        if (tenant_id, session_id) != (self.record.tenant_id, self.record.session_id):
            raise ValueError("a held session writes to itself only")
