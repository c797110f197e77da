"""Schedules on each backend: a tick fires once whoever races for it, a crash at any point
between the claim and the record neither loses the tick nor fires it twice, the missed-tick
and multitask policies, pause and resume, blueprint targets, and tenant walls.

The schedulers here get a clock of the test's (`Clock`), so ticks are due when the test says;
their runs are real runs of the scripted model on the backend under test. The clock starts
in the future: by the database's clock no schedule here is ever due, so no other scheduler
on the same database (a test app's, a test server's) fires them behind the test's back.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from app.assembly import runtime_over
from app.runtime.models.scripted import ScriptedModel
from app.runtime.ports import IdempotencyToken, NewSession
from app.runtime.runs.agent import AgentSpec
from app.runtime.runs.blueprints import Blueprint, Blueprints
from app.runtime.runs.manager import RunManager
from app.runtime.runs.plan import RunRequest
from app.runtime.schedules.cadence import InvalidSchedule
from app.runtime.schedules.service import (
    ScheduleNotFound,
    Scheduler,
    SchedulerTiming,
    ScheduleSpec,
    tick_key,
)
from app.runtime.tools.registry import ToolRegistry
from app.store.stores import Stores
from tests.conftest import TenantKey

T0 = datetime(2100, 1, 4, 12, 0, tzinfo=UTC)
TIMING = SchedulerTiming(poll_seconds=0.1, claim_seconds=10, misfire_grace_seconds=5)


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@dataclass
class Replica:
    runs: RunManager
    scheduler: Scheduler


@pytest.fixture
async def replicas(store: Stores) -> AsyncIterator[tuple[Clock, Replica, Replica]]:
    """Two schedulers on one database, as two replicas would be (their own owners)."""
    clock = Clock(T0)
    blueprints = Blueprints({"helper": Blueprint("helper", None, AgentSpec())})
    made = []
    for name in ("a", "b"):
        runtime = runtime_over(store)
        runs = RunManager(
            runtime,
            models={"scripted": ScriptedModel()},
            tools=ToolRegistry(),
            owner=f"replica-{name}-{uuid.uuid4().hex[:6]}",
        )
        scheduler = Scheduler(
            store.schedules, runtime, runs, blueprints=blueprints, timing=TIMING, now=clock
        )
        made.append(Replica(runs, scheduler))
    yield clock, made[0], made[1]
    for replica in made:
        await replica.runs.shutdown(grace_seconds=5)


async def _session(store: Stores, tenant: TenantKey) -> str:
    sid = f"s-{uuid.uuid4().hex[:10]}"
    await store.ledger.create_session(
        tenant.tenant_id,
        session=NewSession(session_id=sid, metadata={}, agent={}, binding={}),
        events=[],
    )
    return sid


async def _runs(store: Stores, tenant: TenantKey, sid: str) -> list[str]:
    return [r.run_id for r in await store.runs.list_runs(tenant.tenant_id, sid)]


async def _settle(replica: Replica) -> None:
    """Let the runs this replica started finish (bounded)."""
    for _ in range(100):
        if replica.runs.active_count() == 0:
            return
        await asyncio.sleep(0.05)


async def test_a_due_tick_fires_once_however_many_replicas_race_for_it(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    clock, a, b = replicas
    sid = await _session(store, tenant)
    spec = ScheduleSpec(session_id=sid, input="tick", interval_seconds=60)
    schedule = await a.scheduler.create(tenant.tenant_id, spec)
    assert schedule.next_fire_at == T0 + timedelta(seconds=60)
    assert not await a.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)  # not due
    clock.advance(60.5)
    outcomes = await asyncio.gather(
        *(r.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id) for r in (a, b, a, b))
    )
    assert sum(outcomes) == 1
    for replica in (a, b):
        await _settle(replica)
    fires = await a.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
    assert [(f.outcome, f.tick_at) for f in fires] == [("started", T0 + timedelta(seconds=60))]
    assert await _runs(store, tenant, sid) == [fires[0].run_id]
    after = await a.scheduler.get(tenant.tenant_id, schedule.schedule_id)
    assert after.next_fire_at == T0 + timedelta(seconds=120)
    assert after.claim_tick_at is None and after.last_fired_at is not None


async def test_a_claim_whose_replica_died_before_the_start_is_fired_by_another(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    clock, a, b = replicas
    sid = await _session(store, tenant)
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=60)
    )
    clock.advance(60)
    record = await a.scheduler.get(tenant.tenant_id, schedule.schedule_id)
    claimed = await a.scheduler._claim(record, clock())  # a claims, then dies
    assert claimed is not None and claimed.claim_tick_at == T0 + timedelta(seconds=60)
    assert not await b.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)  # held
    clock.advance(TIMING.claim_seconds + 1)
    assert await b.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)
    await _settle(b)
    fires = await b.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
    assert [f.tick_at for f in fires] == [T0 + timedelta(seconds=60)]  # the claimed tick
    assert await _runs(store, tenant, sid) == [fires[0].run_id]


async def test_a_replica_that_died_after_the_start_leaves_no_second_run(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    clock, a, b = replicas
    sid = await _session(store, tenant)
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=60)
    )
    clock.advance(60)
    record = await a.scheduler.get(tenant.tenant_id, schedule.schedule_id)
    claimed = await a.scheduler._claim(record, clock())
    assert claimed is not None and claimed.claim_tick_at is not None
    tick = claimed.claim_tick_at
    first, _ = await a.scheduler._fire(
        claimed, tick, "schedule", tick_key(claimed.schedule_id, tick)
    )
    await _settle(a)  # ... the run started, and a died before recording the tick
    clock.advance(TIMING.claim_seconds + 1)
    assert await b.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)
    fires = await b.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
    assert [(f.outcome, f.run_id) for f in fires] == [("started", first.run_id)]
    assert await _runs(store, tenant, sid) == [first.run_id]


@pytest.mark.parametrize(("missed", "runs"), [("skip", 0), ("run_once", 1)])
async def test_missed_ticks_are_skipped_or_run_once(
    store: Stores,
    tenant: TenantKey,
    replicas: tuple[Clock, Replica, Replica],
    missed: str,
    runs: int,
) -> None:
    clock, a, _ = replicas
    sid = await _session(store, tenant)
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=10, missed=missed)
    )
    clock.advance(100)  # ticks at +10 .. +90 are older than the 5 s grace; +100 is on time
    assert await a.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)
    await _settle(a)
    fires = await a.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
    assert len(await _runs(store, tenant, sid)) == runs
    skipped = [f for f in fires if f.outcome == "skipped"]
    assert [(f.reason, f.tick_at, f.ticks) for f in skipped] == [
        ("missed", T0 + timedelta(seconds=10), 9 - runs)
    ]
    if runs:
        (started,) = [f for f in fires if f.outcome == "started"]
        assert started.tick_at == T0 + timedelta(seconds=90)  # the newest missed tick
        assert started.reason == "missed"  # a run standing for missed ticks
    after = await a.scheduler.get(tenant.tenant_id, schedule.schedule_id)
    assert after.next_fire_at == T0 + timedelta(seconds=100)  # on time: fired next pass


async def test_a_tick_on_a_busy_session_is_skipped(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    clock, a, _ = replicas
    sid = await _session(store, tenant)
    busy = await a.runs.start(tenant.tenant_id, sid, RunRequest(input="[sleep:3000]"))
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=60, multitask="skip")
    )
    clock.advance(60)
    assert await a.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)
    fires = await a.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
    assert [(f.outcome, f.reason) for f in fires] == [("skipped", "run_in_progress")]
    assert await _runs(store, tenant, sid) == [busy.run_id]
    await a.runs.cancel(tenant.tenant_id, sid, busy.run_id)


async def test_an_enqueued_tick_waits_for_the_active_run(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    clock, a, _ = replicas
    sid = await _session(store, tenant)
    busy = await a.runs.start(tenant.tenant_id, sid, RunRequest(input="[sleep:300]"))
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=60, multitask="enqueue")
    )
    clock.advance(60)
    assert await a.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)
    await _settle(a)
    fires = await a.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
    assert [f.outcome for f in fires] == ["started"]
    runs = await store.runs.list_runs(tenant.tenant_id, sid)
    assert {r.run_id for r in runs} == {busy.run_id, fires[0].run_id}
    assert {r.status for r in runs} == {"finished"}


async def test_pause_stops_ticks_and_resume_starts_from_now(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    clock, a, _ = replicas
    sid = await _session(store, tenant)
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=60)
    )
    paused = await a.scheduler.pause(tenant.tenant_id, schedule.schedule_id)
    assert paused.status == "paused" and paused.next_fire_at is None
    clock.advance(600)
    assert not await a.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)
    resumed = await a.scheduler.resume(tenant.tenant_id, schedule.schedule_id)
    assert resumed.status == "active"
    assert resumed.next_fire_at == T0 + timedelta(seconds=660)  # the grid's next after now
    assert await a.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10) == []


async def test_a_schedule_paused_while_its_tick_fires_stays_paused(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    clock, a, _ = replicas
    sid = await _session(store, tenant)
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=60)
    )
    clock.advance(60)
    record = await a.scheduler.get(tenant.tenant_id, schedule.schedule_id)
    claimed = await a.scheduler._claim(record, clock())
    assert claimed is not None and claimed.claim_tick_at is not None
    await a.scheduler.pause(tenant.tenant_id, schedule.schedule_id)  # mid-tick
    tick = claimed.claim_tick_at
    fire, _ = await a.scheduler._fire(
        claimed, tick, "schedule", tick_key(claimed.schedule_id, tick)
    )
    assert await store.schedules.finish_schedule_tick(
        tenant.tenant_id,
        schedule.schedule_id,
        tick_at=tick,
        owner=a.scheduler.owner,
        next_fire_at=tick + timedelta(seconds=60),
        fire=fire,
    )
    await _settle(a)
    after = await a.scheduler.get(tenant.tenant_id, schedule.schedule_id)
    assert after.status == "paused" and after.next_fire_at is None
    assert after.claim_tick_at is None and after.last_fired_at is not None


async def test_a_blueprint_schedule_runs_each_tick_on_a_new_session(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    clock, a, b = replicas
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(agent_name="helper", input="hi", cron="*/5 * * * *")
    )
    assert schedule.next_fire_at == T0 + timedelta(minutes=5)
    for replica in (a, b):
        clock.advance(300)
        assert await replica.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)
        await _settle(replica)
    fires = await a.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
    sessions = {f.session_id for f in fires}
    assert len(sessions) == 2 and all(f.outcome == "started" for f in fires)
    for sid in sessions:
        assert sid is not None
        session = await store.ledger.get_session(tenant.tenant_id, sid)
        assert session is not None and session.metadata == {"schedule_id": schedule.schedule_id}


async def test_trigger_fires_now_and_a_keyed_retry_gets_the_same_run(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    _, a, b = replicas
    sid = await _session(store, tenant)
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=3600, paused=True)
    )
    token = tick_key(schedule.schedule_id, T0)  # any key: the client's Idempotency-Key
    first = await a.scheduler.trigger(tenant.tenant_id, schedule.schedule_id, idempotency=token)
    await _settle(a)
    again = await b.scheduler.trigger(tenant.tenant_id, schedule.schedule_id, idempotency=token)
    assert first.outcome == again.outcome == "started" and first.run_id == again.run_id
    assert await _runs(store, tenant, sid) == [first.run_id]
    fires = await a.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
    assert [(f.trigger, f.run_id) for f in fires] == [("manual", first.run_id)]


async def test_due_schedules_are_listed_across_tenants_and_walled_otherwise(
    store: Stores,
    tenant: TenantKey,
    other_tenant: TenantKey,
    replicas: tuple[Clock, Replica, Replica],
) -> None:
    clock, a, _ = replicas
    clock.at = datetime.now(UTC) - timedelta(hours=1)  # created an hour ago: due by now
    sid = await _session(store, tenant)
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=60)
    )
    due = await store.schedules.list_due_schedules(limit=10_000)
    if (tenant.tenant_id, schedule.schedule_id) not in due:
        # Due by the database's clock: another scheduler on this database (a test app's)
        # may have got to it first, and skipped its missed ticks.
        fires = await a.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
        assert [f.reason for f in fires] == ["missed"], due
    with pytest.raises(ScheduleNotFound):
        await a.scheduler.get(other_tenant.tenant_id, schedule.schedule_id)
    with pytest.raises(ScheduleNotFound):
        await a.scheduler.delete(other_tenant.tenant_id, schedule.schedule_id)
    await a.scheduler.pause(tenant.tenant_id, schedule.schedule_id)
    due = await store.schedules.list_due_schedules(limit=10_000)
    assert (tenant.tenant_id, schedule.schedule_id) not in due


@pytest.mark.parametrize(
    "spec",
    [
        ScheduleSpec(session_id="x", cron="61 * * * *"),
        ScheduleSpec(session_id="x", cron="* * * *"),
        ScheduleSpec(session_id="x", cron="0 9 * * *", timezone="Mars/Olympus"),
        ScheduleSpec(session_id="x"),
        ScheduleSpec(session_id="x", cron="* * * * *", interval_seconds=5),
        ScheduleSpec(cron="* * * * *"),
        ScheduleSpec(session_id="x", agent_name="helper", cron="* * * * *"),
        ScheduleSpec(session_id="x", interval_seconds=60, missed="sometimes"),
    ],
)
async def test_bad_schedules_are_refused(
    store: Stores,
    tenant: TenantKey,
    replicas: tuple[Clock, Replica, Replica],
    spec: ScheduleSpec,
) -> None:
    _, a, _ = replicas
    with pytest.raises(InvalidSchedule):
        await a.scheduler.create(tenant.tenant_id, spec)


async def test_a_tick_whose_key_the_tenant_took_fails_and_moves_on(
    store: Stores, tenant: TenantKey, replicas: tuple[Clock, Replica, Replica]
) -> None:
    clock, a, _ = replicas
    sid = await _session(store, tenant)
    schedule = await a.scheduler.create(
        tenant.tenant_id, ScheduleSpec(session_id=sid, interval_seconds=60)
    )
    tick = T0 + timedelta(seconds=60)
    taken = IdempotencyToken(key=tick_key(schedule.schedule_id, tick).key, request_hash="other")
    await store.ledger.append_events(tenant.tenant_id, sid, events=[], idempotency=taken)
    clock.advance(60)
    assert await a.scheduler.fire_due(tenant.tenant_id, schedule.schedule_id)
    fires = await a.scheduler.fires(tenant.tenant_id, schedule.schedule_id, limit=10)
    assert [(f.outcome, f.reason) for f in fires] == [("failed", "idempotency_key_reused")]
    after = await a.scheduler.get(tenant.tenant_id, schedule.schedule_id)
    assert after.next_fire_at == tick + timedelta(seconds=60) and after.claim_tick_at is None
