"""Group commit (PostgreSQL): concurrent appends share calls and commits, and each still gets
exactly what it would have got alone."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.runtime.errors import SeqConflict, SessionNotFound
from app.runtime.ports import NewSession
from app.runtime.session.events import EventType, NewEvent
from app.runtime.webhooks.records import NewWebhook
from app.store.postgres.group_commit import AppendGroups
from app.store.stores import Stores
from app.store.tables import session_events, webhook_deliveries
from tests.conftest import TenantKey


@pytest.fixture
def pg(store: Stores) -> Stores:
    if not store.dialect == "postgresql":
        pytest.skip("group commit is PostgreSQL's (SQLite has one writer at a time)")
    return store


def _events(*payloads: str) -> str:
    """An append's events as asr_append_events takes them (a JSON array), payloads as
    given (a broken one breaks the call, as a test wants)."""
    return (
        "["
        + ",".join(
            f'{{"id":"{uuid.uuid4()}","type":"STEP_END","run_id":null,"turn_id":null,"payload":{p}}}'
            for p in payloads
        )
        + "]"
    )


def json_of(value: Any) -> Any:
    """A jsonb column as asyncpg returns it (text) or as decoded."""
    return json.loads(value) if isinstance(value, str) else value


def _event(i: int) -> NewEvent:
    return NewEvent(EventType.STEP_END, {"turn": i, "text": "x" * (i % 7)})


async def _session(store: Stores, tenant: str) -> str:
    sid = f"g-{uuid.uuid4().hex[:10]}"
    await store.ledger.create_session(
        tenant, session=NewSession(session_id=sid, metadata={}, agent={}, binding={}), events=[]
    )
    return sid


async def test_concurrent_appends_are_batched_gapless_and_in_order(
    pg: Stores, tenant: TenantKey, other_tenant: TenantKey
) -> None:
    t, u = tenant.tenant_id, other_tenant.tenant_id
    sessions = [(t, await _session(pg, t)) for _ in range(3)] + [(u, await _session(pg, u))]
    calls = 0
    original = pg.ledger.writes.append_groups._batch

    async def counting(items: list[tuple[Any, ...]]) -> dict[int, Any]:
        nonlocal calls
        calls += 1
        return await original(items)

    pg.ledger.writes.append_groups._batch = counting  # type: ignore[method-assign]
    try:

        async def writer(w: int) -> list[int]:
            tenant_id, sid = sessions[w % len(sessions)]
            seqs = []
            for i in range(25):
                result = await pg.ledger.append_events(
                    tenant_id, sid, events=[_event(i)] * (1 + i % 3)
                )
                seqs.extend(e.seq for e in result.events)
            return seqs

        results = await asyncio.gather(*(writer(w) for w in range(16)))
    finally:
        del pg.ledger.writes.append_groups._batch
    assert calls > 0  # 16 writers on a limit of 2 calls in flight: some appends shared one
    for k, (tenant_id, sid) in enumerate(sessions):
        mine = sorted(s for w, seqs in enumerate(results) if w % len(sessions) == k for s in seqs)
        assert mine == list(range(1, len(mine) + 1))  # every seq once, no gap
        async with pg.database.read(tenant_id) as conn:
            rows = (
                await conn.execute(
                    select(session_events.c.seq, session_events.c.position)
                    .where(
                        session_events.c.tenant_id == tenant_id,
                        session_events.c.session_id == sid,
                    )
                    .order_by(session_events.c.seq)
                )
            ).all()
        assert [r.seq for r in rows] == mine
        positions = [r.position for r in rows]
        assert positions == sorted(positions)  # positions follow seqs within a session


async def test_a_batch_reports_each_item_as_if_alone(pg: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    sid = await _session(pg, t)
    now = datetime.now(UTC)

    def args(session: str, expected: int | None) -> tuple[Any, ...]:
        return (
            t,
            session,
            expected,
            None,
            now,
            _events('{"n": 1}'),
            *(None,) * 7,  # no Idempotency-Key, metadata or snapshot
        )

    rows = await pg.ledger.writes.append_groups._batch(
        [args(sid, 0), args(sid, 0), args("missing", None), args(sid, 1), args(sid, None)]
    )
    assert rows[1]["appended"] and rows[1]["last_seq"] == 1
    assert not rows[2]["appended"] and rows[2]["last_seq"] == 1  # its condition saw seq 1
    assert 3 not in rows  # no such session: no row, as asr_append_events
    assert rows[4]["appended"] and rows[4]["last_seq"] == 2
    assert rows[5]["appended"] and rows[5]["last_seq"] == 3
    assert rows[1]["xact_id"] == rows[4]["xact_id"] == rows[5]["xact_id"]  # one transaction


async def test_a_batch_sent_again_after_its_commit_applies_nothing_twice(
    pg: Stores, tenant: TenantKey
) -> None:
    """A reply lost after the commit makes the group commit re-send a batch's items one by
    one: their event ids are a write token, so what committed is reported, not re-applied.
    The batch itself skips the token check (it is only ever a first attempt); sent again by
    mistake, it is refused whole by the ledger's unique event ids, never applied twice."""
    t = tenant.tenant_id
    a, b = await _session(pg, t), await _session(pg, t)
    now = datetime.now(UTC)

    def args(session: str) -> tuple[Any, ...]:
        return (t, session, None, None, now, _events("{}", "{}"), *(None,) * 7)

    groups = pg.ledger.writes.append_groups
    for items in ([args(a), args(b)], [args(a), args(b), args(a)]):  # together, one by one
        first = await groups._batch(items)
        with pytest.raises(DBAPIError):
            await groups._batch(items)
        alone = [await groups._single(item, fresh=False) for item in items]
        for i, row in enumerate(alone, start=1):
            assert row["appended"] and row["first_seq"] == first[i]["first_seq"]
            assert row["positions"] == first[i]["positions"]
    assert [e.seq for e in await pg.ledger.list_events(t, a)] == [1, 2, 3, 4, 5, 6]
    assert [e.seq for e in await pg.ledger.list_events(t, b)] == [1, 2, 3, 4]


async def test_a_failing_batch_is_retried_item_by_item(pg: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    good, bad = await _session(pg, t), await _session(pg, t)
    groups = pg.ledger.writes.append_groups
    now = datetime.now(UTC)

    def args(session: str, payload: str) -> tuple[Any, ...]:
        return (
            t,
            session,
            None,
            None,
            now,
            _events(payload),
            *(None,) * 7,  # no Idempotency-Key, metadata or snapshot
        )

    # Fill the calls in flight so that the next appends queue and go out as one batch.
    gate = asyncio.Event()
    original = groups._single

    async def held(a: tuple[Any, ...], *, fresh: bool) -> Any:
        await gate.wait()
        return await original(a, fresh=fresh)

    groups._single = held  # type: ignore[method-assign]
    try:
        blockers = [
            asyncio.create_task(groups.append(args(good, "{}"))) for _ in range(groups.max_inflight)
        ]
        await asyncio.sleep(0.05)
        queued = [
            asyncio.create_task(groups.append(args(good, '{"ok": 1}'))),
            asyncio.create_task(groups.append(args(bad, "not json"))),
            asyncio.create_task(groups.append(args(good, '{"ok": 2}'))),
        ]
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(*blockers)
        first, broken, third = await asyncio.gather(*queued, return_exceptions=True)
    finally:
        del groups._single
    assert isinstance(broken, DBAPIError)
    assert first["appended"] and third["appended"]
    session = await pg.ledger.get_session(t, good)
    assert session is not None and session.last_seq == groups.max_inflight + 2
    assert (await pg.ledger.get_session(t, bad)).last_seq == 0  # type: ignore[union-attr]


async def test_refusals_through_the_store_are_unchanged(pg: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    sid = await _session(pg, t)

    async def conflicting() -> None:
        await pg.ledger.append_events(t, sid, events=[_event(1)], expected_seq=0)

    outcomes = await asyncio.gather(*(conflicting() for _ in range(8)), return_exceptions=True)
    assert sum(o is None for o in outcomes) == 1
    assert all(isinstance(o, SeqConflict) for o in outcomes if o is not None)
    with pytest.raises(SessionNotFound):
        await pg.ledger.append_events(t, "no-such-session", events=[_event(1)])


async def test_a_batch_of_one_tenants_distinct_sessions_goes_together_with_the_same_rows(
    pg: Stores, tenant: TenantKey
) -> None:
    """One tenant, each session once: the batch takes its set-based way (one UPDATE of the
    session rows), and each item still gets what it would have got alone."""
    t = tenant.tenant_id
    a, b, c, d = [await _session(pg, t) for _ in range(4)]
    created = await pg.ledger.get_session(t, c)
    assert created is not None
    v = created.version
    now = datetime.now(UTC)

    def args(
        session: str, expected: int | None, version: int | None = None, **extra: Any
    ) -> tuple[Any, ...]:
        return (
            t,
            session,
            expected,
            version,
            now,
            extra.get("events", _events('{"n": 1}', '{"n": 2}')),
            None,
            None,
            None,
            extra.get("metadata"),
            None,
            None,
            None,
        )

    rows = await pg.ledger.writes.append_groups._batch(
        [
            args(a, 0),
            args(b, 5),  # stale: refused, with the row as it is
            args("missing", None),
            args(c, None, v, metadata='{"team": "x"}'),
            args(d, None, events="[]"),  # no events: the version moves, no seq
        ]
    )
    assert rows[1]["appended"] and (rows[1]["first_seq"], rows[1]["last_seq"]) == (1, 2)
    assert len(rows[1]["positions"]) == 2 and rows[1]["version"] == v + 1
    assert not rows[2]["appended"] and rows[2]["last_seq"] == 0 and rows[2]["xact_id"] is None
    assert 3 not in rows
    assert rows[4]["appended"] and json_of(rows[4]["metadata"]) == {"team": "x"}
    assert rows[5]["appended"] and rows[5]["first_seq"] == 1 and rows[5]["last_seq"] == 0
    assert list(rows[5]["positions"]) == [] and rows[5]["version"] == v + 1
    assert rows[1]["xact_id"] == rows[4]["xact_id"] == rows[5]["xact_id"]
    assert [e.seq for e in await pg.ledger.list_events(t, a)] == [1, 2]
    assert [e.seq for e in await pg.ledger.list_events(t, b)] == []
    session = await pg.ledger.get_session(t, c)
    assert session is not None and session.metadata == {"team": "x"} and session.last_seq == 2

    again = await pg.ledger.writes.append_groups._batch([args(a, 0)])  # a lone item: no write
    assert not again[1]["appended"] and again[1]["last_seq"] == 2


async def test_a_together_batch_fills_the_webhook_outbox(pg: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    await pg.webhooks.create_webhook(
        t,
        NewWebhook(
            webhook_id="wh_batch",
            event_types=["STEP_END"],
            url="https://example.com/hook",
            session_id=None,
            metadata_filter=None,
            description=None,
            secret="whsec_" + "A" * 44,
        ),
    )
    try:
        a, b = await _session(pg, t), await _session(pg, t)
        now = datetime.now(UTC)
        items = [(t, s, None, None, now, _events("{}", "{}"), *(None,) * 7) for s in (a, b)]
        await pg.ledger.writes.append_groups._batch(items)
        d = webhook_deliveries.c
        async with pg.database.read(t) as conn:
            rows = await conn.execute(
                select(d.session_id, d.seq).where(d.tenant_id == t).order_by(d.session_id, d.seq)
            )
            assert sorted(tuple(r) for r in rows.all()) == sorted([(a, 1), (a, 2), (b, 1), (b, 2)])
    finally:
        await pg.webhooks.delete_webhook(t, "wh_batch")


def test_a_second_call_goes_out_only_for_as_many_appends_as_are_in_flight() -> None:
    groups = AppendGroups(cast(AsyncEngine, None), in_transaction=False, max_inflight=2)
    assert groups._may_send(1)  # nothing in flight: a lone writer goes at once
    groups._inflight, groups._items = 1, 1
    assert groups._may_send(1)  # two writers go side by side
    groups._inflight, groups._items = 1, 8
    assert not groups._may_send(3)  # a few wait for the batch of eight in flight
    assert groups._may_send(8)  # as many go out beside it
    groups._inflight, groups._items = 2, 2
    assert not groups._may_send(40)  # never more than two calls
