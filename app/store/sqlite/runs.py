"""`SqliteRuns`: the run writes that insert events, as jobs of the single writer."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, cast

from sqlalchemy import BigInteger, bindparam, case, literal, null, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.errors import RunAlreadyActive, RunFenced, SessionNotFound, StaleSession
from app.runtime.ports import (
    AppendResult,
    IdempotencyToken,
    NewRun,
    RunFinish,
    RunRecord,
    SessionRecord,
)
from app.runtime.session.events import NewEvent
from app.store.base import session_from_row, utcnow
from app.store.idempotency import IdempotencyStore, committed_result
from app.store.payloads import Payloads
from app.store.runs import LIVE, RunStore, run_from_row
from app.store.sqlite.database import SqliteDatabase
from app.store.sqlite.jobs import Jobs
from app.store.tables import runs, sessions


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


class SqliteRuns(RunStore):
    """The run writes that insert events, each one job of the single writer."""

    def __init__(
        self, db: SqliteDatabase, payloads: Payloads, idempotency: IdempotencyStore, *, jobs: Jobs
    ) -> None:
        super().__init__(db, payloads, idempotency)
        self.jobs = jobs

    # ------------------------------------------------------------------- runs

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
        held: bool = False,
    ) -> tuple[RunRecord, AppendResult]:
        """The run's row and its first events, with the session claimed for it: one job.

        `held`: made by `hold`'s session, whose caller holds the write lock."""
        now = utcnow()
        values = self.run_row(tenant_id, session_id, run, idempotency=idempotency, now=now)

        async def work(conn: AsyncConnection) -> Any:
            await self.check_live_runs(conn, tenant_id, max_live_runs)
            session = await self._claim_session(
                conn, tenant_id, session_id, run.run_id, len(start_events), now, expected
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
            written = await self.jobs.insert_events(conn, session, start_events, first_seq=first)
            record, started = run_from_row(row), AppendResult(session=session, events=written)
            result = committed_result(started, record.run_id)
            await self.idempotency.seal(conn, tenant_id, idempotency, result)
            return record, started

        return cast(tuple[RunRecord, AppendResult], await self.jobs.run(work, held=held))

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
            written = await self.jobs.insert_events(conn, session, events, first_seq=first)
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

        return await self.jobs.run(work)

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
                    output=self.payloads.redact(finish.output),
                    error=self.payloads.redact(finish.error),
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
            written = await self.jobs.insert_events(
                conn, record, events, first_seq=record.last_seq - n + 1
            )
            run = run_from_row(ended) if finish is not None else None
            return AppendResult(session=record, events=written, run=run)

        return await self.jobs.run(work)

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
            written = await self.jobs.insert_events(
                conn, record, events, first_seq=record.last_seq - len(events) + 1
            )
            await conn.execute(
                update(runs)
                .where(runs.c.tenant_id == tenant_id, runs.c.run_id == run_id)
                .values(last_seq=record.last_seq)
            )
            return AppendResult(session=record, events=written)

        return await self.jobs.run(work)
