"""HTTP models of schedules (`/v1/schedules`): create, patch, read, and their fires."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.api.http.inputs import SESSION_ID_PATTERN, RequestBody
from app.runtime.memory.items import ContentPart
from app.runtime.schedules.cadence import MAX_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS

Missed = Literal["skip", "run_once"]
Multitask = Literal["skip", "enqueue", "interrupt"]

_CRON = "Five fields (minute hour day month weekday), or @hourly, @daily, ..."
_ZONE = "IANA time zone the cron expression is read in (Europe/Paris); default UTC."
_MISSED = (
    "Ticks later than the misfire grace (replicas down): `skip` drops them, `run_once` fires "
    "once for all of them."
)
_MULTITASK = (
    "A tick whose session has an active run: `skip` it, `enqueue` the run, or `interrupt` "
    "the active one."
)
_INPUT = "The input each tick's run gets (as `input` of a run)."


class ScheduleCreate(RequestBody):
    session_id: str | None = Field(
        default=None,
        pattern=SESSION_ID_PATTERN,
        description="Run on this session; or give agent_name for a new session per tick.",
    )
    agent_name: str | None = Field(
        default=None,
        max_length=64,
        description="A blueprint (GET /v1/agents): each tick runs on a new session made from it.",
    )
    input: str | list[ContentPart] | None = Field(default=None, description=_INPUT)
    cron: str | None = Field(default=None, max_length=128, description=_CRON)
    timezone: str = Field(default="UTC", min_length=1, max_length=64, description=_ZONE)
    interval_seconds: int | None = Field(
        default=None,
        ge=MIN_INTERVAL_SECONDS,
        le=MAX_INTERVAL_SECONDS,
        description="Or: a tick every this many seconds (instead of cron).",
    )
    missed: Missed = Field(default="skip", description=_MISSED)
    multitask: Multitask = Field(default="skip", description=_MULTITASK)
    metadata: dict[str, Any] = Field(default_factory=dict)
    paused: bool = Field(default=False, description="Create it paused (resume to start).")


class SchedulePatch(RequestBody):
    """Only the fields given change; a new cron, timezone or interval starts from now."""

    input: str | list[ContentPart] | None = Field(default=None, description=_INPUT)
    cron: str | None = Field(default=None, max_length=128, description=_CRON)
    timezone: str | None = Field(default=None, min_length=1, max_length=64, description=_ZONE)
    interval_seconds: int | None = Field(
        default=None, ge=MIN_INTERVAL_SECONDS, le=MAX_INTERVAL_SECONDS
    )
    missed: Missed | None = Field(default=None, description=_MISSED)
    multitask: Multitask | None = Field(default=None, description=_MULTITASK)
    metadata: dict[str, Any] | None = Field(default=None, description="Replaces the metadata.")


class ScheduleRead(BaseModel):
    schedule_id: str
    session_id: str | None
    agent_name: str | None
    input: Any
    cron: str | None
    timezone: str
    interval_seconds: int | None
    missed: Missed
    multitask: Multitask
    status: Literal["active", "paused"]
    metadata: dict[str, Any]
    next_fire_at: datetime | None = Field(description="The next tick (null while paused).")
    last_fired_at: datetime | None = Field(description="When a tick last started a run.")
    version: int
    created_at: datetime
    updated_at: datetime


class ScheduleList(BaseModel):
    data: list[ScheduleRead]
    next_cursor: str | None


class ScheduleFireRead(BaseModel):
    schedule_id: str
    tick_at: datetime = Field(description="The tick (a manual trigger: when it was asked).")
    trigger: Literal["schedule", "manual"]
    outcome: Literal["started", "skipped", "failed"]
    reason: str | None = Field(
        description="Why no run started: missed, run_in_progress, session_not_found, ..."
    )
    ticks: int = Field(description="How many ticks this record stands for (missed ones).")
    run_id: str | None
    session_id: str | None
    created_at: datetime


class ScheduleFireList(BaseModel):
    data: list[ScheduleFireRead]
    next_cursor: str | None
