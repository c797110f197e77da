"""Reads routed to a read replica, fenced (`app.store.replicas`), without a real replica.

The "replica" here is a second engine on the same database: what these tests show is the
routing — which reads go there, which fences send a read back to the primary, and that a
dead replica is skipped — not replication itself (`tests/e2e/test_read_replica.py` runs a
real streaming replica with WAL replay paused).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.engine import make_url

from app.runtime.observer import NullObserver
from app.runtime.ports import NewSession, Wakeup
from app.runtime.session.events import EventType, NewEvent
from app.settings import Settings
from app.store.engine import make_engine, make_read_engine
from app.store.replicas import SESSION, STRICT, Replica, ReplicaSet
from app.store.stores import Stores, open_stores
from tests.conftest import TenantKey, free_port


class Reads(NullObserver):
    """Counts `db_read` by (target, reason)."""

    def __init__(self) -> None:
        self.reads: Counter[tuple[str, str]] = Counter()

    def db_read(self, *, target: str, reason: str) -> None:
        self.reads[(target, reason)] += 1


def _items(n: int) -> list[NewEvent]:
    return [
        NewEvent(
            EventType.MEMORY_ITEMS_APPENDED,
            {"items": [{"type": "message", "role": "user", "content": f"m{i}"}]},
        )
        for i in range(n)
    ]


def _new(session_id: str) -> NewSession:
    return NewSession(session_id=session_id, metadata={}, agent={}, binding={})


@pytest.fixture(params=[STRICT, SESSION])
async def routed(
    settings: Settings, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Stores, Reads, ReplicaSet]]:
    """Both consistency levels: the "replica" (the primary itself) is never behind the
    primary's WAL, so strict routes as session does."""
    engine = make_engine(settings)
    reads = Reads()
    stores = open_stores(engine, observer=reads, notify=False)
    replicas = ReplicaSet(
        [Replica(0, make_read_engine(settings, settings.database_url))],
        primary=engine,
        consistency=request.param,
    )
    stores.database.replicas = replicas
    yield stores, reads, replicas
    await replicas.stop()
    await engine.dispose()


async def test_pages_and_lists_go_to_the_replica_when_it_has_the_fence(
    routed: tuple[Stores, Reads, ReplicaSet], tenant: TenantKey
) -> None:
    stores, reads, _ = routed
    t = tenant.tenant_id
    await stores.ledger.create_session(t, session=_new("s"), events=_items(3))
    reads.reads.clear()
    events = await stores.ledger.list_events(t, "s", after_seq=1)
    assert [e.seq for e in events] == [2, 3]
    assert await stores.ledger.list_sessions(t, limit=10)
    assert reads.reads == {("replica", "fenced"): 2}


async def test_a_fence_past_the_replicas_head_reads_the_primary(
    routed: tuple[Stores, Reads, ReplicaSet], tenant: TenantKey
) -> None:
    stores, reads, _ = routed
    t = tenant.tenant_id
    await stores.ledger.create_session(t, session=_new("s"), events=_items(3))
    reads.reads.clear()
    # The caller has seen seq 7 (Last-Event-ID, after_seq): the "replica" shows 3.
    assert await stores.ledger.list_events(t, "s", after_seq=7) == []
    # A NOTIFY announced seq 9: this process knows more than the replica holds.
    stores.database.heads.saw(Wakeup(t, "s", 9))
    assert len(await stores.ledger.list_events(t, "s")) == 3
    # The tenant's latest known commit fences its lists the same way.
    assert await stores.ledger.list_sessions(t, limit=10)
    # A session the replica does not have may be one it has not applied yet.
    assert await stores.ledger.list_events(t, "nowhere") == []
    assert reads.reads == {("primary", "behind"): 4}


async def test_a_cold_load_for_display_may_go_to_the_replica(
    routed: tuple[Stores, Reads, ReplicaSet], tenant: TenantKey
) -> None:
    stores, reads, _ = routed
    t = tenant.tenant_id
    await stores.ledger.create_session(t, session=_new("s"), events=_items(3))
    reads.reads.clear()
    found = await stores.ledger.load_session(t, "s", lagging=True)
    assert found is not None and found.session.last_seq == 3 and len(found.tail) == 3
    assert await stores.ledger.load_session(t, "s") is not None  # to decide a write: primary
    stores.database.heads.saw(Wakeup(t, "s", 5))
    assert await stores.ledger.load_session(t, "s", lagging=True) is not None
    assert reads.reads == {("replica", "fenced"): 1, ("primary", "behind"): 1}


async def test_own_commits_fence_this_process_reads(
    routed: tuple[Stores, Reads, ReplicaSet], tenant: TenantKey
) -> None:
    stores, _, _ = routed
    t = tenant.tenant_id
    await stores.ledger.create_session(t, session=_new("s"), events=_items(2))
    assert stores.database.heads.session(t, "s") == 2
    assert stores.database.heads.tenant(t) == ("s", 2)


async def test_a_dead_replica_is_skipped_never_an_error(
    settings: Settings, tenant: TenantKey
) -> None:
    engine = make_engine(settings)
    reads = Reads()
    stores = open_stores(engine, observer=reads, notify=False)
    # Nothing listens on a fresh port, whatever the tier points at (PgBouncer's too).
    dead = (
        make_url(settings.database_url)
        .set(host="127.0.0.1", port=free_port())
        .render_as_string(hide_password=False)
    )
    replicas = ReplicaSet([Replica(0, make_read_engine(settings, dead))], primary=engine)
    stores.database.replicas = replicas
    try:
        t = tenant.tenant_id
        await stores.ledger.create_session(t, session=_new("s"), events=_items(2))
        assert len(await stores.ledger.list_events(t, "s")) == 2
        assert not replicas.replicas[0].up
        assert len(await stores.ledger.list_events(t, "s")) == 2  # backed off: not tried
        assert reads.reads == {("primary", "unavailable"): 1, ("primary", "no_replica"): 1}
        await replicas.probe()
        assert replicas.stats()[0]["up"] is False
    finally:
        await replicas.stop()
        await engine.dispose()


async def test_concurrent_strict_reads_share_one_question_to_the_primary(
    routed: tuple[Stores, Reads, ReplicaSet],
) -> None:
    _, _, replicas = routed
    asked = 0
    ask = replicas._ask_flushed

    async def counted() -> int:
        nonlocal asked
        asked += 1
        return await ask()

    replicas._ask_flushed = counted  # type: ignore[method-assign]
    first = await replicas.primary_flushed()
    positions = await asyncio.gather(*(replicas.primary_flushed() for _ in range(20)))
    assert all(p >= first for p in positions)
    assert asked <= 3  # one before, and the burst shares one or two


async def test_the_probe_measures_lag(routed: tuple[Stores, Reads, ReplicaSet]) -> None:
    _, _, replicas = routed
    await replicas.probe()
    stat = replicas.stats()[0]
    # The "replica" is the primary itself: up, and not in recovery, so no replay position.
    assert stat["up"] is True
