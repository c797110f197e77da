"""`GET /v1/events/stream`: every session of the tenant, each committed event exactly once.

The classic loss: a reader that has passed global position 105 never sees 104 if 104
commits later. On PostgreSQL the test forces exactly that: a `save` on one session inserts
its event (taking a low position) and then blocks, behind an uncommitted snapshot row that
the test holds, while 8 writers commit 200 events with higher positions. The reader must
still deliver the late event, and everything else, exactly once. SQLite has one writer at a
time, so there the 8 writers only race each other.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
from sqlalchemy import Text, func, select, text, type_coerce

from app.runtime.ports import TenantCursor
from app.store.base import NO_TENANT, utcnow
from app.store.stores import Stores
from app.store.tables import session_events, session_snapshots
from tests.conftest import TenantKey
from tests.sse.conftest import new_session, read_frames, user_item, wait_until


def test_tenant_cursor_round_trip() -> None:
    for cursor in (TenantCursor(), TenantCursor(0, 42), TenantCursor(7_000_123, 42)):
        assert TenantCursor.parse(cursor.encode()) == cursor
    assert TenantCursor(0, 42).encode() == "42"  # SQLite: the position itself
    for bad in ("", "x", "1.2.3", "-1", "1.", "9" * 30, "9" * 19, f"1.{2**63}"):
        assert TenantCursor.parse(bad) is None


async def all_event_ids(http: httpx.AsyncClient, session_ids: list[str]) -> set[str]:
    ids: set[str] = set()
    for sid in session_ids:
        page = await http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})
        ids |= {e["event_id"] for e in page.json()["data"]}
    return ids


class Blocker:
    """PostgreSQL: an open transaction holding an uncommitted snapshot row at `seq`, so a
    `save` that targets the same seq inserts its event and then waits on it."""

    def __init__(self, store: Stores, tenant_id: str, session_id: str, seq: int):
        self.store, self.key, self.seq = store, (tenant_id, session_id), seq
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def hold(self) -> None:
        try:
            async with self.store.database.write(self.key[0]) as conn:
                await conn.execute(
                    session_snapshots.insert().values(
                        tenant_id=self.key[0],
                        session_id=self.key[1],
                        seq=self.seq,
                        kind="save",
                        state=type_coerce("{}", Text),
                        state_hash="blocker",
                        created_at=utcnow(),
                    )
                )
                self.holding.set()
                await asyncio.wait_for(self.release.wait(), timeout=30)
                raise _Rollback
        except _Rollback:
            pass


class _Rollback(Exception):
    pass


async def lock_waiters(store: Stores) -> int:
    query = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    async with store.database.read(NO_TENANT) as conn:
        return int((await conn.execute(query)).scalar_one())


async def visible_max_position(store: Stores, tenant_id: str) -> int:
    stmt = select(func.max(session_events.c.position)).where(
        session_events.c.tenant_id == tenant_id
    )
    async with store.database.read(tenant_id) as conn:
        return int((await conn.execute(stmt)).scalar_one() or 0)


async def test_tenant_stream_8_concurrent_writers_exactly_once(
    http: httpx.AsyncClient, store: Stores, tenant: TenantKey, is_postgres: bool
) -> None:
    sids = [await new_session(http) for _ in range(4)]
    late_sid, writer_sids = sids[0], sids[1:]
    received: list[tuple[str, dict[str, Any]]] = []

    async def reader() -> None:
        cursor: str | None = None
        for segment in range(20):  # bounded reconnects; the first two drop on purpose
            headers = {"Last-Event-ID": cursor} if cursor else {}
            async with http.stream("GET", "/v1/events/stream", headers=headers) as response:
                assert response.status_code == 200
                n = 0
                async for frame in read_frames(response):
                    if frame.id is None:
                        assert frame.event is None, frame
                        continue
                    received.append((frame.id, frame.json))
                    cursor, n = frame.id, n + 1
                    if segment < 2 and n == 40:
                        break

    reading = asyncio.create_task(reader())
    blocker = Blocker(store, tenant.tenant_id, late_sid, seq=2)
    holding = saving = None
    if is_postgres:
        holding = asyncio.create_task(blocker.hold())
        await asyncio.wait_for(blocker.holding.wait(), 5)
        saving = asyncio.create_task(http.post(f"/v1/sessions/{late_sid}/save"))

        async def save_is_blocked() -> bool:
            return await lock_waiters(store) >= 1

        await wait_until(save_is_blocked, within=5)

    committed_positions: list[int] = []

    async def writer(w: int) -> None:
        rng = random.Random(w)
        for n in range(25):
            sid = rng.choice(writer_sids)
            body = {"items": [user_item(f"w{w}-{n}")]}
            response = await http.post(f"/v1/sessions/{sid}/items", json=body)
            assert response.status_code == 201, response.text
            committed_positions.extend(e["position"] for e in response.json()["events"])

    await asyncio.wait_for(asyncio.gather(*(writer(w) for w in range(8))), 60)
    if is_postgres:
        assert saving is not None and holding is not None
        # 200 events committed with positions above the save's, which is still uncommitted:
        # a reader on position alone would have stepped past it for good.
        seen_max = await visible_max_position(store, tenant.tenant_id)
        # Checked before the release: once the save commits, the reader may pass it at once.
        late = [e for _, e in received if e["type"] == "SESSION_SAVED"]
        assert late == []  # not passed while its transaction was open
        blocker.release.set()
        await holding
        saved = await saving
        assert saved.status_code == 200, saved.text
        events = await http.get(f"/v1/sessions/{late_sid}/events", params={"after_seq": 1})
        late_position = events.json()["data"][0]["position"]
        assert late_position < min(committed_positions) <= seen_max

    expected = await all_event_ids(http, sids)
    assert len(expected) == 4 + 200 + (1 if is_postgres else 0)

    async def all_received() -> bool:
        return len(received) >= len(expected)

    try:
        # Generous: on PostgreSQL any transaction left open on the cluster (another test
        # run's, too) holds the tenant stream back until it ends.
        await wait_until(all_received, within=45)
        await asyncio.sleep(0.3)  # anything extra (a duplicate) would arrive now
    finally:
        reading.cancel()
    ids = [e["event_id"] for _, e in received]
    assert len(ids) == len(set(ids)) == len(expected)
    assert set(ids) == expected
    cursors = [TenantCursor.parse(c) for c, _ in received]
    assert cursors == sorted(cursors)  # type: ignore[type-var]  # the cursor only moves on


async def test_tenant_stream_is_tenant_scoped(
    http: httpx.AsyncClient, store: Stores, tenant: TenantKey
) -> None:
    from tests.conftest import make_tenant

    other = await make_tenant(store)
    async with httpx.AsyncClient(
        base_url=str(http.base_url), headers=other.headers, timeout=10
    ) as foreign:
        await new_session(foreign)
    mine = await new_session(http)
    async with http.stream("GET", "/v1/events/stream") as response:
        async with asyncio.timeout(10):
            frame = await anext(f async for f in read_frames(response) if f.id is not None)
    assert frame.json["session_id"] == mine
    bad = await http.get("/v1/events/stream", headers={"Last-Event-ID": "nope"})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_cursor"
