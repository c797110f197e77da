"""`PostgresRuns`: a run's start, claim, steps and close, one stored-function call each."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.ports import AppendResult, IdempotencyToken, NewRun, RunFinish, RunRecord
from app.runtime.session.events import NewEvent
from app.store.base import utcnow
from app.store.idempotency import IdempotencyStore
from app.store.payloads import Payloads
from app.store.postgres.database import PostgresDatabase
from app.store.postgres.writes import RUN_COLUMNS, SESSION_COLUMNS, SPAN, FunctionWrites
from app.store.runs import RunStore, json_text, run_from_mapping
from app.tracing import span


class PostgresRuns(RunStore):
    """A run's start, claim, steps and close, one stored-function call each."""

    def __init__(
        self,
        db: PostgresDatabase,
        payloads: Payloads,
        idempotency: IdempotencyStore,
        *,
        writes: FunctionWrites,
    ) -> None:
        super().__init__(db, payloads, idempotency)
        self.writes = writes

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
        conn: AsyncConnection | None = None,
    ) -> tuple[RunRecord, AppendResult]:
        """One call of `asr_run_start`; in `conn`'s open transaction when given (a held
        session's write, announced when that transaction commits)."""
        arrays = self.writes.arrays(start_events)
        now = utcnow()
        version, created_at = expected or (None, None)
        with span("store.write", **SPAN):
            row = await self.writes.functions.call(
                "asr_run_start",
                columns=RUN_COLUMNS,
                max_live=max_live_runs,
                conn=conn,
                p_tenant=tenant_id,
                p_session=session_id,
                p_run=run.run_id,
                p_max_live=max_live_runs,
                p_now=now,
                p_owner=run.owner,
                p_lease=run.lease_until,
                p_input=json_text(self.payloads.redact(run.input)),
                p_options=json_text(self.payloads.redact(run.options)),
                p_expected_version=version,
                p_expected_created_at=created_at,
                **arrays.params(),
                **self.writes.key(idempotency),
            )
        if conn is None:
            return self.writes.run_result(row, arrays, now)
        record = run_from_mapping(row["o_run"])
        return record, self.writes.held_result(conn, row, arrays, now)

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
        arrays = self.writes.arrays(events)
        now = utcnow()
        with span("store.write", **SPAN):
            row = await self.writes.functions.call(
                "asr_run_claim",
                columns=RUN_COLUMNS,
                p_tenant=tenant_id,
                p_run=run_id,
                p_owner=owner,
                p_lease=lease_until,
                p_now=now,
                p_oldest_only=oldest_only,
                **arrays.params(),
            )
        return self.writes.run_result(row, arrays, now)

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
        arrays = self.writes.arrays(events)
        now = utcnow()
        progress = progress or {}
        with span("store.write", **SPAN):
            row = await self.writes.functions.call(
                "asr_run_step",
                # The run row only when it ends: a step's caller does not read it, and
                # decoding its four JSON columns is work a step has no use for.
                columns=RUN_COLUMNS if finish is not None else SESSION_COLUMNS,
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
                p_output=self.payloads.redact(finish.output) if finish else None,
                p_error=json_text(self.payloads.redact(finish.error)) if finish else None,
                **arrays.params(),
            )
        if finish is None:
            return self.writes.committed(row, arrays, now)
        run, result = self.writes.run_result(row, arrays, now)
        return AppendResult(session=result.session, events=result.events, run=run)

    async def close_fenced_run(
        self, tenant_id: str, run_id: str, *, events: list[NewEvent]
    ) -> AppendResult | None:
        arrays = self.writes.arrays(events)
        now = utcnow()
        with span("store.write", **SPAN):
            row = await self.writes.functions.call(
                "asr_run_close",
                columns="o_closed, o_session, o_xact_id, o_positions",
                p_tenant=tenant_id,
                p_run=run_id,
                p_now=now,
                **arrays.params(),
            )
        if not row["o_closed"]:
            return None
        return self.writes.committed(row, arrays, now)
