"""The `asr schedules` verbs: list, show, create, pause, resume, delete, and a schedule's runs.

Operators manage schedules here without a server: the verbs change rows, and the replicas'
schedulers fire them (there is no "trigger now" here: a run needs a server to execute it;
`POST /v1/schedules/{id}/trigger` is the way). Output is JSON Lines, as in `app.admin`.
"""

from __future__ import annotations

from typing import Any, TextIO

from app.admin import Toolkit, json_line
from app.runtime.ports import FireRecord, ScheduleRecord
from app.runtime.runs.blueprints import Blueprints
from app.runtime.schedules.service import Scheduler, ScheduleSpec


def schedule_row(record: ScheduleRecord) -> dict[str, Any]:
    return {
        "schedule_id": record.schedule_id,
        "status": record.status,
        "session_id": record.session_id,
        "agent_name": record.agent_name,
        "cron": record.cron,
        "timezone": record.timezone,
        "interval_seconds": record.interval_seconds,
        "missed": record.missed,
        "multitask": record.multitask,
        "input": record.input,
        "next_fire_at": record.next_fire_at.isoformat() if record.next_fire_at else None,
        "last_fired_at": record.last_fired_at.isoformat() if record.last_fired_at else None,
        "created_at": record.created_at.isoformat(),
    }


def fire_row(fire: FireRecord) -> dict[str, Any]:
    return {
        "tick_at": fire.tick_at.isoformat(),
        "trigger": fire.trigger,
        "outcome": fire.outcome,
        "reason": fire.reason,
        "ticks": fire.ticks,
        "run_id": fire.run_id,
        "session_id": fire.session_id,
    }


def scheduler_of(kit: Toolkit, blueprints: Blueprints | None = None) -> Scheduler:
    """A scheduler that manages rows only (it fires nothing)."""
    return Scheduler(kit.stores.schedules, kit.runtime, None, blueprints=blueprints)


async def list_schedules(kit: Toolkit, out: TextIO, *, tenant: str, limit: int) -> None:
    """Newest first, up to `limit`."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    scheduler, after, remaining = scheduler_of(kit), None, limit
    while remaining > 0:
        page = await scheduler.list(tenant_id, limit=min(remaining, 500), after=after)
        for record in page:
            json_line(out, schedule_row(record))
        if len(page) < min(remaining, 500):
            return
        remaining -= len(page)
        after = (page[-1].created_at, page[-1].schedule_id)


async def show_schedule(kit: Toolkit, out: TextIO, *, tenant: str, schedule_id: str) -> None:
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    record = await scheduler_of(kit).get(tenant_id, schedule_id)
    json_line(out, {**schedule_row(record), "metadata": record.metadata})


async def create_schedule(
    kit: Toolkit,
    out: TextIO,
    *,
    tenant: str,
    spec: ScheduleSpec,
    blueprints: Blueprints | None,
) -> ScheduleRecord:
    """Create and print the schedule (bad cron, zone or interval: InvalidSchedule)."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    record = await scheduler_of(kit, blueprints).create(tenant_id, spec)
    json_line(out, schedule_row(record))
    return record


async def change_schedule(
    kit: Toolkit, out: TextIO, *, tenant: str, schedule_id: str, action: str
) -> None:
    """pause, resume or delete."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    scheduler = scheduler_of(kit)
    if action == "delete":
        await scheduler.delete(tenant_id, schedule_id)
        json_line(out, {"schedule_id": schedule_id, "deleted": True})
        return
    verb = scheduler.pause if action == "pause" else scheduler.resume
    json_line(out, schedule_row(await verb(tenant_id, schedule_id)))


async def list_fires(
    kit: Toolkit, out: TextIO, *, tenant: str, schedule_id: str, limit: int
) -> None:
    """What the schedule's ticks did, newest first (the runs it started, and skips)."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    for fire in await scheduler_of(kit).fires(tenant_id, schedule_id, limit=limit):
        json_line(out, fire_row(fire))
