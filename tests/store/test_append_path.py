"""Appends through the PostgreSQL fast path (one call of `asr_append_events`) keep every
semantic of the SQLAlchemy path: what they return, what they refuse, whom they wake.

Most tests run on both backends (SQLite takes the SQLAlchemy path), so the two paths are
held to one contract; the ones about NOTIFY, round trips and broken connections are
PostgreSQL's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from app.runtime.errors import PayloadTooLarge, SeqConflict, SessionNotFound, VersionConflict
from app.runtime.ports import NewSession, Wakeup
from app.runtime.session.events import EventType, NewEvent
from app.settings import Settings
from app.store.engine import make_engine
from app.store.stores import Stores, open_stores
from tests.conftest import TenantKey


def new(session_id: str) -> NewSession:
    return NewSession(session_id=session_id, metadata={"k": "v"}, agent={}, binding={})


def step(i: int, **payload: object) -> NewEvent:
    return NewEvent(EventType.STEP_END, {"i": i, "text": "héllo ✓", **payload}, "run_1", f"t{i}")


class Recorder:
    """An Observer that keeps what it is told."""

    def __init__(self) -> None:
        self.appended: list[list[str]] = []

    def events_appended(self, types: Sequence[str]) -> None:
        self.appended.append(list(types))

    def run_finished(self, *, stop_reason: str, seconds: float) -> None:
        return None

    def db_read(self, *, target: str, reason: str) -> None:
        return None


@pytest.fixture
async def own_store(settings: Settings) -> AsyncIterator[Stores]:
    """A store of its own (one pooled connection), with a recording observer."""
    engine = make_engine(settings.model_copy(update={"db_pool_size": 1, "db_max_overflow": 0}))
    store = open_stores(engine, observer=Recorder(), max_event_bytes=4096)
    yield store
    await engine.dispose()


def _recorder(store: Stores) -> Recorder:
    assert isinstance(store.database.observer, Recorder)
    return store.database.observer


async def test_an_append_returns_what_was_committed(own_store: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    created = await own_store.ledger.create_session(t, session=new("s"), events=[step(0)])
    woken: list[Wakeup] = []
    own_store.database.announcer.listeners.append(woken.append)
    secret = step(2, token="sk-" + "a" * 20)
    result = await own_store.ledger.append_events(t, "s", events=[step(1), secret])

    assert [e.seq for e in result.events] == [2, 3]
    assert result.session.last_seq == 3 and result.session.version == created.session.version + 1
    assert result.session == await own_store.ledger.get_session(t, "s")
    stored = await own_store.ledger.list_events(t, "s", after_seq=1)
    assert stored == result.events  # ids, positions, payloads, created_at: all as committed
    assert stored[0].position < stored[1].position
    assert stored[1].payload["token"] == "[REDACTED]"  # the redaction funnel still applies
    assert stored[0].run_id == "run_1" and stored[0].turn_id == "t1"
    assert [(w.tenant_id, w.session_id, w.last_seq) for w in woken] == [(t, "s", 3)]
    # A writer that has its events hands them on with the wake-up: exactly the stored ones.
    assert woken[0].events in ((), tuple(stored))
    assert _recorder(own_store).appended[-1] == ["STEP_END", "STEP_END"]


async def test_refused_appends_write_nothing_and_wake_nobody(
    own_store: Stores, tenant: TenantKey, other_tenant: TenantKey
) -> None:
    t = tenant.tenant_id
    await own_store.ledger.create_session(t, session=new("s"), events=[step(0), step(1)])
    before = await own_store.ledger.get_session(t, "s")
    assert before is not None
    woken: list[Wakeup] = []
    own_store.database.announcer.listeners.append(woken.append)
    reported = len(_recorder(own_store).appended)

    with pytest.raises(SeqConflict) as seq:
        await own_store.ledger.append_events(t, "s", events=[step(2)], expected_seq=1)
    assert seq.value.extra == {"expected_seq": 1, "current_seq": 2}
    with pytest.raises(VersionConflict) as version:
        await own_store.ledger.append_events(t, "s", events=[step(2)], expected_version=7)
    assert version.value.extra == {"expected_version": 7, "current_version": before.version}
    with pytest.raises(SessionNotFound):
        await own_store.ledger.append_events(t, "missing", events=[step(0)])
    # Another tenant's session does not exist for this one.
    with pytest.raises(SessionNotFound):
        await own_store.ledger.append_events(other_tenant.tenant_id, "s", events=[step(0)])
    with pytest.raises(PayloadTooLarge):
        await own_store.ledger.append_events(t, "s", events=[step(2, big="x" * 5000)])

    assert await own_store.ledger.get_session(t, "s") == before
    assert len(await own_store.ledger.list_events(t, "s")) == 2
    assert woken == [] and len(_recorder(own_store).appended) == reported

    matched = await own_store.ledger.append_events(
        t, "s", events=[step(2)], expected_seq=2, expected_version=before.version
    )
    assert matched.session.last_seq == 3


async def test_an_empty_append_bumps_the_version_only(own_store: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    created = await own_store.ledger.create_session(t, session=new("s"), events=[step(0)])
    woken: list[Wakeup] = []
    own_store.database.announcer.listeners.append(woken.append)
    result = await own_store.ledger.append_events(t, "s", events=[])
    assert result.events == []
    assert result.session.last_seq == 1
    assert result.session.version == created.session.version + 1
    assert woken == []
