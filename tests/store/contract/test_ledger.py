"""The store contract, on the backend this run uses (SQLite file or PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from sqlalchemy import Text, select, type_coerce, update

from app.runtime.errors import (
    IdempotentReplay,
    InvalidForkPoint,
    SeqConflict,
    SessionAlreadyExists,
    SessionNotFound,
    VersionConflict,
)
from app.runtime.ports import IdempotencyToken, NewSession
from app.runtime.session.events import EventType, NewEvent
from app.store.stores import Stores
from app.store.tables import session_snapshots
from tests.conftest import TenantKey


def new(session_id: str) -> NewSession:
    return NewSession(session_id=session_id, metadata={}, agent={}, binding={})


def items(n: int) -> list[NewEvent]:
    return [
        NewEvent(
            EventType.MEMORY_ITEMS_APPENDED,
            {"items": [{"type": "message", "role": "user", "content": f"m{i}"}]},
        )
        for i in range(n)
    ]


async def test_create_assigns_seqs_from_one_and_refuses_a_taken_id(
    store: Stores, tenant: TenantKey
) -> None:
    created = await store.ledger.create_session(
        tenant.tenant_id, session=new("s1"), events=items(3)
    )
    assert [e.seq for e in created.events] == [1, 2, 3]
    assert created.session.last_seq == 3 and created.session.version == 1
    with pytest.raises(SessionAlreadyExists):
        await store.ledger.create_session(tenant.tenant_id, session=new("s1"), events=items(1))
    # The failed create left the session as it was (PostgreSQL: no aborted transaction leak).
    again = await store.ledger.get_session(tenant.tenant_id, "s1")
    assert again is not None and again.last_seq == 3


async def test_same_session_id_in_two_tenants_are_two_sessions(
    store: Stores, tenant: TenantKey, other_tenant: TenantKey
) -> None:
    await store.ledger.create_session(tenant.tenant_id, session=new("shared"), events=items(2))
    await store.ledger.create_session(
        other_tenant.tenant_id, session=new("shared"), events=items(1)
    )
    mine = await store.ledger.list_events(tenant.tenant_id, "shared")
    theirs = await store.ledger.list_events(other_tenant.tenant_id, "shared")
    assert [e.seq for e in mine] == [1, 2] and [e.seq for e in theirs] == [1]


async def test_concurrent_appends_on_one_session_are_gapless(
    store: Stores, tenant: TenantKey
) -> None:
    await store.ledger.create_session(tenant.tenant_id, session=new("hot"), events=items(1))

    async def writer(k: int) -> None:
        for _ in range(10):
            await store.ledger.append_events(tenant.tenant_id, "hot", events=items(k % 3 + 1))

    await asyncio.gather(*(writer(k) for k in range(20)))
    events = await store.ledger.list_events(tenant.tenant_id, "hot")
    expected = 1 + sum(10 * (k % 3 + 1) for k in range(20))
    assert [e.seq for e in events] == list(range(1, expected + 1))
    assert len({e.event_id for e in events}) == expected
    positions = [e.position for e in events]
    assert len(set(positions)) == expected


async def test_expected_seq_conflict_writes_nothing(store: Stores, tenant: TenantKey) -> None:
    await store.ledger.create_session(tenant.tenant_id, session=new("opt"), events=items(2))
    await store.ledger.append_events(tenant.tenant_id, "opt", events=items(1), expected_seq=2)
    with pytest.raises(SeqConflict) as info:
        await store.ledger.append_events(tenant.tenant_id, "opt", events=items(5), expected_seq=2)
    assert info.value.extra["current_seq"] == 3
    with pytest.raises(VersionConflict):
        await store.ledger.append_events(
            tenant.tenant_id, "opt", events=items(1), expected_version=1
        )
    assert len(await store.ledger.list_events(tenant.tenant_id, "opt")) == 3
    with pytest.raises(SessionNotFound):
        await store.ledger.append_events(tenant.tenant_id, "missing", events=items(1))


async def test_fork_copies_the_prefix_and_leaves_the_source_alone(
    store: Stores, tenant: TenantKey
) -> None:
    await store.ledger.create_session(tenant.tenant_id, session=new("src"), events=items(5))
    # The source's snapshots: the fork copies the newest at or below its fork point.
    for seq in (1, 2, 4):
        state = {"seq": seq, "memory": {"items": [{"n": seq}], "summary": None}}
        await store.ledger.save_snapshot(tenant.tenant_id, "src", seq=seq, kind="auto", state=state)
    forked = NewEvent(EventType.SESSION_FORKED, {"parent_session_id": "src"})
    result = await store.ledger.fork_session(
        tenant.tenant_id, "src", at_seq=3, session=new("child"), events=[forked]
    )
    assert result.session.parent_session_id == "src"
    assert result.session.forked_from_seq == 3 and result.session.last_seq == 4
    child = await store.ledger.list_events(tenant.tenant_id, "child")
    parent = await store.ledger.list_events(tenant.tenant_id, "src")
    assert [e.seq for e in child] == [1, 2, 3, 4]
    assert [e.payload for e in child[:3]] == [e.payload for e in parent[:3]]
    assert not {e.event_id for e in child} & {e.event_id for e in parent}
    # New ids, made by the database, in canonical text: time-ordered (version 7), the fork's
    # milliseconds first, ascending with seq within the fork.
    copied = [e.event_id for e in child[:3]]
    for event_id in copied:
        assert uuid.UUID(event_id).version == 7 and str(uuid.UUID(event_id)) == event_id
        assert uuid.UUID(event_id).variant == uuid.RFC_4122
    assert copied == sorted(copied)
    ms = int(copied[0][:8] + copied[0][9:13], 16)
    assert abs(ms / 1000 - result.session.created_at.timestamp()) < 1
    assert len(parent) == 5
    [snap] = await store.ledger.list_snapshots(tenant.tenant_id, "child")
    source_snap = await store.ledger.get_snapshot(tenant.tenant_id, "src", at_or_below=3)
    assert source_snap is not None and snap.seq == 2 and snap.kind == "fork"
    assert snap.state == source_snap.state
    # The copy keeps its content hash: it loads as an intact snapshot.
    loaded = await store.ledger.load_session(tenant.tenant_id, "child")
    assert loaded is not None and loaded.snapshot is not None and loaded.snapshot.seq == 2
    assert [e.seq for e in loaded.tail] == [3, 4]
    # Below every snapshot of the source, the child has none (its load folds from seq 1).
    await store.ledger.fork_session(
        tenant.tenant_id, "src", at_seq=0, session=new("bare"), events=[]
    )
    assert await store.ledger.list_snapshots(tenant.tenant_id, "bare") == []
    with pytest.raises(InvalidForkPoint):
        await store.ledger.fork_session(
            tenant.tenant_id, "src", at_seq=6, session=new("c2"), events=[]
        )
    with pytest.raises(SessionNotFound):
        await store.ledger.fork_session(
            tenant.tenant_id, "nope", at_seq=1, session=new("c3"), events=[]
        )


async def test_a_snapshot_with_a_bad_hash_is_skipped(store: Stores, tenant: TenantKey) -> None:
    await store.ledger.create_session(tenant.tenant_id, session=new("snap"), events=items(2))
    assert await store.ledger.save_snapshot(
        tenant.tenant_id, "snap", seq=1, kind="auto", state={"seq": 1, "memory": {"items": []}}
    )
    assert await store.ledger.save_snapshot(
        tenant.tenant_id, "snap", seq=2, kind="auto", state={"seq": 2, "memory": {"items": []}}
    )
    assert not await store.ledger.save_snapshot(
        tenant.tenant_id, "snap", seq=9, kind="auto", state={"seq": 9}
    ), "a snapshot may not claim a seq beyond the ledger"
    snaps = session_snapshots.c
    async with store.database.write(tenant.tenant_id) as conn:
        await conn.execute(
            update(session_snapshots)
            .where(snaps.tenant_id == tenant.tenant_id, snaps.seq == 2)
            .values(state=type_coerce(json.dumps({"seq": 2, "memory": {"items": ["x"]}}), Text))
        )
    snap = await store.ledger.get_snapshot(tenant.tenant_id, "snap")
    assert snap is not None and snap.seq == 1


async def test_a_snapshot_reads_back_exactly_and_intact(store: Stores, tenant: TenantKey) -> None:
    """Values orjson would round (an integer beyond 64 bits) or that need care (small
    floats, text beyond ASCII) come back as written, and the snapshot counts as intact."""
    state = {
        "seq": 1,
        "memory": {"items": [{"n": 2**70, "m": -(2**64), "f": 12345.678, "g": 1.5e-7, "t": "é✓"}]},
        "shared_state": {"b": 1.0, "a": [0.1, 18446744073709551615]},
    }
    await store.ledger.create_session(tenant.tenant_id, session=new("exact"), events=items(1))
    assert await store.ledger.save_snapshot(
        tenant.tenant_id, "exact", seq=1, kind="auto", state=state
    )
    snap = await store.ledger.get_snapshot(tenant.tenant_id, "exact")
    assert snap is not None and snap.seq == 1
    assert snap.state == state
    assert type(snap.state["memory"]["items"][0]["n"]) is int


async def test_delete_erases_events_and_snapshots(store: Stores, tenant: TenantKey) -> None:
    await store.ledger.create_session(tenant.tenant_id, session=new("gone"), events=items(2))
    await store.ledger.save_snapshot(tenant.tenant_id, "gone", seq=2, kind="save", state={"seq": 2})
    assert await store.ledger.delete_session(tenant.tenant_id, "gone")
    assert not await store.ledger.delete_session(tenant.tenant_id, "gone")
    assert await store.ledger.list_events(tenant.tenant_id, "gone") == []
    async with store.database.read(tenant.tenant_id) as conn:
        left = (
            await conn.execute(
                select(session_snapshots).where(
                    session_snapshots.c.session_id == "gone",
                    session_snapshots.c.tenant_id == tenant.tenant_id,
                )
            )
        ).all()
    assert left == []


async def test_a_key_is_recorded_with_its_write_and_a_duplicate_writes_nothing(
    store: Stores, tenant: TenantKey
) -> None:
    t = tenant.tenant_id
    await store.ledger.create_session(t, session=new("idem"), events=items(1))
    token = IdempotencyToken(key="k", request_hash="h1")
    first = await store.ledger.append_events(t, "idem", events=items(2), idempotency=token)
    assert [e.seq for e in first.events] == [2, 3]
    found = await store.idempotency.get_idempotency_key(t, "k")
    assert found is not None and found.request_hash == "h1" and found.response is None
    assert found.result == {
        "session_id": "idem",
        "first_seq": 2,
        "last_seq": 3,
        "version": first.session.version,
    }
    with pytest.raises(IdempotentReplay):
        await store.ledger.append_events(t, "idem", events=items(2), idempotency=token)
    with pytest.raises(IdempotentReplay):  # whatever the write: the key is taken
        await store.ledger.create_session(
            t, session=new("idem-2"), events=items(1), idempotency=token
        )
    assert await store.ledger.get_session(t, "idem-2") is None
    assert [e.seq for e in await store.ledger.list_events(t, "idem")] == [1, 2, 3]
    await store.idempotency.store_idempotent_response(
        t, token, status_code=201, response=b"{}", headers={"location": "/x"}
    )
    await store.idempotency.store_idempotent_response(
        t, token, status_code=500, response=b"no", headers={}
    )
    kept = await store.idempotency.get_idempotency_key(t, "k")
    assert kept is not None and (kept.status_code, kept.response) == (201, b"{}")
    assert kept.headers == {"location": "/x"}


async def test_a_refused_write_records_no_key(store: Stores, tenant: TenantKey) -> None:
    t = tenant.tenant_id
    await store.ledger.create_session(t, session=new("refused"), events=items(1))
    token = IdempotencyToken(key="refused", request_hash="h")
    with pytest.raises(SeqConflict):
        await store.ledger.append_events(
            t, "refused", events=items(1), expected_seq=7, idempotency=token
        )
    assert await store.idempotency.get_idempotency_key(t, "refused") is None
    await store.ledger.append_events(
        t, "refused", events=items(1), expected_seq=1, idempotency=token
    )
    assert await store.idempotency.get_idempotency_key(t, "refused") is not None


async def test_concurrent_writes_under_one_key_commit_exactly_once(
    store: Stores, tenant: TenantKey
) -> None:
    t = tenant.tenant_id
    await store.ledger.create_session(t, session=new("race"), events=items(1))
    token = IdempotencyToken(key="race", request_hash="h")

    async def write() -> bool:
        try:
            await store.ledger.append_events(t, "race", events=items(1), idempotency=token)
        except IdempotentReplay:
            return False
        return True

    results = await asyncio.gather(*(write() for _ in range(10)))
    assert results.count(True) == 1
    assert [e.seq for e in await store.ledger.list_events(t, "race")] == [1, 2]
