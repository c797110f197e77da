"""The webhook outbox and delivery log, on each backend (issue #20).

The outbox rows come from the database (PostgreSQL: `asr_insert_events`, migration 0015;
SQLite: the trigger of migration 0010), in the transaction of the events: these tests write
events through the ordinary store writes and look at what the database
left, including for a write that rolls back, a fork's copied prefix, and the filters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.runtime.errors import SeqConflict
from app.runtime.ports import NewSession
from app.runtime.session.events import EventType, NewEvent
from app.runtime.webhooks.records import DELIVERED, PENDING, Claim, NewWebhook, Outcome
from app.store.base import utcnow
from app.store.stores import Stores
from app.store.tables import webhook_deliveries
from tests.conftest import TenantKey

OWNER = "contract-test"


def _hook(webhook_id: str, types: list[str], **extra: object) -> NewWebhook:
    base: dict = {
        "url": "https://example.com/hook",
        "session_id": None,
        "metadata_filter": None,
        "description": None,
        "secret": "whsec_" + "A" * 44,
    }
    base.update(extra)
    return NewWebhook(webhook_id=webhook_id, event_types=types, **base)


def _items(n: int) -> list[NewEvent]:
    return [
        NewEvent(
            EventType.MEMORY_ITEMS_APPENDED,
            {"items": [{"type": "message", "role": "user", "content": f"m{i}"}]},
        )
        for i in range(n)
    ]


def _session(session_id: str, metadata: dict | None = None) -> NewSession:
    return NewSession(session_id=session_id, metadata=metadata or {}, agent={}, binding={})


async def _outbox(store: Stores, tenant_id: str) -> list[tuple[str, str, int, str]]:
    d = webhook_deliveries.c
    async with store.database.read(tenant_id) as conn:
        rows = await conn.execute(
            select(d.webhook_id, d.session_id, d.seq, d.event_type)
            .where(d.tenant_id == tenant_id)
            .order_by(d.webhook_id, d.session_id, d.seq)
        )
        return [tuple(r) for r in rows.all()]


async def _claim(store: Stores, owner: str, lease_seconds: int) -> list[Claim]:
    """Everything due, across tenants: the claim takes the oldest due first and other tests
    leave due deliveries in the shared database, so a small limit could stop short of this
    test's rows. Callers keep their own tenant's."""
    return await store.webhooks.claim_webhook_deliveries(
        owner=owner, limit=100_000, lease_seconds=lease_seconds
    )


@pytest.fixture
async def hooks(store: Stores, tenant: TenantKey) -> AsyncIterator[list[str]]:
    """The test's subscriptions, deleted afterwards (a claim spans tenants)."""
    made: list[str] = []
    yield made
    for webhook_id in made:
        await store.webhooks.delete_webhook(tenant.tenant_id, webhook_id)


async def test_no_subscription_writes_no_outbox_row(store: Stores, tenant: TenantKey) -> None:
    await store.ledger.create_session(tenant.tenant_id, session=_session("s"), events=_items(3))
    assert await _outbox(store, tenant.tenant_id) == []


async def test_a_matching_event_is_in_the_outbox_in_its_own_transaction(
    store: Stores, tenant: TenantKey, hooks: list[str]
) -> None:
    t = tenant.tenant_id
    await store.webhooks.create_webhook(t, _hook("wh_items", ["MEMORY_ITEMS_APPENDED"]))
    await store.webhooks.create_webhook(t, _hook("wh_all", ["*"]))
    await store.webhooks.create_webhook(t, _hook("wh_none", ["RUN_FINISHED"]))
    hooks.extend(["wh_items", "wh_all", "wh_none"])
    await store.ledger.create_session(t, session=_session("s"), events=_items(2))
    # A write that fails (a stale expected seq) leaves no delivery behind.
    with pytest.raises(SeqConflict):
        await store.ledger.append_events(t, "s", events=_items(1), expected_seq=0)
    await store.ledger.append_events(t, "s", events=_items(1), expected_seq=2)
    assert await _outbox(store, t) == [
        ("wh_all", "s", 1, "MEMORY_ITEMS_APPENDED"),
        ("wh_all", "s", 2, "MEMORY_ITEMS_APPENDED"),
        ("wh_all", "s", 3, "MEMORY_ITEMS_APPENDED"),
        ("wh_items", "s", 1, "MEMORY_ITEMS_APPENDED"),
        ("wh_items", "s", 2, "MEMORY_ITEMS_APPENDED"),
        ("wh_items", "s", 3, "MEMORY_ITEMS_APPENDED"),
    ]


async def test_session_metadata_and_state_filters_and_fork_prefix(
    store: Stores, tenant: TenantKey, other_tenant: TenantKey, hooks: list[str]
) -> None:
    t = tenant.tenant_id
    await store.webhooks.create_webhook(t, _hook("wh_one", ["*"], session_id="a"))
    await store.webhooks.create_webhook(
        t, _hook("wh_team", ["*"], metadata_filter={"team": "x", "n": 2})
    )
    await store.webhooks.create_webhook(t, _hook("wh_off", ["*"]))
    await store.webhooks.update_webhook(t, "wh_off", {"state": "disabled"})
    hooks.extend(["wh_one", "wh_team", "wh_off"])
    await store.ledger.create_session(t, session=_session("a"), events=_items(1))
    await store.ledger.create_session(
        t, session=_session("b", {"team": "x", "n": 2}), events=_items(1)
    )
    await store.ledger.create_session(
        t, session=_session("c", {"team": "x", "n": 3}), events=_items(1)
    )
    # Another tenant's events never reach this tenant's subscriptions.
    await store.ledger.create_session(
        other_tenant.tenant_id, session=_session("a"), events=_items(1)
    )
    # A fork copies b's event 1 (history, not news); its own new events are delivered.
    await store.ledger.fork_session(
        t,
        "b",
        at_seq=1,
        session=_session("b2", {"team": "x", "n": 2}),
        events=[NewEvent(EventType.SESSION_FORKED, {"parent_session_id": "b"})],
    )
    outbox = await _outbox(store, t)
    assert ("wh_one", "a", 1, "MEMORY_ITEMS_APPENDED") in outbox
    assert {(w, s) for w, s, *_ in outbox} == {("wh_one", "a"), ("wh_team", "b"), ("wh_team", "b2")}
    assert [(seq, kind) for _, s, seq, kind in outbox if s == "b2"] == [(2, "SESSION_FORKED")]


async def test_claims_are_in_order_per_session_and_settle_once(
    store: Stores, tenant: TenantKey, hooks: list[str]
) -> None:
    t = tenant.tenant_id
    await store.webhooks.create_webhook(t, _hook("wh_order", ["*"]))
    hooks.append("wh_order")
    await store.ledger.create_session(t, session=_session("s1"), events=_items(3))
    await store.ledger.create_session(t, session=_session("s2"), events=_items(2))
    claims = [c for c in await _claim(store, OWNER, 60) if c.tenant_id == t]
    # Only the head of each (subscription, session): s1's seq 1 and s2's seq 1.
    assert sorted((c.session_id, c.seq, c.attempts) for c in claims) == [("s1", 1, 1), ("s2", 1, 1)]
    again = await _claim(store, OWNER, 60)
    assert [c for c in again if c.tenant_id == t] == []  # claimed, and the rest wait behind
    head = next(c for c in claims if c.session_id == "s1")
    work = await store.webhooks.load_claimed(head)
    assert work is not None and work.event is not None and work.event.seq == 1
    assert work.webhook.secret.startswith("whsec_")
    now = utcnow()
    done = Outcome(status=DELIVERED, attempted_at=now, response_code=204)
    stale = Claim(head.tenant_id, head.webhook_id, head.session_id, head.seq, head.attempts + 1)
    assert not await store.webhooks.settle_delivery(stale, owner=OWNER, outcome=done)
    assert not await store.webhooks.settle_delivery(head, owner="someone-else", outcome=done)
    assert await store.webhooks.settle_delivery(head, owner=OWNER, outcome=done)
    assert not await store.webhooks.settle_delivery(head, owner=OWNER, outcome=done)
    nxt = [c for c in await _claim(store, OWNER, 60) if c.tenant_id == t]
    assert [(c.session_id, c.seq) for c in nxt] == [("s1", 2)]
    # A failed attempt waits for its backoff; a redeliver makes it due at once.
    retry = Outcome(
        status=PENDING,
        attempted_at=utcnow(),
        next_attempt_at=utcnow() + timedelta(hours=1),
        response_code=500,
        error="HTTP 500",
    )
    assert await store.webhooks.settle_delivery(nxt[0], owner=OWNER, outcome=retry)
    log = await store.webhooks.list_deliveries(t, "wh_order", limit=10)
    by_seq = {(d.session_id, d.seq): d for d in log}
    assert by_seq[("s1", 1)].status == DELIVERED and by_seq[("s1", 1)].response_code == 204
    assert by_seq[("s1", 2)].status == PENDING and by_seq[("s1", 2)].last_error == "HTTP 500"
    hook = await store.webhooks.get_webhook(t, "wh_order")
    assert hook is not None and hook.consecutive_failures == 1
    later = await _claim(store, OWNER, 60)
    assert [(c.session_id, c.seq) for c in later if c.tenant_id == t] == []
    redone = await store.webhooks.redeliver(t, "wh_order", by_seq[("s1", 2)].event_id)
    assert redone is not None and redone.status == PENDING
    now_due = await _claim(store, OWNER, 60)
    assert [(c.session_id, c.seq, c.attempts) for c in now_due if c.tenant_id == t] == [
        ("s1", 2, 2)
    ]


async def test_a_lapsed_claim_is_taken_again(
    store: Stores, tenant: TenantKey, hooks: list[str]
) -> None:
    t = tenant.tenant_id
    await store.webhooks.create_webhook(t, _hook("wh_lapse", ["*"]))
    hooks.append("wh_lapse")
    await store.ledger.create_session(t, session=_session("s"), events=_items(1))
    first = await _claim(store, "dead", 0)
    assert [(c.seq, c.attempts) for c in first if c.tenant_id == t] == [(1, 1)]
    second = await _claim(store, OWNER, 60)
    mine = [c for c in second if c.tenant_id == t]
    assert [(c.seq, c.attempts) for c in mine] == [(1, 2)]
    late = Outcome(status=DELIVERED, attempted_at=utcnow(), response_code=200)
    dead_claim = Claim(t, "wh_lapse", "s", 1, 1)
    assert not await store.webhooks.settle_delivery(dead_claim, owner="dead", outcome=late)
    assert await store.webhooks.settle_delivery(mine[0], owner=OWNER, outcome=late)


async def test_retention_drops_settled_deliveries_and_keeps_pending_ones(
    store: Stores, tenant: TenantKey, hooks: list[str]
) -> None:
    t = tenant.tenant_id
    await store.webhooks.create_webhook(t, _hook("wh_retain", ["*"]))
    hooks.append("wh_retain")
    await store.ledger.create_session(t, session=_session("s"), events=_items(2))
    mine = [c for c in await _claim(store, OWNER, 60) if c.tenant_id == t]
    done = Outcome(status=DELIVERED, attempted_at=utcnow(), response_code=200)
    assert await store.webhooks.settle_delivery(mine[0], owner=OWNER, outcome=done)
    later = utcnow() + timedelta(seconds=1)
    assert await store.maintenance.delete_settled_deliveries(t, before=later) == 1
    assert [
        (d.seq, d.status) for d in await store.webhooks.list_deliveries(t, "wh_retain", limit=9)
    ] == [(2, PENDING)]
