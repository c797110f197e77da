"""Schedule routes: create, list, get, patch, delete, pause, resume, trigger now, and the
runs a schedule started (`/v1/schedules`). The scheduling itself is `app.runtime.schedules.service`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from app.api.http.deps import IdempotencyKey, SchedulerDep, SettingsDep, TenantDep
from app.api.http.idempotency import idempotent
from app.api.http.pages import cut, decode_cursor
from app.api.http.problems import problem_responses
from app.api.http.views import rfc3339
from app.api.rest.schedule_schemas import (
    ScheduleCreate,
    ScheduleFireList,
    ScheduleFireRead,
    ScheduleList,
    SchedulePatch,
    ScheduleRead,
)
from app.runtime.errors import InvalidRequest
from app.runtime.ports import FireRecord, IdempotencyToken, ScheduleRecord
from app.runtime.schedules.service import ScheduleSpec

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])

_ONE = problem_responses(401, 404, 422)
# A change of the schedule retried while scheduler claims keep winning the race: 429.
_CHANGE = problem_responses(401, 404, 422, 429)
Limit = Annotated[int, Query(ge=1, le=1000)]
Cursor = Annotated[str | None, Query(max_length=512)]


def schedule_view(record: ScheduleRecord) -> dict[str, Any]:
    return {
        "schedule_id": record.schedule_id,
        "session_id": record.session_id,
        "agent_name": record.agent_name,
        "input": record.input,
        "cron": record.cron,
        "timezone": record.timezone,
        "interval_seconds": record.interval_seconds,
        "missed": record.missed,
        "multitask": record.multitask,
        "status": record.status,
        "metadata": record.metadata,
        "next_fire_at": rfc3339(record.next_fire_at),
        "last_fired_at": rfc3339(record.last_fired_at),
        "version": record.version,
        "created_at": rfc3339(record.created_at),
        "updated_at": rfc3339(record.updated_at),
    }


def fire_view(fire: FireRecord) -> dict[str, Any]:
    return {
        "schedule_id": fire.schedule_id,
        "tick_at": rfc3339(fire.tick_at),
        "trigger": fire.trigger,
        "outcome": fire.outcome,
        "reason": fire.reason,
        "ticks": fire.ticks,
        "run_id": fire.run_id,
        "session_id": fire.session_id,
        "created_at": rfc3339(fire.created_at),
    }


def _input(value: Any) -> Any:
    if isinstance(value, list):
        return [p.model_dump(mode="json", exclude_none=True) for p in value]
    return value


def _created(record: ScheduleRecord) -> JSONResponse:
    location = f"/v1/schedules/{record.schedule_id}"
    return JSONResponse(schedule_view(record), status_code=201, headers={"Location": location})


@router.post(
    "",
    status_code=201,
    response_model=ScheduleRead,
    summary="Create a schedule: run an input on a cron expression or an interval",
    responses=problem_responses(401, 404, 409, 422),
)
async def create_schedule(
    body: ScheduleCreate,
    request: Request,
    tenant: TenantDep,
    scheduler: SchedulerDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """A schedule starts a run with `input` on `session_id` (or, with `agent_name`, on a new
    session made from that blueprint) at every tick of `cron` (read in `timezone`) or every
    `interval_seconds`. Each tick fires exactly once across replicas. A bad cron expression,
    time zone or interval is 422 `invalid_schedule`."""
    spec = ScheduleSpec(
        session_id=body.session_id,
        agent_name=body.agent_name,
        input=_input(body.input),
        cron=body.cron,
        timezone=body.timezone,
        interval_seconds=body.interval_seconds,
        missed=body.missed,
        multitask=body.multitask,
        metadata=body.metadata,
        paused=body.paused,
    )

    async def produce(token: IdempotencyToken | None) -> Response:
        return _created(await scheduler.create(tenant.tenant_id, spec, idempotency=token))

    async def replay(result: dict[str, Any]) -> Response:
        return _created(await scheduler.get(tenant.tenant_id, result["schedule_id"]))

    return await idempotent(request, scheduler.runtime, tenant, idempotency_key, produce, replay)


@router.get(
    "",
    response_model=ScheduleList,
    summary="List schedules (newest first, keyset-paginated)",
    responses=problem_responses(401, 422),
)
async def list_schedules(
    tenant: TenantDep,
    scheduler: SchedulerDep,
    settings: SettingsDep,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """The tenant's schedules, newest first; pass `next_cursor` back as `cursor`."""
    page = min(limit, settings.page_limit_max)
    after = decode_cursor(cursor)
    rows = await scheduler.list(tenant.tenant_id, limit=page + 1, after=after)
    rows, next_cursor = cut(rows, page, lambda r: (r.created_at, r.schedule_id))
    return {"data": [schedule_view(r) for r in rows], "next_cursor": next_cursor}


@router.get("/{schedule_id}", response_model=ScheduleRead, summary="A schedule", responses=_ONE)
async def get_schedule(schedule_id: str, tenant: TenantDep, scheduler: SchedulerDep) -> dict:
    """The schedule, with its next tick (null while paused)."""
    return schedule_view(await scheduler.get(tenant.tenant_id, schedule_id))


@router.patch(
    "/{schedule_id}",
    response_model=ScheduleRead,
    summary="Change a schedule's input, cadence or policies",
    responses=_CHANGE,
)
async def patch_schedule(
    schedule_id: str, body: SchedulePatch, tenant: TenantDep, scheduler: SchedulerDep
) -> dict:
    """Only the fields given change. A new `cron`, `timezone` or `interval_seconds` starts
    from now (a cron replaces an interval and the other way round); `metadata` is replaced."""
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    if "input" in changes:
        changes["input"] = _input(changes["input"])
    for name in ("timezone", "missed", "multitask", "metadata"):
        if name in changes and changes[name] is None:
            raise InvalidRequest(f"{name} cannot be null")
    return schedule_view(await scheduler.update(tenant.tenant_id, schedule_id, changes))


@router.delete(
    "/{schedule_id}",
    status_code=204,
    summary="Delete a schedule (the runs it started stay)",
    responses=problem_responses(401, 404),
)
async def delete_schedule(schedule_id: str, tenant: TenantDep, scheduler: SchedulerDep) -> Response:
    """Delete the schedule and its record of fires; the runs and sessions it made stay."""
    await scheduler.delete(tenant.tenant_id, schedule_id)
    return Response(status_code=204)


@router.post(
    "/{schedule_id}/pause",
    response_model=ScheduleRead,
    summary="Pause a schedule",
    responses=_CHANGE,
)
async def pause_schedule(schedule_id: str, tenant: TenantDep, scheduler: SchedulerDep) -> dict:
    """No tick fires until it is resumed (a tick being fired right now completes)."""
    return schedule_view(await scheduler.pause(tenant.tenant_id, schedule_id))


@router.post(
    "/{schedule_id}/resume",
    response_model=ScheduleRead,
    summary="Resume a paused schedule",
    responses=_CHANGE,
)
async def resume_schedule(schedule_id: str, tenant: TenantDep, scheduler: SchedulerDep) -> dict:
    """Ticks start again from the next one after now; those of the pause are not fired."""
    return schedule_view(await scheduler.resume(tenant.tenant_id, schedule_id))


def _fire_response(fire: FireRecord) -> JSONResponse:
    if fire.run_id is None:
        return JSONResponse(fire_view(fire))
    location = f"/v1/sessions/{fire.session_id}/runs/{fire.run_id}"
    return JSONResponse(fire_view(fire), status_code=202, headers={"Location": location})


@router.post(
    "/{schedule_id}/trigger",
    response_model=ScheduleFireRead,
    summary="Fire a schedule now",
    responses={
        202: {"description": "a run started; Location is the run", "model": ScheduleFireRead},
        **problem_responses(401, 404, 422),
    },
)
async def trigger_schedule(
    schedule_id: str,
    request: Request,
    tenant: TenantDep,
    scheduler: SchedulerDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Start the schedule's run now, paused or not, outside its cadence: 202 with the run's
    Location, or 200 when the tick started none (say, `skip` and the session is busy)."""

    async def produce(token: IdempotencyToken | None) -> Response:
        return _fire_response(
            await scheduler.trigger(tenant.tenant_id, schedule_id, idempotency=token)
        )

    async def replay(result: dict[str, Any]) -> Response:
        fire = await scheduler.fire_of_run(tenant.tenant_id, schedule_id, result["run_id"])
        if fire is None:  # the first attempt died before its record: answer from the run
            now = datetime.now(UTC)
            fire = FireRecord(
                schedule_id=schedule_id,
                tick_at=now,
                trigger="manual",
                outcome="started",
                reason=None,
                ticks=1,
                run_id=result["run_id"],
                session_id=result.get("session_id"),
                created_at=now,
            )
        return _fire_response(fire)

    return await idempotent(request, scheduler.runtime, tenant, idempotency_key, produce, replay)


@router.get(
    "/{schedule_id}/runs",
    response_model=ScheduleFireList,
    summary="The runs a schedule started, and the ticks it skipped",
    responses=_ONE,
)
async def list_schedule_runs(
    schedule_id: str,
    tenant: TenantDep,
    scheduler: SchedulerDep,
    settings: SettingsDep,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """What each tick did, newest first: the run it started (and its session), or why it
    started none (`missed`, `run_in_progress`, ...). Pass `next_cursor` back as `cursor`."""
    page = min(limit, settings.page_limit_max)
    before = decode_cursor(cursor)
    rows = await scheduler.fires(tenant.tenant_id, schedule_id, limit=page + 1, before=before)
    rows, next_cursor = cut(rows, page, lambda f: (f.tick_at, f.trigger))
    return {"data": [fire_view(f) for f in rows], "next_cursor": next_cursor}
