"""`Scheduler`: schedules that start runs on a cron expression or an interval, exactly once.

A schedule runs an input on a session, or on a new session made from a blueprint each tick.
Here are its verbs (create, change, pause, resume, delete, trigger, its fires); how every
replica fires each tick exactly once is `TickFiring` (`schedule_ticks.py`), mixed in.
"""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.runtime.errors import InvalidRequest, NotFound, TooManyRequests
from app.runtime.observer import NullObserver, Observer
from app.runtime.ports import FireRecord, IdempotencyToken, SchedulePort, ScheduleRecord
from app.runtime.runs.blueprints import Blueprints
from app.runtime.runs.manager import RunManager
from app.runtime.schedules.cadence import InvalidSchedule, cadence_of
from app.runtime.schedules.ticks import (
    CONCURRENCY,
    SchedulerTiming,
    TickFiring,
    cadence_of_record,
    tick_key,
)
from app.runtime.session.metadata import check_metadata_size
from app.runtime.session.service import SessionRuntime

__all__ = [
    "ScheduleNotFound",
    "ScheduleSpec",
    "Scheduler",
    "SchedulerTiming",
    "tick_key",
]


MISSED_POLICIES = ("skip", "run_once")
MULTITASK_POLICIES = ("skip", "enqueue", "interrupt")
# Saves that lost a race with another write of the schedule are redone on a fresh read.
_SAVE_TRIES = 5

# Fields a PATCH may change; those that move the ticks re-anchor the cadence.
CADENCE_FIELDS = frozenset({"cron", "timezone", "interval_seconds"})
PATCHABLE = CADENCE_FIELDS | {"input", "missed", "multitask", "metadata"}


class ScheduleNotFound(NotFound):
    code = "schedule_not_found"

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"schedule {schedule_id!r} not found")


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What a client asks for (HTTP and CLI map onto this)."""

    session_id: str | None = None
    agent_name: str | None = None
    input: Any = None
    cron: str | None = None
    timezone: str = "UTC"
    interval_seconds: int | None = None
    missed: str = "skip"
    multitask: str = "skip"
    metadata: dict[str, Any] = field(default_factory=dict)
    paused: bool = False


def _check_policies(missed: str, multitask: str) -> None:
    if missed not in MISSED_POLICIES:
        raise InvalidSchedule(f"missed must be one of {list(MISSED_POLICIES)}")
    if multitask not in MULTITASK_POLICIES:
        raise InvalidSchedule(f"multitask must be one of {list(MULTITASK_POLICIES)}")


class Scheduler(TickFiring):
    """The schedule verbs, and the loop that fires due ticks on this replica (`runs`: None
    for a tool that only manages schedules, such as the CLI)."""

    def __init__(
        self,
        store: SchedulePort,
        runtime: SessionRuntime,
        runs: RunManager | None,
        *,
        blueprints: Blueprints | None = None,
        timing: SchedulerTiming | None = None,
        observer: Observer | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.runs = runs
        self.blueprints = blueprints or Blueprints()
        self.timing = timing or SchedulerTiming()
        self.observer: Observer = observer or NullObserver()
        # An operator's tool (the CLI) manages schedules without firing them: no runs.
        self.owner = runs.owner if runs is not None else "operator"
        self._now = now or (lambda: datetime.now(tz=UTC))
        self._closing = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._slots = asyncio.Semaphore(CONCURRENCY)

    # ------------------------------------------------------------------ verbs

    async def create(
        self, tenant_id: str, spec: ScheduleSpec, *, idempotency: IdempotencyToken | None = None
    ) -> ScheduleRecord:
        """A new schedule; its first tick is the cadence's first after now.

        Raises:
            InvalidSchedule (422): a bad cron expression, time zone, interval or policy, or
                not exactly one of session_id and agent_name.
            SessionNotFound, UnknownAgent: the target does not exist.
            IdempotentReplay.
        """
        if (spec.session_id is None) == (spec.agent_name is None):
            raise InvalidSchedule("give exactly one of session_id and agent_name")
        _check_policies(spec.missed, spec.multitask)
        check_metadata_size(spec.metadata, limit=self.runtime.limits.max_metadata_bytes)
        now = self._now()
        cadence = cadence_of(
            cron=spec.cron,
            timezone=spec.timezone,
            interval_seconds=spec.interval_seconds,
            anchor=now,
        )
        if spec.session_id is not None:
            await self.runtime.get(tenant_id, spec.session_id)
        else:
            assert spec.agent_name is not None
            self.blueprints.spec(spec.agent_name)
        values = {
            "schedule_id": f"sch_{uuid.uuid4().hex}",
            "session_id": spec.session_id,
            "agent_name": spec.agent_name,
            "input": spec.input,
            "cron": cadence.cron,
            "timezone": cadence.timezone,
            "interval_seconds": cadence.interval_seconds,
            "anchor_at": now,
            "missed": spec.missed,
            "multitask": spec.multitask,
            "status": "paused" if spec.paused else "active",
            "metadata": spec.metadata,
            "next_fire_at": None if spec.paused else cadence.next_after(now),
        }
        return await self.store.create_schedule(tenant_id, values=values, idempotency=idempotency)

    async def get(self, tenant_id: str, schedule_id: str) -> ScheduleRecord:
        found = await self.store.get_schedule(tenant_id, schedule_id)
        if found is None:
            raise ScheduleNotFound(schedule_id)
        return found

    async def list(
        self, tenant_id: str, *, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[ScheduleRecord]:
        return await self.store.list_schedules(tenant_id, limit=limit, after=after)

    async def update(
        self, tenant_id: str, schedule_id: str, changes: dict[str, Any]
    ) -> ScheduleRecord:
        """Change some of `PATCHABLE`; a new cadence starts from now (its grid re-anchored).

        Raises:
            ScheduleNotFound, InvalidSchedule.
        """
        unknown = set(changes) - PATCHABLE
        if unknown:
            raise InvalidRequest(f"cannot change {sorted(unknown)}")
        if changes.get("metadata") is not None:
            check_metadata_size(changes["metadata"], limit=self.runtime.limits.max_metadata_bytes)

        def values(record: ScheduleRecord, now: datetime) -> dict[str, Any]:
            merged = {
                "missed": record.missed,
                "multitask": record.multitask,
                **{k: v for k, v in changes.items() if k in ("missed", "multitask")},
            }
            _check_policies(merged["missed"], merged["multitask"])
            out = dict(changes)
            if CADENCE_FIELDS & set(changes):
                timing: dict[str, Any] = {
                    "cron": record.cron,
                    "timezone": record.timezone,
                    "interval_seconds": record.interval_seconds,
                }
                if "cron" in changes and changes["cron"] is not None:
                    timing["interval_seconds"] = None
                if changes.get("interval_seconds") is not None:
                    timing["cron"] = None
                timing.update({k: changes[k] for k in CADENCE_FIELDS & set(changes)})
                cadence = cadence_of(**timing, anchor=now)
                out.update(
                    cron=cadence.cron,
                    timezone=cadence.timezone,
                    interval_seconds=cadence.interval_seconds,
                    anchor_at=now,
                )
                if record.status == "active":
                    out["next_fire_at"] = cadence.next_after(now)
            return out

        return await self._save(tenant_id, schedule_id, values)

    async def pause(self, tenant_id: str, schedule_id: str) -> ScheduleRecord:
        """No tick fires until `resume` (a tick being fired right now still completes)."""
        return await self._save(
            tenant_id, schedule_id, lambda r, now: {"status": "paused", "next_fire_at": None}
        )

    async def resume(self, tenant_id: str, schedule_id: str) -> ScheduleRecord:
        """Fire again from the cadence's next tick after now: the ticks of the pause are not
        missed ticks, they were paused."""

        def values(record: ScheduleRecord, now: datetime) -> dict[str, Any]:
            if record.status == "active":
                return {}
            return {"status": "active", "next_fire_at": cadence_of_record(record).next_after(now)}

        return await self._save(tenant_id, schedule_id, values)

    async def delete(self, tenant_id: str, schedule_id: str) -> None:
        """Delete the schedule and its fires' record; the runs it started stay."""
        if not await self.store.delete_schedule(tenant_id, schedule_id):
            raise ScheduleNotFound(schedule_id)

    async def fires(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int,
        before: tuple[datetime, str] | None = None,
    ) -> builtins.list[FireRecord]:
        """What the schedule's ticks did, newest first: the runs it started, and skips."""
        await self.get(tenant_id, schedule_id)
        return await self.store.list_schedule_fires(
            tenant_id, schedule_id, limit=limit, before=before
        )

    async def fire_of_run(self, tenant_id: str, schedule_id: str, run_id: str) -> FireRecord | None:
        found = await self.store.list_schedule_fires(tenant_id, schedule_id, limit=1, run_id=run_id)
        return found[0] if found else None

    async def trigger(
        self, tenant_id: str, schedule_id: str, *, idempotency: IdempotencyToken | None = None
    ) -> FireRecord:
        """Fire the schedule now, paused or not, outside its cadence (its ticks stay as they
        are). With `idempotency`, a retry gets the first trigger's run."""
        record = await self.get(tenant_id, schedule_id)
        now = self._now()
        token = idempotency or IdempotencyToken(
            key=f"schedule:{schedule_id}:manual:{uuid.uuid4().hex}", request_hash="manual"
        )
        fire, replayed = await self._fire(record, now, "manual", token)
        if not replayed:
            await self.store.append_schedule_fire(tenant_id, fire)
            self._observe(fire)
        return fire

    async def _save(self, tenant_id: str, schedule_id: str, values: Any) -> ScheduleRecord:
        """Apply `values(record, now)` conditionally on the version read; re-read and redo
        when another write (a scheduler's claim) got in between."""
        for _ in range(_SAVE_TRIES):
            record = await self.get(tenant_id, schedule_id)
            changes = values(record, self._now())
            if not changes:
                return record
            saved = await self.store.save_schedule(
                tenant_id, schedule_id, expected_version=record.version, values=changes
            )
            if saved is not None:
                return saved
        raise TooManyRequests("the schedule keeps changing; try again", retry_after=1)
