"""Runs: the one-active-run rule, leases, and fenced writes.

Every write a run makes goes through `append_run_events`, whose transaction does
`UPDATE runs ... WHERE run_id = :r AND epoch = :e AND status = 'running'` before it inserts
anything. A takeover (cancel, interrupt, lease expiry) bumps the epoch, so an owner that was
paused past its lease finds zero rows and its whole transaction rolls back. "One active run
per session" is the conditional `UPDATE sessions SET active_run_id = :r WHERE active_run_id
IS NULL`, atomic on every replica.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.errors import SessionNotFound, too_many_runs
from app.runtime.ports import AppendResult, IdempotencyToken, NewRun, RunFinish, RunRecord
from app.runtime.session.events import NewEvent
from app.store.base import Database, as_utc, utcnow
from app.store.idempotency import IdempotencyStore, committed_result
from app.store.json_text import dumps
from app.store.ledger import read_session
from app.store.payloads import Payloads
from app.store.tables import runs

LIVE = ("queued", "running")

_COUNT_LIVE = (
    select(func.count())
    .select_from(runs)
    .where(runs.c.tenant_id == bindparam("c_tenant"), runs.c.status.in_(LIVE))
)


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


def json_text(value: Any) -> str | None:
    """A JSON column's value as the driver takes it (text), None for SQL NULL."""
    return None if value is None else dumps(value)


class RunStore(ABC):
    """What both backends share of runs: the row built from a `NewRun`, queued runs (no
    events), leases, takeovers and reads. Starting, claiming, stepping and closing a run
    write events: each backend's class implements those (`SqliteRuns`, `PostgresRuns`)."""

    def __init__(
        self,
        db: Database,
        payloads: Payloads,
        idempotency: IdempotencyStore,
    ) -> None:
        self.db = db
        self.payloads = payloads
        self.idempotency = idempotency

    def run_row(
        self,
        tenant_id: str,
        session_id: str,
        run: NewRun,
        *,
        idempotency: IdempotencyToken | None,
        now: datetime,
    ) -> dict[str, Any]:
        """A new run row's values (redacted), queued until a write starts it."""
        return {
            "tenant_id": tenant_id,
            "run_id": run.run_id,
            "session_id": session_id,
            "status": "queued",
            "input": self.payloads.redact(run.input),
            "options": self.payloads.redact(run.options),
            "usage": {},
            "turns": 0,
            "epoch": 1,
            "lease_owner": run.owner,
            "lease_expires_at": run.lease_until,
            "idempotency_key": idempotency.key if idempotency is not None else None,
            "created_at": now,
            "updated_at": now,
        }

    @abstractmethod
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
        """The run's row and its first events, with the session claimed for it."""

    @abstractmethod
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
        """Start a queued run: the session claimed for it, its first events written."""

    @abstractmethod
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
        """A run's step (fenced by its epoch), and its end when `finish` is given."""

    @abstractmethod
    async def close_fenced_run(
        self, tenant_id: str, run_id: str, *, events: list[NewEvent]
    ) -> AppendResult | None:
        """Free the session a fenced run still holds, with `events` (None: freed already)."""

    async def enqueue_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        run: NewRun,
        max_live_runs: int | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> RunRecord:
        """A run that waits for the session (`claim_run` starts it); it writes no events.

        Raises:
            SessionNotFound, TooManyRequests, IdempotentReplay.
        """
        values = self.run_row(tenant_id, session_id, run, idempotency=idempotency, now=utcnow())
        async with self.db.write(tenant_id) as conn:
            await self.check_live_runs(conn, tenant_id, max_live_runs)
            return await self.insert_queued(conn, tenant_id, session_id, values, idempotency)

    async def check_live_runs(
        self, conn: AsyncConnection, tenant_id: str, max_live_runs: int | None
    ) -> None:
        """Refuse a run when the tenant already has `max_live_runs` queued or running ones
        (counted in the run's own transaction).

        Raises:
            TooManyRequests.
        """
        if max_live_runs is None:
            return
        live = (await conn.execute(_COUNT_LIVE, {"c_tenant": tenant_id})).scalar_one()
        self.refuse_over(live, max_live_runs)

    @staticmethod
    def refuse_over(live: int, max_live_runs: int) -> None:
        """Raise TooManyRequests when `live` runs already fill the cap."""
        if live >= max_live_runs:
            raise too_many_runs(max_live_runs)

    async def insert_queued(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        values: dict[str, Any],
        idempotency: IdempotencyToken | None,
    ) -> RunRecord:
        """A queued run's row (it writes no events until it is claimed), with its key, in
        the write transaction `conn`.

        Raises:
            SessionNotFound, IdempotentReplay.
        """
        current = await read_session(conn, tenant_id, session_id)
        if current is None:
            raise SessionNotFound(session_id)
        row = (await conn.execute(runs.insert().values(**values).returning(*runs.c))).one()
        run = run_from_row(row)
        result = committed_result(AppendResult(session=current, events=[]), run.run_id)
        await self.idempotency.seal(conn, tenant_id, idempotency, result)
        return run

    async def renew_lease(
        self, tenant_id: str, run_id: str, *, epoch: int, lease_until: datetime
    ) -> bool:
        """Extend the lease; False means the run was taken over and must stop."""
        async with self.db.write(tenant_id) as conn:
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
        async with self.db.write(tenant_id) as conn:
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
        async with self.db.read(tenant_id) as conn:
            return await self._get_run(conn, tenant_id, run_id)

    async def list_runs(
        self, tenant_id: str, session_id: str, *, limit: int = 100
    ) -> list[RunRecord]:
        async with self.db.read(tenant_id) as conn:
            rows = (
                await conn.execute(
                    select(runs)
                    .where(runs.c.tenant_id == tenant_id, runs.c.session_id == session_id)
                    .order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
                    .limit(limit)
                )
            ).all()
        return [run_from_row(r) for r in rows]
