"""A run's writes, on the backend this run uses (the writer's driver SQL on SQLite, stored
functions on PostgreSQL): the same contract on both, the same rows and the same refusals."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.runtime.errors import (
    RunAlreadyActive,
    RunFenced,
    SessionNotFound,
    StaleSession,
    TooManyRequests,
)
from app.runtime.ports import NewRun, NewSession, RunFinish
from app.runtime.session.events import EventType, NewEvent
from app.store.stores import Stores
from app.store.tables import runs, session_events
from tests.conftest import TenantKey


def _lease() -> datetime:
    return datetime.now(UTC) + timedelta(minutes=5)


def _event(kind: EventType, run_id: str, **payload: Any) -> NewEvent:
    return NewEvent(kind, payload, run_id, f"{run_id}.t1")


async def _session(store: Stores, tenant: str) -> str:
    sid = f"s-{uuid.uuid4().hex[:10]}"
    await store.ledger.create_session(
        tenant, session=NewSession(session_id=sid, metadata={}, agent={}, binding={}), events=[]
    )
    return sid


async def _start(store: Stores, tenant: str, sid: str, **kw: Any) -> Any:
    run_id = f"run_{uuid.uuid4().hex}"
    run = NewRun(
        run_id=run_id,
        input={"text": "hi"},
        options={"mode": "wait"},
        owner="test",
        lease_until=_lease(),
    )
    return await store.runs.start_run(
        tenant,
        sid,
        run=run,
        start_events=[_event(EventType.RUN_STARTED, run_id, input="hi")],
        **kw,
    )


async def _rows(store: Stores, tenant: str, sid: str) -> tuple[list[Any], list[Any]]:
    async with store.database.read(tenant) as conn:
        events = (
            await conn.execute(
                select(session_events)
                .where(session_events.c.tenant_id == tenant, session_events.c.session_id == sid)
                .order_by(session_events.c.seq)
            )
        ).all()
        run_rows = (
            await conn.execute(
                select(runs).where(runs.c.tenant_id == tenant, runs.c.session_id == sid)
            )
        ).all()
    return list(events), list(run_rows)


@pytest.fixture
def writer(store: Stores) -> Stores:
    return store


async def test_a_run_starts_steps_and_finishes(writer: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    sid = await _session(writer, t)
    run, started = await _start(writer, t, sid)
    assert run.status == "running" and (run.first_seq, run.last_seq) == (1, 1)
    assert started.session.active_run_id == run.run_id and started.session.status == "running"
    assert [e.seq for e in started.events] == [1]

    step = await writer.runs.append_run_events(
        t,
        run.run_id,
        session_id=sid,
        epoch=run.epoch,
        events=[_event(EventType.STEP_START, run.run_id, turn=1)] * 2,
        lease_until=_lease(),
        progress={"turns": 1, "usage": {"total_tokens": 3}},
    )
    assert [e.seq for e in step.events] == [2, 3] and step.run is None
    assert step.events[0].position < step.events[1].position

    end = await writer.runs.append_run_events(
        t,
        run.run_id,
        session_id=sid,
        epoch=run.epoch,
        events=[_event(EventType.RUN_FINISHED, run.run_id, status="finished")],
        lease_until=_lease(),
        progress={"turns": 1, "usage": {"total_tokens": 5}},
        finish=RunFinish("finished", "COMPLETED", "done", None),
    )
    assert end.session.active_run_id is None and end.session.status == "idle"
    assert end.session.last_seq == 4
    assert end.run is not None
    assert (end.run.status, end.run.stop_reason, end.run.output) == (
        "finished",
        "COMPLETED",
        "done",
    )
    assert end.run.usage == {"total_tokens": 5} and end.run.turns == 1 and end.run.last_seq == 4
    assert end.run.lease_expires_at is None and end.run.finished_at is not None

    events, _ = await _rows(writer, t, sid)
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert [e.event_id for e in events] == [
        e.event_id for e in [*started.events, *step.events, *end.events]
    ]


async def test_each_write_returns_the_run_as_a_read_finds_it(
    writer: Stores, tenant: TenantKey
) -> None:
    """The record a write returns is built from the row it wrote (on SQLite, from driver
    SQL's text): it must equal what a later read decodes, column for column."""
    t = tenant.tenant_id
    run, _ = await _start(writer, t, await _session(writer, t))
    assert run == await writer.runs.get_run(t, run.run_id)
    end = await writer.runs.append_run_events(
        t,
        run.run_id,
        session_id=run.session_id,
        epoch=run.epoch,
        events=[_event(EventType.RUN_FINISHED, run.run_id, status="failed")],
        lease_until=_lease(),
        progress={"turns": 2, "usage": {"input_tokens": 7, "cost": 0.25}},
        finish=RunFinish("failed", None, None, {"type": "about:blank", "title": "é ✓"}),
    )
    assert end.run is not None and end.run == await writer.runs.get_run(t, run.run_id)
    assert end.run.error == {"type": "about:blank", "title": "é ✓"}
    assert end.run.usage == {"input_tokens": 7, "cost": 0.25} and end.run.turns == 2

    sid = await _session(writer, t)
    queued = await writer.runs.enqueue_run(
        t,
        sid,
        run=NewRun(f"run_{uuid.uuid4().hex}", None, {"mode": "wait"}, "test", _lease()),
    )
    assert queued == await writer.runs.get_run(t, queued.run_id) and queued.input is None
    claimed, _ = await writer.runs.claim_run(
        t,
        queued.run_id,
        owner="replica-2",
        lease_until=_lease(),
        events=[_event(EventType.RUN_STARTED, queued.run_id, input=None)],
    )
    assert claimed == await writer.runs.get_run(t, queued.run_id)
    assert (claimed.status, claimed.lease_owner, claimed.first_seq) == ("running", "replica-2", 1)


async def test_refused_starts_write_nothing(writer: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    with pytest.raises(SessionNotFound):
        await _start(writer, t, "no-such-session")
    sid = await _session(writer, t)
    first, _ = await _start(writer, t, sid)
    with pytest.raises(RunAlreadyActive) as active:
        await _start(writer, t, sid)
    assert active.value.extra.get("active_run_id") == first.run_id
    other = await _session(writer, t)
    with pytest.raises(TooManyRequests):
        await _start(writer, t, other, max_live_runs=1)
    events, run_rows = await _rows(writer, t, other)
    assert events == [] and run_rows == []
    events, run_rows = await _rows(writer, t, sid)
    assert len(events) == 1 and len(run_rows) == 1


async def test_a_fenced_step_rolls_back_its_reservation(writer: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    sid = await _session(writer, t)
    run, _ = await _start(writer, t, sid)
    assert await writer.runs.fence_run(t, run.run_id, stop_reason="CANCELLED") is not None
    with pytest.raises(RunFenced):
        await writer.runs.append_run_events(
            t,
            run.run_id,
            session_id=sid,
            epoch=run.epoch,
            events=[_event(EventType.STEP_START, run.run_id, turn=1)],
            lease_until=_lease(),
        )
    session = await writer.ledger.get_session(t, sid)
    assert session is not None and session.last_seq == 1
    events, _ = await _rows(writer, t, sid)
    assert [e.seq for e in events] == [1]


async def test_a_step_of_another_tenants_run_is_fenced(
    writer: Stores, tenant: TenantKey, other_tenant: TenantKey
) -> None:
    sid = await _session(writer, tenant.tenant_id)
    run, _ = await _start(writer, tenant.tenant_id, sid)
    await _session(writer, other_tenant.tenant_id)
    with pytest.raises((RunFenced, SessionNotFound)):
        await writer.runs.append_run_events(
            other_tenant.tenant_id,
            run.run_id,
            session_id=sid,
            epoch=run.epoch,
            events=[_event(EventType.STEP_START, run.run_id, turn=1)],
            lease_until=_lease(),
        )
    events, _ = await _rows(writer, tenant.tenant_id, sid)
    assert [e.seq for e in events] == [1]


async def test_a_start_conditional_on_a_stale_view_is_refused(
    writer: Stores, tenant: TenantKey
) -> None:
    t = tenant.tenant_id
    sid = await _session(writer, t)
    seen = await writer.ledger.get_session(t, sid)
    assert seen is not None
    await writer.ledger.append_events(t, sid, events=[_event(EventType.STEP_END, "x", turn=1)])
    with pytest.raises(StaleSession):
        await _start(writer, t, sid, expected=(seen.version, seen.created_at))
    events, run_rows = await _rows(writer, t, sid)
    assert len(events) == 1 and run_rows == []
    now = await writer.ledger.get_session(t, sid)
    assert now is not None
    run, started = await _start(writer, t, sid, expected=(now.version, now.created_at))
    assert started.session.version == now.version + 1 and run.first_seq == 2
    # A recreated session with the same id and version is another incarnation.
    await writer.ledger.delete_session(t, sid)
    await _session_with_id(writer, t, sid)
    again = await writer.ledger.get_session(t, sid)
    assert again is not None
    with pytest.raises(StaleSession):
        await _start(writer, t, sid, expected=(again.version, now.created_at))


async def _session_with_id(store: Stores, tenant: str, sid: str) -> None:
    await store.ledger.create_session(
        tenant, session=NewSession(session_id=sid, metadata={}, agent={}, binding={}), events=[]
    )


async def test_the_sweeper_lists_expired_leases_and_finished_runs_still_holding_a_session(
    writer: Stores, tenant: TenantKey
) -> None:
    """Both kinds of `list_stale_runs` (the second from the partial index of sessions that
    hold a run, migration 0013), and not a live run with a lease ahead of it."""
    t = tenant.tenant_id
    live, _ = await _start(writer, t, await _session(writer, t))
    expired, _ = await _start(writer, t, await _session(writer, t))
    dangling, _ = await _start(writer, t, await _session(writer, t))
    async with writer.database.write(t) as conn:
        await conn.execute(
            runs.update()
            .where(runs.c.tenant_id == t, runs.c.run_id == expired.run_id)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
        # A run closed while its session kept pointing at it (what the sweeper mends).
        await conn.execute(
            runs.update()
            .where(runs.c.tenant_id == t, runs.c.run_id == dangling.run_id)
            .values(status="completed")
        )
    # Across tenants: other tests' stale runs may come first, so no small limit.
    stale = {r.run_id for r in await writer.maintenance.list_stale_runs(limit=100_000)}
    assert expired.run_id in stale and dangling.run_id in stale
    assert live.run_id not in stale
