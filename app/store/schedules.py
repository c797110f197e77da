"""Schedules and the record of their ticks, in SQLAlchemy Core shared by both backends.

No write here inserts events (a tick's run is started by the run store's own writes), so
both databases run the same statements. Every change of a schedule row is conditional on the
version the caller read (`save_schedule`): a scheduler's claim of a tick, a pause and a PATCH
cannot overwrite each other, and of two replicas claiming one tick exactly one succeeds. The
tick's record is written with the release of its claim (`finish_schedule_tick`), conditional
on the claim still being this owner's, and a fire row's key (schedule, tick, trigger) makes a
second record of one tick a no-op. Finding due schedules spans tenants: `CrossTenantStore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, case, delete, null, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.ports import FireRecord, IdempotencyToken, ScheduleRecord
from app.store.base import Database, as_utc, utcnow
from app.store.cross_tenant import CrossTenantStore
from app.store.idempotency import IdempotencyStore
from app.store.payloads import Payloads
from app.store.tables import schedule_fires, schedules


def _opt(value: datetime | None) -> datetime | None:
    return as_utc(value) if value is not None else None


def schedule_from_row(row: Row[Any]) -> ScheduleRecord:
    m = row._mapping
    return ScheduleRecord(
        tenant_id=m["tenant_id"],
        schedule_id=m["schedule_id"],
        session_id=m["session_id"],
        agent_name=m["agent_name"],
        input=m["input"],
        cron=m["cron"],
        timezone=m["timezone"],
        interval_seconds=m["interval_seconds"],
        anchor_at=as_utc(m["anchor_at"]),
        missed=m["missed"],
        multitask=m["multitask"],
        status=m["status"],
        metadata=m["metadata"] or {},
        next_fire_at=_opt(m["next_fire_at"]),
        claim_tick_at=_opt(m["claim_tick_at"]),
        claimed_by=m["claimed_by"],
        claim_expires_at=_opt(m["claim_expires_at"]),
        last_fired_at=_opt(m["last_fired_at"]),
        version=m["version"],
        created_at=as_utc(m["created_at"]),
        updated_at=as_utc(m["updated_at"]),
    )


def fire_from_row(row: Row[Any]) -> FireRecord:
    m = row._mapping
    return FireRecord(
        schedule_id=m["schedule_id"],
        tick_at=as_utc(m["tick_at"]),
        trigger=m["trigger"],
        outcome=m["outcome"],
        reason=m["reason"],
        ticks=m["ticks"],
        run_id=m["run_id"],
        session_id=m["session_id"],
        created_at=as_utc(m["created_at"]),
    )


class ScheduleStore:
    """Schedules (tenant-scoped) and their fires."""

    def __init__(
        self,
        db: Database,
        payloads: Payloads,
        idempotency: IdempotencyStore,
        cross: CrossTenantStore,
    ) -> None:
        self.db = db
        self.payloads = payloads
        self.idempotency = idempotency
        self._cross = cross

    async def list_due_schedules(self, *, limit: int = 100) -> list[tuple[str, str]]:
        """(tenant_id, schedule_id) of every tenant's due schedules
        (`CrossTenantStore.list_due_schedules`)."""
        return await self._cross.list_due_schedules(limit=limit)

    async def create_schedule(
        self,
        tenant_id: str,
        *,
        values: dict[str, Any],
        idempotency: IdempotencyToken | None = None,
    ) -> ScheduleRecord:
        """Insert a schedule (`values`: every column but the tenant, version and times).

        Raises:
            IdempotentReplay: a schedule was created under this key already.
        """
        now = utcnow()
        row_values = {
            **values,
            **self._clean(values),
            "tenant_id": tenant_id,
            "version": 1,
            "created_at": now,
            "updated_at": now,
        }
        async with self.db.write(tenant_id) as conn:
            row = (
                await conn.execute(schedules.insert().values(**row_values).returning(*schedules.c))
            ).one()
            await self.idempotency.seal(
                conn, tenant_id, idempotency, {"schedule_id": values["schedule_id"]}
            )
        return schedule_from_row(row)

    def _clean(self, values: dict[str, Any]) -> dict[str, Any]:
        """The client's JSON as a run's input is stored: through the redaction funnel
        (configured secrets masked, NUL, which PostgreSQL's JSONB refuses, replaced)."""
        return {k: self.payloads.redact(values[k]) for k in ("input", "metadata") if k in values}

    async def get_schedule(self, tenant_id: str, schedule_id: str) -> ScheduleRecord | None:
        async with self.db.read(tenant_id) as conn:
            return await self._get_schedule(conn, tenant_id, schedule_id)

    async def _get_schedule(
        self, conn: AsyncConnection, tenant_id: str, schedule_id: str
    ) -> ScheduleRecord | None:
        c = schedules.c
        row = (
            await conn.execute(
                select(schedules).where(c.tenant_id == tenant_id, c.schedule_id == schedule_id)
            )
        ).first()
        return schedule_from_row(row) if row is not None else None

    async def list_schedules(
        self, tenant_id: str, *, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[ScheduleRecord]:
        """Newest first; `after` is the (created_at, schedule_id) of the last one seen."""
        c = schedules.c
        query = select(schedules).where(c.tenant_id == tenant_id)
        if after is not None:
            query = query.where(tuple_(c.created_at, c.schedule_id) < tuple_(*after))
        query = query.order_by(c.created_at.desc(), c.schedule_id.desc()).limit(limit)
        async with self.db.read(tenant_id) as conn:
            rows = (await conn.execute(query)).all()
        return [schedule_from_row(r) for r in rows]

    async def save_schedule(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        expected_version: int,
        values: dict[str, Any],
        fires: Sequence[FireRecord] = (),
    ) -> ScheduleRecord | None:
        """Change the schedule if it is still at `expected_version` (and record `fires` in
        the same transaction); None when it changed or was deleted meanwhile."""
        c = schedules.c
        values = {**values, **self._clean(values)}
        stmt = (
            update(schedules)
            .where(
                c.tenant_id == tenant_id,
                c.schedule_id == schedule_id,
                c.version == expected_version,
            )
            .values(**values, version=c.version + 1, updated_at=utcnow())
            .returning(*schedules.c)
        )
        async with self.db.write(tenant_id) as conn:
            row = (await conn.execute(stmt)).first()
            if row is None:
                return None
            await self._insert_fires(conn, tenant_id, fires)
        return schedule_from_row(row)

    async def finish_schedule_tick(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        tick_at: datetime,
        owner: str,
        next_fire_at: datetime,
        fire: FireRecord,
    ) -> bool:
        """Release this owner's claim of `tick_at`, move on to `next_fire_at`, and record
        what the tick did; False (nothing written) when the claim is no longer this owner's:
        another replica took the expired claim over and records the tick itself."""
        c = schedules.c
        stmt = (
            update(schedules)
            .where(
                c.tenant_id == tenant_id,
                c.schedule_id == schedule_id,
                c.claim_tick_at == tick_at,
                c.claimed_by == owner,
            )
            .values(
                # Paused while the tick was being fired: it stays paused, with no next tick.
                next_fire_at=case(
                    (
                        c.status == "active",
                        bindparam("f_next", next_fire_at, type_=c.next_fire_at.type),
                    ),
                    else_=null(),
                ),
                claim_tick_at=None,
                claimed_by=None,
                claim_expires_at=None,
                last_fired_at=fire.created_at if fire.run_id is not None else c.last_fired_at,
                version=c.version + 1,
                updated_at=utcnow(),
            )
        )
        async with self.db.write(tenant_id) as conn:
            if (await conn.execute(stmt)).rowcount == 0:
                return False
            await self._insert_fires(conn, tenant_id, [fire])
        return True

    async def append_schedule_fire(self, tenant_id: str, fire: FireRecord) -> None:
        """Record a tick outside the scheduler's claims (a manual trigger)."""
        async with self.db.write(tenant_id) as conn:
            await self._insert_fires(conn, tenant_id, [fire])

    async def _insert_fires(
        self, conn: AsyncConnection, tenant_id: str, fires: Sequence[FireRecord]
    ) -> None:
        for fire in fires:
            await conn.execute(
                self.db.insert(schedule_fires)
                .values(
                    tenant_id=tenant_id,
                    schedule_id=fire.schedule_id,
                    tick_at=fire.tick_at,
                    trigger=fire.trigger,
                    outcome=fire.outcome,
                    reason=fire.reason,
                    ticks=fire.ticks,
                    run_id=fire.run_id,
                    session_id=fire.session_id,
                    created_at=fire.created_at,
                )
                .on_conflict_do_nothing(
                    index_elements=["tenant_id", "schedule_id", "tick_at", "trigger"]
                )
            )

    async def delete_schedule(self, tenant_id: str, schedule_id: str) -> bool:
        """Delete the schedule and its record of fires (not the runs it started)."""
        c = schedules.c
        async with self.db.write(tenant_id) as conn:
            result = await conn.execute(
                delete(schedules).where(c.tenant_id == tenant_id, c.schedule_id == schedule_id)
            )
        return result.rowcount > 0

    async def list_schedule_fires(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int,
        before: tuple[datetime, str] | None = None,
        run_id: str | None = None,
    ) -> list[FireRecord]:
        """A schedule's fires, newest tick first; `before` is the (tick_at, trigger) of the
        last one seen; `run_id` finds the fire that started that run."""
        f = schedule_fires.c
        query = select(schedule_fires).where(f.tenant_id == tenant_id, f.schedule_id == schedule_id)
        if before is not None:
            query = query.where(tuple_(f.tick_at, f.trigger) < tuple_(*before))
        if run_id is not None:
            query = query.where(f.run_id == run_id)
        query = query.order_by(f.tick_at.desc(), f.trigger.desc()).limit(limit)
        async with self.db.read(tenant_id) as conn:
            rows = (await conn.execute(query)).all()
        return [fire_from_row(r) for r in rows]
