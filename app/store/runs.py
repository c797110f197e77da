"""Runs: the one-active-run rule, leases, and fenced writes.

Every write a run makes goes through `append_run_events`, whose transaction does
`UPDATE runs ... WHERE run_id = :r AND epoch = :e AND status = 'running'` before it inserts
anything. A takeover (cancel, interrupt, lease expiry) bumps the epoch, so an owner that was
paused past its lease finds zero rows and its whole transaction rolls back. "One active run
per session" is the conditional `UPDATE sessions SET active_run_id = :r WHERE active_run_id
IS NULL`, atomic on every replica.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Row, bindparam, case, func, literal, null, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.errors import (
    RunAlreadyActive,
    RunFenced,
    SessionNotFound,
    StaleSession,
    too_many_runs,
)
from app.runtime.events import NewEvent
from app.runtime.ports import (
    AppendResult,
    IdempotencyToken,
    RunFinish,
    RunRecord,
    SessionRecord,
)
from app.store.base import ALL_TENANTS, as_utc, session_from_mapping, session_from_row, utcnow
from app.store.idempotency import committed_result
from app.store.ledger import LedgerStore, _xact_id_column
from app.store.pgfunctions import EventArrays
from app.store.tables import runs, sessions

LIVE = ("queued", "running")


def _opt(value: datetime | None) -> datetime | None:
    return as_utc(value) if value is not None else None


def run_from_row(row: Row[Any]) -> RunRecord:
    return run_from_mapping(row._mapping)


def run_from_mapping(m: Any) -> RunRecord:
    return RunRecord(
        tenant_id=m["tenant_id"],
        run_id=m["run_id"],
        session_id=m["session_id"],
        status=m["status"],
        stop_reason=m["stop_reason"],
        input=m["input"],
        options=m["options"] or {},
        output=m["output"],
        error=m["error"],
        usage=m["usage"] or {},
        turns=m["turns"],
        first_seq=m["first_seq"],
        last_seq=m["last_seq"],
        epoch=m["epoch"],
        lease_owner=m["lease_owner"],
        lease_expires_at=_opt(m["lease_expires_at"]),
        created_at=as_utc(m["created_at"]),
        started_at=_opt(m["started_at"]),
        finished_at=_opt(m["finished_at"]),
    )


def _json_text(value: Any) -> str | None:
    """A JSON column's value as the driver takes it (text), None for SQL NULL."""
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_COUNT_LIVE = (
    select(func.count())
    .select_from(runs)
    .where(runs.c.tenant_id == bindparam("c_tenant"), runs.c.status.in_(LIVE))
)


@functools.cache
def _reserve_for_run(postgres: bool, finishing: bool) -> Any:
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
        .returning(*c, _xact_id_column(postgres))
    )


class RunStore(LedgerStore):
    async def create_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        input: dict[str, Any] | None,
        options: dict[str, Any],
        owner: str,
        lease_until: datetime,
        idempotency: IdempotencyToken | None = None,
        run_id: str | None = None,
        start_events: list[NewEvent] | None = None,
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
    ) -> tuple[RunRecord, AppendResult | None]:
        """Insert a run: `queued`, or, with `start_events`, claimed at once in the same
        transaction (so a refused start leaves no row behind).

        `max_live_runs` refuses the run when the tenant already has that many queued or
        running runs (counted in this transaction: one fewer round of BEGIN/COMMIT per run
        than a separate check, and no more racy than one).

        `expected` is (version, created_at) of the session as the caller's cached view has
        it: with start_events, the run starts only if the session is still exactly that.

        `idempotency` is recorded in the same transaction, with the run's id (see `seal`).

        Raises:
            SessionNotFound, TooManyRequests, RunAlreadyActive and StaleSession (only with
            start_events); IdempotentReplay.
        """
        now = utcnow()
        values = {
            "tenant_id": tenant_id,
            "run_id": run_id or f"run_{uuid.uuid4().hex}",
            "session_id": session_id,
            "status": "queued",
            "input": self.redactor.value(input),
            "options": self.redactor.value(options),
            "usage": {},
            "turns": 0,
            "epoch": 1,
            "lease_owner": owner,
            "lease_expires_at": lease_until,
            "idempotency_key": idempotency.key if idempotency is not None else None,
            "created_at": now,
            "updated_at": now,
        }
        if start_events is not None and self.functions is not None:
            return await self._start_by_function(
                values, start_events, max_live_runs, expected, idempotency
            )
        async with self.write(tenant_id) as conn:
            if max_live_runs is not None:
                live = (await conn.execute(_COUNT_LIVE, {"c_tenant": tenant_id})).scalar_one()
                if live >= max_live_runs:
                    raise too_many_runs(max_live_runs)
            if start_events is not None:
                run, started = await self._insert_claimed(conn, values, start_events, expected)
                await self.seal(conn, tenant_id, idempotency, committed_result(started, run.run_id))
                return run, started
            exists = (
                await conn.execute(
                    select(sessions.c.session_id).where(
                        sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id
                    )
                )
            ).first()
            if exists is None:
                raise SessionNotFound(session_id)
            row = (await conn.execute(runs.insert().values(**values).returning(*runs.c))).one()
            run = run_from_row(row)
            current = await self._session(conn, tenant_id, session_id)
            assert current is not None  # it existed a moment ago, in this transaction
            await self.seal(
                conn,
                tenant_id,
                idempotency,
                committed_result(AppendResult(session=current, events=[]), run.run_id),
            )
            return run, None

    async def _start_by_function(
        self,
        values: dict[str, Any],
        events: list[NewEvent],
        max_live_runs: int | None,
        expected: tuple[int, datetime] | None,
        idempotency: IdempotencyToken | None,
    ) -> tuple[RunRecord, AppendResult]:
        """`_insert_claimed`, the live-run count and the key in one round trip (PostgreSQL)."""
        assert self.functions is not None
        arrays = EventArrays.of(events, self._persistable_json)
        now = values["created_at"]
        tenant_id, session_id = values["tenant_id"], values["session_id"]
        row = await self.functions.run_start(
            tenant_id,
            session_id,
            values["run_id"],
            max_live_runs,
            now,
            values["lease_owner"],
            values["lease_expires_at"],
            _json_text(values["input"]),
            _json_text(values["options"]),
            *(expected or (None, None)),
            *arrays.args(),
            *self.idempotency_args(idempotency),
        )
        return self._function_result(row, arrays, now)

    def _function_result(
        self, row: Any, arrays: EventArrays, now: datetime
    ) -> tuple[RunRecord, AppendResult]:
        session = session_from_mapping(row["o_session"])
        first = session.last_seq - len(arrays.ids) + 1
        written = arrays.written(session.session_id, first, now, row["o_positions"])
        self.committed(session.tenant_id, session.session_id, written)
        return run_from_mapping(row["o_run"]), AppendResult(session=session, events=written)

    async def _insert_claimed(
        self,
        conn: AsyncConnection,
        values: dict[str, Any],
        events: list[NewEvent],
        expected: tuple[int, datetime] | None,
    ) -> tuple[RunRecord, AppendResult]:
        """A new run that is the session's active run from its first row on: the session is
        claimed (and its seqs reserved) first, so the run row is written once, already
        running, and the session's existence needs no read of its own."""
        now = values["created_at"]
        session, xact_id = await self._claim_session(
            conn,
            values["tenant_id"],
            values["session_id"],
            values["run_id"],
            len(events),
            now,
            expected,
        )
        first = session.last_seq - len(events) + 1
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
        written = await self._insert_events(conn, session, events, first_seq=first, xact_id=xact_id)
        return run_from_row(row), AppendResult(session=session, events=written)

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
        """Make a queued run the session's active run and write its first events.

        Args:
            oldest_only: claim only if no older queued run waits on the session (FIFO).

        Raises:
            RunAlreadyActive: another run is active, or an older queued run goes first.
            RunFenced: the run is no longer queued (cancelled meanwhile).
        """
        async with self.write(tenant_id) as conn:
            run = await self._get_run(conn, tenant_id, run_id)
            if run is None or run.status != "queued":
                raise RunFenced(f"run {run_id} is not queued")
            if oldest_only and await self._older_queued(conn, run):
                raise RunAlreadyActive(None)
            return await self._claim(conn, run, owner, lease_until, events)

    async def _claim(
        self,
        conn: AsyncConnection,
        run: RunRecord,
        owner: str,
        lease_until: datetime,
        events: list[NewEvent],
    ) -> tuple[RunRecord, AppendResult]:
        now = utcnow()
        session, xact_id = await self._claim_session(
            conn, run.tenant_id, run.session_id, run.run_id, len(events), now
        )
        first = session.last_seq - len(events) + 1
        written = await self._insert_events(conn, session, events, first_seq=first, xact_id=xact_id)
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

    async def _claim_session(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        run_id: str,
        n: int,
        now: datetime,
        expected: tuple[int, datetime] | None = None,
    ) -> tuple[SessionRecord, int | None]:
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
        ).returning(*sessions.c, self._xact_id_column())
        row = (await conn.execute(stmt)).first()
        if row is not None:
            return session_from_row(row), row._mapping["xact_id"]
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
        """Write one step of a run, fenced by its epoch; optionally end the run.

        Three statements: reserve the seqs (and, when finishing, free the session if this
        run holds it), then the fenced update of the run row (lease, progress, last seq and,
        when finishing, its end), then the events. A fenced run finds no run row and rolls
        the whole transaction back, reservation included.

        Raises:
            RunFenced: the run was taken over; nothing was written.
        """
        now = utcnow()
        n = len(events)
        if self.functions is not None and set(progress or {}) <= {"turns", "usage"}:
            arrays = EventArrays.of(events, self._persistable_json)
            row = await self.functions.run_step(
                tenant_id,
                session_id,
                run_id,
                epoch,
                now,
                lease_until,
                (progress or {}).get("turns"),
                _json_text((progress or {}).get("usage")),
                finish is not None,
                finish.status if finish else None,
                finish.stop_reason if finish else None,
                self.redactor.value(finish.output) if finish else None,
                _json_text(self.redactor.value(finish.error)) if finish else None,
                *arrays.args(),
            )
            run, result = self._function_result(row, arrays, now)
            return replace(result, run=run) if finish is not None else result
        async with self.write(tenant_id) as conn:
            params = {
                "r_tenant": tenant_id,
                "r_session": session_id,
                "r_n": n,
                "r_now": now,
                "r_run": run_id,
            }
            reserve = _reserve_for_run(self.is_postgres, finish is not None)
            row = (await conn.execute(reserve, params)).first()
            if row is None:
                raise SessionNotFound(session_id)
            record, xact_id = session_from_row(row), row._mapping["xact_id"]
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
            )
            ended = (
                await conn.execute(
                    fenced.returning(*runs.c)
                    if finish is not None
                    else fenced.returning(runs.c.run_id)
                )
            ).first()
            if ended is None:
                raise RunFenced(f"run {run_id} was taken over")
            written = await self._insert_events(
                conn, record, events, first_seq=record.last_seq - n + 1, xact_id=xact_id
            )
        if finish is None:
            return AppendResult(session=record, events=written)
        return AppendResult(session=record, events=written, run=run_from_row(ended))

    async def _release_session(
        self, conn: AsyncConnection, tenant_id: str, session_id: str, run_id: str, record: Any
    ) -> Any:
        row = (
            await conn.execute(
                update(sessions)
                .where(
                    sessions.c.tenant_id == tenant_id,
                    sessions.c.session_id == session_id,
                    sessions.c.active_run_id == run_id,
                )
                .values(active_run_id=None, status="idle")
                .returning(*sessions.c)
            )
        ).first()
        return session_from_row(row) if row is not None else record

    async def renew_lease(
        self, tenant_id: str, run_id: str, *, epoch: int, lease_until: datetime
    ) -> bool:
        """Extend the lease; False means the run was taken over and must stop."""
        async with self.write(tenant_id) as conn:
            result = await conn.execute(
                update(runs)
                .where(
                    runs.c.tenant_id == tenant_id,
                    runs.c.run_id == run_id,
                    runs.c.epoch == epoch,
                    runs.c.status.in_(LIVE),
                )
                .values(lease_expires_at=lease_until, updated_at=utcnow())
            )
        return result.rowcount > 0

    async def fence_run(
        self, tenant_id: str, run_id: str, *, stop_reason: str, only_expired: bool = False
    ) -> RunRecord | None:
        """Take a live run away from its owner: bump the epoch, mark it interrupted.

        Returns the run as it was before (None when it was not live, or, with
        `only_expired`, when its lease has not expired).
        """
        now = utcnow()
        async with self.write(tenant_id) as conn:
            before = await self._get_run(conn, tenant_id, run_id)
            if before is None or before.status not in LIVE:
                return None
            stmt = update(runs).where(
                runs.c.tenant_id == tenant_id,
                runs.c.run_id == run_id,
                runs.c.epoch == before.epoch,
                runs.c.status.in_(LIVE),
            )
            if only_expired:
                stmt = stmt.where(runs.c.lease_expires_at < now)
            result = await conn.execute(
                stmt.values(
                    epoch=runs.c.epoch + 1,
                    status="interrupted",
                    stop_reason=stop_reason,
                    finished_at=now,
                    updated_at=now,
                    lease_expires_at=None,
                )
            )
        return before if result.rowcount > 0 else None

    async def close_fenced_run(
        self, tenant_id: str, run_id: str, *, events: list[NewEvent]
    ) -> AppendResult | None:
        """Write the closing events of a fenced run and free its session (idempotent).

        Runs after `fence_run` committed, so the former owner can no longer write; if the
        session is no longer held by this run, the run was already closed and nothing is
        written.
        """
        async with self.write(tenant_id) as conn:
            run = await self._get_run(conn, tenant_id, run_id)
            if run is None or run.status in LIVE:
                return None
            held = (
                await conn.execute(
                    select(sessions.c.active_run_id).where(
                        sessions.c.tenant_id == tenant_id,
                        sessions.c.session_id == run.session_id,
                    )
                )
            ).first()
            if held is None or held.active_run_id != run_id:
                return None
            record, xact_id = await self._reserve(
                conn, tenant_id, run.session_id, len(events), None, None
            )
            written = await self._insert_events(
                conn,
                record,
                events,
                first_seq=record.last_seq - len(events) + 1,
                xact_id=xact_id,
            )
            record = await self._release_session(conn, tenant_id, run.session_id, run_id, record)
            await conn.execute(
                update(runs)
                .where(runs.c.tenant_id == tenant_id, runs.c.run_id == run_id)
                .values(last_seq=record.last_seq)
            )
        return AppendResult(session=record, events=written)

    async def _get_run(
        self, conn: AsyncConnection, tenant_id: str, run_id: str
    ) -> RunRecord | None:
        row = (
            await conn.execute(
                select(runs).where(runs.c.tenant_id == tenant_id, runs.c.run_id == run_id)
            )
        ).first()
        return run_from_row(row) if row is not None else None

    async def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        async with self.read(tenant_id) as conn:
            return await self._get_run(conn, tenant_id, run_id)

    async def list_runs(
        self, tenant_id: str, session_id: str, *, limit: int = 100
    ) -> list[RunRecord]:
        async with self.read(tenant_id) as conn:
            rows = (
                await conn.execute(
                    select(runs)
                    .where(runs.c.tenant_id == tenant_id, runs.c.session_id == session_id)
                    .order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
                    .limit(limit)
                )
            ).all()
        return [run_from_row(r) for r in rows]

    async def list_stale_runs(self, *, limit: int = 100) -> list[RunRecord]:
        """Live runs whose lease expired, and interrupted runs still holding their session.

        The sweeper of every replica reads this (across tenants: it is the system's own
        housekeeping, never a request).
        """
        now = utcnow()
        async with self.read(ALL_TENANTS) as conn:
            expired = (
                await conn.execute(
                    select(runs)
                    .where(runs.c.status.in_(LIVE), runs.c.lease_expires_at < now)
                    .limit(limit)
                )
            ).all()
            dangling = (
                await conn.execute(
                    select(runs)
                    .join(
                        sessions,
                        (sessions.c.tenant_id == runs.c.tenant_id)
                        & (sessions.c.active_run_id == runs.c.run_id),
                    )
                    .where(runs.c.status.not_in(LIVE))
                    .limit(limit)
                )
            ).all()
        return [run_from_row(r) for r in (*expired, *dangling)]
