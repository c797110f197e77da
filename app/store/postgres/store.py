"""`PostgresStore`: every write that inserts events is one stored-function call.

Creating and forking a session, an append (with or without a metadata patch or a
snapshot), a run's start, claim, steps and close: each is one call of its function in
`sql/*.sql` (see `calls.py`), one round trip and one commit, with the tenant scope, the
seq reservation under the session row lock, the events, a snapshot and the Idempotency-Key
all inside it. Appends go through group commit (`group_commit.py`): concurrent appends
share one call and one commit. Wake-ups go out after the commit (`app.store.announce`).

Reads are the shared SQL of `LedgerStore`, except two that this database does in its own
way: the event read goes through the bare driver inside the read transaction, and the
tenant-wide timeline reads in (transaction id, position) order below the oldest running
transaction, so that a cursor never steps over an event that commits late. The work that
spans tenants is `PostgresCrossTenant`'s (`cross_tenant.py`): SECURITY DEFINER functions.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import ColumnClause, bindparam, literal_column, select, text, tuple_
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.runtime.errors import (
    IdempotentReplay,
    SeqConflict,
    SessionNotFound,
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
from app.store.announce import NOTIFY_INTERVAL, Notifier
from app.store.base import (
    event_from_mapping,
    event_from_row,
    note_appended,
    session_from_mapping,
    session_from_row,
    utcnow,
)
from app.store.engine import behind_pgbouncer
from app.store.ledger import EVENT_COLUMN_LIST
from app.store.postgres.calls import (
    APPEND_EVENTS,
    EventArrays,
    Functions,
    Refused,
    call_in,
    refusal,
)
from app.store.postgres.cross_tenant import PostgresCrossTenant
from app.store.postgres.group_commit import AppendGroups
from app.store.runs import json_text, run_from_mapping
from app.store.store import AgentSessionStore
from app.store.tables import session_events, sessions
from app.tracing import span

# `SET LOCAL`, as a function so the tenant can be a bind parameter: it ends with the
# transaction, so a pooled connection never carries one request's tenant into the next.
_SET_TENANT = text("SELECT set_config('app.tenant_id', :tenant, true)")
_SEAL = text(
    "SELECT asr_seal_idempotency(p_tenant => :tenant, p_key => :key, p_hash => :hash,"
    " p_now => :now, p_expires => :expires, p_result => CAST(:result AS jsonb))"
)
_SPAN = {"db.system": "postgresql"}
_RUN_COLUMNS = "o_session, o_run, o_xact_id, o_positions"
_SESSION_COLUMNS = "o_session, o_xact_id, o_positions"
# The session row, locked against every other writer until the transaction ends (`hold`).
_LOCK_SESSION = (
    select(sessions)
    .where(
        sessions.c.tenant_id == bindparam("g_tenant"),
        sessions.c.session_id == bindparam("g_session"),
    )
    .with_for_update()
)


class PostgresStore(PostgresCrossTenant, AgentSessionStore):
    dialect: ClassVar[str] = "postgresql"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        notify: bool = True,
        notify_interval: float = NOTIFY_INTERVAL,
        pgbouncer: bool | None = None,
        **options: Any,
    ) -> None:
        # Behind PgBouncer in transaction pooling mode (None: as `make_engine` marked the
        # engine), statements sent with the bare driver must run in an explicit transaction.
        self.pgbouncer = behind_pgbouncer(engine) if pgbouncer is None else pgbouncer
        notifier = (
            Notifier(engine, in_transaction=self.pgbouncer, min_interval=notify_interval)
            if notify
            else None
        )
        super().__init__(engine, notifier=notifier, **options)
        self.functions = Functions(engine, in_transaction=self.pgbouncer)
        self.append_groups = AppendGroups(engine, in_transaction=self.pgbouncer)

    def insert(self, table: Any) -> Any:
        return postgresql.insert(table)

    async def _scope(self, conn: AsyncConnection, tenant_id: str) -> None:
        await conn.execute(_SET_TENANT, {"tenant": tenant_id})

    def _key(self, token: IdempotencyToken | None) -> dict[str, Any]:
        key, digest, expires = self.idempotency_args(token)
        return {"p_idem_key": key, "p_idem_hash": digest, "p_idem_expires": expires}

    def _snapshot(self, snapshot: tuple[str, dict[str, Any]] | None) -> dict[str, Any]:
        if snapshot is None:
            return {"p_snapshot_kind": None, "p_snapshot_state": None, "p_snapshot_hash": None}
        state, digest = self.persistable_snapshot(snapshot[1])
        return {
            "p_snapshot_kind": snapshot[0],
            "p_snapshot_state": json_text(state),
            "p_snapshot_hash": digest,
        }

    async def seal(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        token: IdempotencyToken | None,
        result: dict[str, Any],
    ) -> None:
        """`asr_seal_idempotency` inside the open transaction `conn` (a queued run's start,
        the one keyed write here that is not a function call of its own)."""
        if token is None:
            return
        key, digest, expires = self.idempotency_args(token)
        try:
            await conn.execute(
                _SEAL,
                {
                    "tenant": tenant_id,
                    "key": key,
                    "hash": digest,
                    "now": utcnow(),
                    "expires": expires,
                    "result": json.dumps(result),
                },
            )
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) == "AS006":
                raise IdempotentReplay(token.key) from None
            raise

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
        self.check_append(events, 0, snapshot)
        arrays = EventArrays.of(events, self._persistable_json)
        now = utcnow()
        with span("store.write", **_SPAN):
            row = await self.functions.call(
                "asr_create_session",
                columns=_SESSION_COLUMNS,
                p_tenant=tenant_id,
                p_session=session.session_id,
                p_root=session.root_session_id,
                p_parent=session.parent_session_id,
                p_forked_from=session.forked_from_seq,
                p_metadata=json_text(self.redactor.value(session.metadata)),
                p_agent=json_text(self.redactor.value(session.agent)),
                p_binding=json_text(self.redactor.value(session.binding)),
                p_now=now,
                **arrays.params(),
                **self._snapshot(snapshot),
                **self._key(idempotency),
            )
        return self._committed(row, arrays, now)

    def _committed(self, row: Any, arrays: EventArrays, now: datetime) -> AppendResult:
        """What a function call committed: its session row (`o_session`) and `arrays` as
        events ending at the row's last seq; live readers are woken and metrics told."""
        record = session_from_mapping(row["o_session"])
        first = record.last_seq - len(arrays.ids) + 1
        written = arrays.written(record.session_id, first, now, row["o_positions"] or [])
        self.committed(record.tenant_id, record.session_id, written)
        return AppendResult(session=record, events=written)

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
        arrays = EventArrays.of(events, self._persistable_json)
        now = utcnow()
        with span("store.write", **_SPAN):
            row = await self.functions.call(
                "asr_fork_session",
                columns=_SESSION_COLUMNS,
                p_tenant=tenant_id,
                p_source=source_session_id,
                p_at_seq=at_seq,
                p_session=session.session_id,
                p_metadata=json_text(self.redactor.value(session.metadata)),
                p_agent=json_text(self.redactor.value(session.agent)),
                p_binding=json_text(self.redactor.value(session.binding)),
                p_now=now,
                **arrays.params(),
                **self._key(idempotency),
            )
        # The wake-up names the child's last seq, so it covers the copied prefix too.
        return self._committed(row, arrays, now)

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
        self.check_append(events, expected_seq, snapshot)
        arrays = EventArrays.of(events, self._persistable_json)
        return await self._append(
            tenant_id, session_id, arrays, expected_seq, expected_version, None, snapshot,
            idempotency,
        )  # fmt: skip

    @asynccontextmanager
    async def hold(self, tenant_id: str, session_id: str) -> AsyncIterator[HeldSession]:
        """A write transaction that has locked the session's row (`FOR UPDATE`): every
        other writer of the session, on any replica, waits on that lock until it ends."""
        async with self.write(tenant_id) as conn:
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
        snap = self._snapshot(snapshot)
        args = (
            tenant_id,
            session_id,
            expected_seq,
            expected_version,
            now,
            arrays.text,
            *self.idempotency_args(idempotency),
            json_text(metadata),
            snap["p_snapshot_kind"],
            snap["p_snapshot_state"],
            snap["p_snapshot_hash"],
        )
        with span("store.write", **_SPAN):
            try:
                if conn is None:
                    row = await self.append_groups.append(args)
                else:
                    row = await call_in(conn, APPEND_EVENTS, args)
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
            self.committed(tenant_id, session_id, written)
        else:
            self.touch(conn, tenant_id, session_id, record.last_seq, written)
            note_appended(conn, [e.type for e in written])
        return AppendResult(session=record, events=written)

    async def load_session(
        self, tenant_id: str, session_id: str, *, base: tuple[datetime, int] | None = None
    ) -> SessionLoad | None:
        """With a usable `base` (the caller's cache), one call of `asr_session_tail`: one
        round trip, whose tail read is bounded by the last seq of the row it read."""
        if base is not None:
            row = await self.functions.call(
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
                record = session_from_mapping(row["o_session"])
                return SessionLoad(session=record, from_base=True, snapshot=None, tail=tail)
        return await super().load_session(tenant_id, session_id, base=base)

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
        return [Event(*row) for row in await driver.fetch(sql, *args)]

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
        async with self.read(tenant_id) as conn:
            rows = (await conn.execute(stmt)).all()
        safe = [r for r in rows if r.xact_id < r.safe_below]  # a prefix: ordered by xact_id
        entries = [(event_from_row(r), TenantCursor(r.xact_id, r.position)) for r in safe]
        return TenantPage(
            entries=entries[:limit],
            more=len(safe) > limit,
            pending=len(safe) < len(rows),
        )

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
        conn: AsyncConnection | None = None,
    ) -> tuple[RunRecord, AppendResult]:
        """One call of `asr_run_start`; in `conn`'s open transaction when given (a held
        session's write, announced when that transaction commits)."""
        arrays = EventArrays.of(start_events, self._persistable_json)
        now = values["created_at"]
        version, created_at = expected or (None, None)
        with span("store.write", **_SPAN):
            row = await self.functions.call(
                "asr_run_start",
                columns=_RUN_COLUMNS,
                max_live=max_live_runs,
                conn=conn,
                p_tenant=tenant_id,
                p_session=session_id,
                p_run=values["run_id"],
                p_max_live=max_live_runs,
                p_now=now,
                p_owner=values["lease_owner"],
                p_lease=values["lease_expires_at"],
                p_input=json_text(values["input"]),
                p_options=json_text(values["options"]),
                p_expected_version=version,
                p_expected_created_at=created_at,
                **arrays.params(),
                **self._key(idempotency),
            )
        if conn is None:
            return self._run_result(row, arrays, now)
        run, started = run_from_mapping(row["o_run"]), self._held_result(conn, row, arrays, now)
        return run, started

    def _held_result(
        self, conn: AsyncConnection, row: Any, arrays: EventArrays, now: datetime
    ) -> AppendResult:
        """`_committed` for a call in a held transaction: announced when it commits."""
        record = session_from_mapping(row["o_session"])
        first = record.last_seq - len(arrays.ids) + 1
        written = arrays.written(record.session_id, first, now, row["o_positions"] or [])
        self.touch(conn, record.tenant_id, record.session_id, record.last_seq, written)
        note_appended(conn, [e.type for e in written])
        return AppendResult(session=record, events=written)

    def _run_result(
        self, row: Any, arrays: EventArrays, now: datetime
    ) -> tuple[RunRecord, AppendResult]:
        return run_from_mapping(row["o_run"]), self._committed(row, arrays, now)

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
        arrays = EventArrays.of(events, self._persistable_json)
        now = utcnow()
        with span("store.write", **_SPAN):
            row = await self.functions.call(
                "asr_run_claim",
                columns=_RUN_COLUMNS,
                p_tenant=tenant_id,
                p_run=run_id,
                p_owner=owner,
                p_lease=lease_until,
                p_now=now,
                p_oldest_only=oldest_only,
                **arrays.params(),
            )
        return self._run_result(row, arrays, now)

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
        arrays = EventArrays.of(events, self._persistable_json)
        now = utcnow()
        progress = progress or {}
        with span("store.write", **_SPAN):
            row = await self.functions.call(
                "asr_run_step",
                # The run row only when it ends: a step's caller does not read it, and
                # decoding its four JSON columns is work a step has no use for.
                columns=_RUN_COLUMNS if finish is not None else _SESSION_COLUMNS,
                p_tenant=tenant_id,
                p_session=session_id,
                p_run=run_id,
                p_epoch=epoch,
                p_now=now,
                p_lease=lease_until,
                p_turns=progress.get("turns"),
                p_usage=json_text(progress.get("usage")),
                p_finish=finish is not None,
                p_status=finish.status if finish else None,
                p_stop_reason=finish.stop_reason if finish else None,
                p_output=self.redactor.value(finish.output) if finish else None,
                p_error=json_text(self.redactor.value(finish.error)) if finish else None,
                **arrays.params(),
            )
        if finish is None:
            return self._committed(row, arrays, now)
        run, result = self._run_result(row, arrays, now)
        return AppendResult(session=result.session, events=result.events, run=run)

    async def close_fenced_run(
        self, tenant_id: str, run_id: str, *, events: list[NewEvent]
    ) -> AppendResult | None:
        arrays = EventArrays.of(events, self._persistable_json)
        now = utcnow()
        with span("store.write", **_SPAN):
            row = await self.functions.call(
                "asr_run_close",
                columns="o_closed, o_session, o_xact_id, o_positions",
                p_tenant=tenant_id,
                p_run=run_id,
                p_now=now,
                **arrays.params(),
            )
        if not row["o_closed"]:
            return None
        return self._committed(row, arrays, now)


class _PostgresHold:
    """A session held by `PostgresStore.hold`: its writes are the store's, made in the
    transaction that holds the row lock; a metadata patch is merged onto the row as the
    lock found it (or as this hold's own last write left it)."""

    def __init__(self, store: PostgresStore, conn: AsyncConnection, record: SessionRecord):
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
        store.check_append(events, expected_seq, snapshot)
        if expected_version is not None and expected_version != self.record.version:
            raise VersionConflict(expected_version, self.record.version)
        merged = None
        if metadata_patch is not None:
            merged = store.redactor.value(merge_patch(self.record.metadata, metadata_patch))
            check_metadata_size(merged, limit=store.max_metadata_bytes)
        arrays = EventArrays.of(events, store._persistable_json)
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
        values: dict[str, Any],
        start_events: list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> tuple[RunRecord, AppendResult]:
        self._check(tenant_id, session_id)
        run, started = await self.store.start_run(
            tenant_id, session_id, values=values, start_events=start_events,
            max_live_runs=max_live_runs, expected=expected, idempotency=idempotency,
            conn=self.conn,
        )  # fmt: skip
        self.record = started.session
        return run, started

    def _check(self, tenant_id: str, session_id: str) -> None:
        if (tenant_id, session_id) != (self.record.tenant_id, self.record.session_id):
            raise ValueError("a held session writes to itself only")
