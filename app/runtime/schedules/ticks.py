"""Firing a schedule's ticks exactly once across replicas (`TickFiring`, the firing half of
`app.runtime.schedules.service.Scheduler`).

Every replica runs the same loop: it asks the store for due schedules (across tenants), and
for each one *claims* the tick with a write conditional on the row's version, so of the
replicas that saw it, one wins and the others move on. The claim names the tick being fired
(`claim_tick_at`): decided once, so whoever fires it — the claimer, or any replica after the
claim expired because its claimer died — fires that same tick. The run is started through
the exactly-once machinery of every keyed request, with the Idempotency-Key
`schedule:<id>:<tick>`: a second start of one tick finds the key and gets the first one's
run, never a second run. Releasing the claim records what the tick did, in one transaction.
So a crash between the claim and the start loses no tick (the claim expires and the tick is
fired again), and a crash between the start and the record fires nothing twice.

Ticks later than the misfire grace are *missed* (the replicas were down): `skip` drops them
all, `run_once` fires once for all of them (`cadence.plan`). A tick whose session already has
a run follows the schedule's `multitask`: `skip` records the tick as skipped, `enqueue`
queues the run, `interrupt` stops the active run first.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from app.runtime.errors import (
    AgentSessionError,
    IdempotencyKeyReused,
    IdempotentReplay,
    RunAlreadyActive,
    SessionNotFound,
    ToolCallsPending,
    TooManyRequests,
)
from app.runtime.observer import Observer
from app.runtime.ports import FireRecord, IdempotencyToken, SchedulePort, ScheduleRecord
from app.runtime.runs.blueprints import Blueprints
from app.runtime.runs.manager import RunManager
from app.runtime.runs.plan import RunRequest
from app.runtime.schedules.cadence import Cadence, cadence_of, plan
from app.runtime.session.service import SessionRuntime

log = logging.getLogger("app.schedules")

# A schedule's multitask as a run request's (a skipped tick is a refused start).
_RUN_MULTITASK = {"skip": "reject", "enqueue": "enqueue", "interrupt": "interrupt"}
# Due schedules fired at once by one replica's pass.
CONCURRENCY = 8
# Longest pause between passes while they keep failing (the database is away).
_MAX_BACKOFF_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class SchedulerTiming:
    """How often each replica looks for due ticks, how long a claim holds, how late a
    tick may fire before it counts as missed."""

    poll_seconds: float = 1.0
    claim_seconds: float = 30.0
    misfire_grace_seconds: float = 60.0


def tick_key(schedule_id: str, tick_at: datetime) -> IdempotencyToken:
    """The Idempotency-Key of a scheduled tick: the same on every replica and every retry."""
    key = f"schedule:{schedule_id}:{tick_at.isoformat()}"
    return IdempotencyToken(key=key, request_hash=hashlib.sha256(key.encode()).hexdigest())


def cadence_of_record(record: ScheduleRecord) -> Cadence:
    return cadence_of(
        cron=record.cron,
        timezone=record.timezone,
        interval_seconds=record.interval_seconds,
        anchor=record.anchor_at,
    )


class TickFiring:
    """Claiming and firing due ticks, and the loop that does it on this replica (mixed into
    `Scheduler`, which sets these attributes)."""

    store: SchedulePort
    runtime: SessionRuntime
    runs: RunManager | None
    blueprints: Blueprints
    timing: SchedulerTiming
    observer: Observer
    owner: str
    _now: Callable[[], datetime]
    _closing: asyncio.Event
    _loop: asyncio.Task[None] | None
    _slots: asyncio.Semaphore

    async def _fire(
        self, record: ScheduleRecord, tick_at: datetime, trigger: str, token: IdempotencyToken
    ) -> tuple[FireRecord, bool]:
        """Start the tick's run under `token`; (what happened, whether an earlier attempt
        had already started it)."""
        tenant_id = record.tenant_id
        fire = FireRecord(
            schedule_id=record.schedule_id,
            tick_at=tick_at,
            trigger=trigger,
            outcome="started",
            reason=None,
            ticks=1,
            run_id=None,
            session_id=record.session_id,
            created_at=self._now(),
        )
        assert self.runs is not None, "firing needs the run manager"
        try:
            earlier = await self.runtime.find_idempotent(tenant_id, token)
            if earlier is not None and earlier.result.get("run_id"):
                return _started(fire, earlier.result), True
            session_id = record.session_id or await self._new_session(record, token)
            fire = _with(fire, session_id=session_id)
            multitask = _RUN_MULTITASK[record.multitask] if record.session_id else "reject"
            run = await self.runs.start(
                tenant_id,
                session_id,
                RunRequest(input=record.input, multitask=multitask),
                idempotency=token,
            )
        except IdempotencyKeyReused as exc:  # the tenant used the tick's key for another request
            return _with(fire, outcome="failed", reason=exc.code), False
        except AgentSessionError as exc:
            # Refused because a first attempt committed meanwhile (its run holds the
            # session, or the key is taken)? Then that attempt's run is this tick's.
            earlier = await self.runtime.find_idempotent(tenant_id, token)
            if earlier is not None and earlier.result.get("run_id"):
                return _started(fire, earlier.result), True
            outcome = "skipped" if _is_skip(exc) else "failed"
            if outcome == "failed":
                log.warning("schedule %s: tick failed: %s", record.schedule_id, exc.detail)
            return _with(fire, outcome=outcome, reason=exc.code), False
        return _with(fire, run_id=run.run_id), False

    async def _new_session(self, record: ScheduleRecord, token: IdempotencyToken) -> str:
        """The tick's session from the schedule's blueprint, created once per tick (its own
        key, derived from the tick's)."""
        assert record.agent_name is not None
        spec = self.blueprints.spec(record.agent_name)
        key = IdempotencyToken(key=f"{token.key}/session", request_hash=token.request_hash)
        try:
            loaded = await self.runtime.create(
                record.tenant_id,
                session_id=None,
                metadata={"schedule_id": record.schedule_id},
                agent=spec.model_dump(),
                binding={},
                idempotency=key,
            )
        except IdempotentReplay:
            found = await self.runtime.find_idempotent(record.tenant_id, key)
            if found is None:
                raise
            return str(found.result["session_id"])
        return loaded.session.session_id

    async def fire_due_once(self) -> int:
        """One pass: fire every due tick this replica wins; returns how many it handled."""
        due = await self.store.list_due_schedules(limit=100)
        handled = await asyncio.gather(*(self._guarded(t, s) for t, s in due))
        return sum(handled)

    async def _guarded(self, tenant_id: str, schedule_id: str) -> bool:
        async with self._slots:
            try:
                return await self.fire_due(tenant_id, schedule_id)
            except Exception:  # one schedule's failure must not stop the others
                log.warning("schedule %s: firing failed; will retry", schedule_id, exc_info=True)
                return False

    async def fire_due(self, tenant_id: str, schedule_id: str) -> bool:
        """Claim the schedule's due tick and fire it, if this replica wins the claim."""
        record = await self.store.get_schedule(tenant_id, schedule_id)
        if record is None or record.status != "active":
            return False
        claimed = await self._claim(record, self._now())
        if claimed is None:
            return False
        tick = claimed.claim_tick_at
        if tick is None:
            return True  # the due ticks were missed and skipped: nothing to fire
        fire, _ = await self._fire(claimed, tick, "schedule", tick_key(schedule_id, tick))
        if fire.outcome == "started" and claimed.next_fire_at != tick:
            # run_once chose a later tick than the one due: this run stands for missed ticks.
            fire = replace(fire, reason="missed")
        recorded = await self.store.finish_schedule_tick(
            tenant_id,
            schedule_id,
            tick_at=tick,
            owner=self.owner,
            next_fire_at=await self._following(claimed, tick),
            fire=fire,
        )
        if recorded:
            self._observe(fire)
        return True

    async def _following(self, claimed: ScheduleRecord, tick: datetime) -> datetime:
        """The tick after `tick`: by the cadence as claimed, unless a PATCH re-timed the
        schedule while the tick was being fired (then the next tick the PATCH set)."""
        current = await self.store.get_schedule(claimed.tenant_id, claimed.schedule_id)
        if current is not None and current.anchor_at != claimed.anchor_at:
            if current.next_fire_at is not None:
                return current.next_fire_at
        return cadence_of_record(claimed).next_after(tick)

    async def _claim(self, record: ScheduleRecord, now: datetime) -> ScheduleRecord | None:
        """Claim the tick to fire (the row as claimed), conditionally on the version read;
        None when there is nothing to do or another replica got there first.

        A claimed tick whose claim expired (its owner died) is claimed again as it is:
        the same tick, so the same key. Otherwise the tick is decided here, once, by the
        missed-tick policy; skipped ticks are recorded in the claim's transaction, and a
        plan that fires nothing just moves the schedule on (the result's `claim_tick_at`
        is then None).
        """
        claim = {
            "claimed_by": self.owner,
            "claim_expires_at": now + timedelta(seconds=self.timing.claim_seconds),
        }
        if record.claim_tick_at is not None:
            if record.claim_expires_at is not None and record.claim_expires_at > now:
                return None
            return await self._save_claim(record, claim)
        if record.next_fire_at is None or record.next_fire_at > now:
            return None
        decided = plan(
            cadence_of_record(record),
            record.next_fire_at,
            now,
            grace=self.timing.misfire_grace_seconds,
            missed=record.missed,
        )
        skipped = [] if decided.skipped is None else [self._missed(record, *decided.skipped)]
        values: dict[str, Any] = {"next_fire_at": decided.next_fire_at}
        if decided.fire is not None:
            values = {"claim_tick_at": decided.fire, **claim}
        claimed = await self._save_claim(record, values, skipped)
        if claimed is not None:
            for fire in skipped:
                self._observe(fire)
        return claimed

    async def _save_claim(
        self, record: ScheduleRecord, values: dict[str, Any], fires: Sequence[FireRecord] = ()
    ) -> ScheduleRecord | None:
        return await self.store.save_schedule(
            record.tenant_id,
            record.schedule_id,
            expected_version=record.version,
            values=values,
            fires=fires,
        )

    def _missed(self, record: ScheduleRecord, first: datetime, count: int) -> FireRecord:
        return FireRecord(
            schedule_id=record.schedule_id,
            tick_at=first,
            trigger="schedule",
            outcome="skipped",
            reason="missed",
            ticks=count,
            run_id=None,
            session_id=record.session_id,
            created_at=self._now(),
        )

    def _observe(self, fire: FireRecord) -> None:
        if fire.outcome == "started":
            self.observer.schedule_fired(trigger=fire.trigger)
        else:
            self.observer.schedule_skipped(reason=fire.reason or fire.outcome, ticks=fire.ticks)

    # --------------------------------------------------------------------- loop

    async def _run_forever(self) -> None:
        failures = 0
        while not self._closing.is_set():
            try:
                await self.fire_due_once()
                failures = 0
            except Exception as exc:  # the database may be away for a while: keep trying
                failures += 1
                # The first failure with its traceback, then one line each, less often.
                log.warning("scheduler pass failed: %s", exc, exc_info=failures == 1)
            pause = min(self.timing.poll_seconds * 2**failures, _MAX_BACKOFF_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), pause)

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run_forever(), name="scheduler")

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop looking for ticks; a tick being fired finishes (its claim is released) within
        the grace, or is cancelled: its claim then expires and another replica fires that
        same tick under the same key, so nothing is lost or doubled."""
        self._closing.set()
        if self._loop is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._loop, grace_seconds)


def _with(fire: FireRecord, **changes: Any) -> FireRecord:
    return replace(fire, **changes)


def _started(fire: FireRecord, result: dict[str, Any]) -> FireRecord:
    return _with(
        fire,
        outcome="started",
        run_id=result["run_id"],
        session_id=result.get("session_id", fire.session_id),
    )


def _is_skip(exc: AgentSessionError) -> bool:
    """Refusals that say "not now" (the session is busy, gone, or over a limit), as opposed
    to a schedule that cannot work (a model profile this server lacks)."""
    return isinstance(exc, RunAlreadyActive | SessionNotFound | TooManyRequests | ToolCallsPending)
