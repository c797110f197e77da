"""Read replicas end to end: a primary and a streaming replica of our own, two `asr serve`.

The primary is a throwaway cluster; the replica is `pg_basebackup -R` of it, started as a hot
standby. Both servers run with `ASR_DATABASE_URL` = the primary and `ASR_DATABASE_READ_URLS`
= the replica. With WAL replay paused on the replica (`pg_wal_replay_pause()`): writes
succeed; a read fenced past the replica's position is answered by the primary with the
fresh rows; an unfenced read is served by the replica (counted by `asr_db_reads`); an SSE
stream resumed with `Last-Event-ID` is exact (no gap, no duplicate) while replay is paused
and after it resumes. Server A reads strictly (`ASR_DB_READ_CONSISTENCY=strict`: no read
misses a write acknowledged before it), B by session (fenced by what it knows). Then the
replica is stopped, and no client notices.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.settings import Settings
from app.store.engine import make_engine
from app.store.migrations import upgrade_head
from app.store.stores import open_stores
from tests.conftest import PG_ENV, Server, make_tenant, start_server, stop_server
from tests.pgcluster import ThrowawayPostgres, pg_bin, streaming_replica, throwaway_cluster
from tests.sse.conftest import append_item, new_session, read_frames

pytestmark = pytest.mark.skipif(
    not os.environ.get(PG_ENV), reason="read replicas are PostgreSQL streaming replicas"
)

_READS = re.compile(r'^asr_db_reads_total\{reason="(\w+)",target="(\w+)"\} ([0-9.e+]+)$', re.M)


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[ThrowawayPostgres, ThrowawayPostgres]]:
    with throwaway_cluster(required=os.environ.get("CI") == "true") as primary:
        upgrade_head(primary.url)
        if pg_bin("pg_basebackup") is None:
            pytest.skip("pg_basebackup not installed")
        replica = streaming_replica(primary)
        try:
            yield primary, replica
        finally:
            try:
                replica.stop("immediate")
            except Exception:  # stopped by the test already
                pass
            shutil.rmtree(replica.root, ignore_errors=True)


@pytest.fixture(scope="module")
def servers(
    clusters: tuple[ThrowawayPostgres, ThrowawayPostgres],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Server, Server]]:
    primary, replica = clusters
    logs = tmp_path_factory.mktemp("read-replica")
    env = {
        "ASR_DATABASE_READ_URLS": replica.url,
        "ASR_DB_READ_HEALTH_SECONDS": "0.5",
        "ASR_DB_POOL_SIZE": "6",
        "ASR_SSE_POLL_SECONDS": "30",
    }
    # A reads strictly (nothing acknowledged before a read is missed, on any server); B
    # fences by what it knows (ASR_DB_READ_CONSISTENCY=session), which shows unfenced reads.
    a = start_server(primary.url, logs / "a.log", ASR_DB_READ_CONSISTENCY="strict", **env)
    try:
        b = start_server(primary.url, logs / "b.log", ASR_DB_READ_CONSISTENCY="session", **env)
    except Exception:
        stop_server(a)
        raise
    yield a, b
    for server in (a, b):
        stop_server(server)
        assert "Traceback" not in server.log(), server.log()[-4000:]


@pytest.fixture(scope="module")
def headers(clusters: tuple[ThrowawayPostgres, ThrowawayPostgres]) -> dict[str, str]:
    primary, _ = clusters

    async def made() -> dict[str, str]:
        engine = make_engine(Settings(database_url=primary.url))
        try:
            return (await make_tenant(open_stores(engine))).headers
        finally:
            await engine.dispose()

    return asyncio.run(made())


@pytest.fixture
async def standby(
    clusters: tuple[ThrowawayPostgres, ThrowawayPostgres],
) -> AsyncIterator[AsyncEngine]:
    """The replica, as its superuser (no row-level wall): to see what it has applied."""
    engine = create_async_engine(clusters[1].url)
    yield engine
    await engine.dispose()


async def _reads(server: Server) -> dict[tuple[str, str], float]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        body = (await client.get("/metrics")).text
    return {(t, r): float(n) for r, t, n in _READS.findall(body)}


async def _gauge(server: Server, name: str) -> float:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        body = (await client.get("/metrics")).text
    found = re.search(rf'^{name}\{{replica="0"\}} ([-0-9.e+]+)$', body, re.M)
    assert found is not None, body[-2000:]
    return float(found.group(1))


async def _applied(standby: AsyncEngine, session_id: str) -> int | None:
    async with standby.connect() as conn:
        return (
            await conn.execute(
                text("SELECT last_seq FROM sessions WHERE session_id = :s"), {"s": session_id}
            )
        ).scalar_one_or_none()


async def _until_applied(standby: AsyncEngine, session_id: str, seq: int) -> None:
    for _ in range(400):  # a hang guard, bounded in polls (about 20 s)
        if (await _applied(standby, session_id) or 0) >= seq:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the replica never applied {session_id}@{seq}")


async def _seqs(http: httpx.AsyncClient, session_id: str, **params: int) -> list[int]:
    response = await http.get(f"/v1/sessions/{session_id}/events", params=params)
    assert response.status_code == 200, response.text
    return [e["seq"] for e in response.json()["data"]]


async def _stream_ids(
    http: httpx.AsyncClient, session_id: str, last_event_id: int, *, then: object, until: int
) -> list[int]:
    """The ids an SSE stream resumed after `last_event_id` delivers up to seq `until`;
    `then()` (a coroutine function) runs once the stream is open."""
    ids: list[int] = []
    path = f"/v1/sessions/{session_id}/events/stream"
    async with asyncio.timeout(30):
        async with http.stream(
            "GET", path, headers={"Last-Event-ID": str(last_event_id)}
        ) as response:
            assert response.status_code == 200
            started = False
            async for frame in read_frames(response):
                if not started:
                    started = True
                    await then()  # type: ignore[operator]
                if frame.id is not None and frame.id.isdigit():
                    ids.append(int(frame.id))
                    if ids[-1] >= until:
                        break
    return ids


async def test_reads_are_fenced_on_a_lagging_replica_and_survive_its_death(
    clusters: tuple[ThrowawayPostgres, ThrowawayPostgres],
    servers: tuple[Server, Server],
    headers: dict[str, str],
    standby: AsyncEngine,
) -> None:
    _, replica = clusters
    a, b = servers
    async with (
        httpx.AsyncClient(base_url=a.base_url, headers=headers, timeout=15) as ha,
        httpx.AsyncClient(base_url=b.base_url, headers=headers, timeout=15) as hb,
    ):
        quiet = await new_session(ha)
        sid = await new_session(ha)
        head = 1
        for i in range(3):
            head = await append_item(ha, sid, f"before {i}")
        assert head == 4
        await _until_applied(standby, sid, head)
        await _until_applied(standby, quiet, 1)

        # Unfenced reads (nothing newer known than the replica holds) use the replica.
        before = await _reads(b)
        assert await _seqs(hb, quiet) == [1]
        assert await _seqs(hb, sid) == [1, 2, 3, 4]
        after = await _reads(b)
        gained = after.get(("replica", "fenced"), 0) - before.get(("replica", "fenced"), 0)
        assert gained >= 2, (before, after)

        # Replay paused: the replica stays at seq 4 whatever the primary commits.
        async with standby.connect() as conn:
            await conn.execute(text("SELECT pg_wal_replay_pause()"))
            await conn.commit()
        for i in range(3):
            head = await append_item(ha, sid, f"paused {i}")  # writes succeed
        assert head == 7
        await asyncio.sleep(0.3)
        assert await _applied(standby, sid) == 4
        # The probe sees the replica fall behind (WAL it has received, not applied).
        for _ in range(50):  # a hang guard, bounded in polls (about 10 s)
            if (lag := await _gauge(b, "asr_db_replica_lag_bytes")) > 0:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"no lag measured: {lag}")
        assert await _gauge(b, "asr_db_replica_up") == 1

        # A read fenced past the replica's position is answered by the primary, fresh.
        before = await _reads(b)
        assert await _seqs(hb, sid, after_seq=5) == [6, 7]
        # The writer's own server knows its commits: read-your-writes with no fence sent.
        assert await _seqs(ha, sid) == [1, 2, 3, 4, 5, 6, 7]
        # The other server heard them by NOTIFY: the same.
        assert await _seqs(hb, sid) == [1, 2, 3, 4, 5, 6, 7]
        after = await _reads(b)
        assert after.get(("primary", "behind"), 0) - before.get(("primary", "behind"), 0) >= 2
        # A session with nothing newer is still read on the replica.
        assert await _seqs(hb, quiet) == [1]
        assert (await _reads(b)).get(("replica", "fenced"), 0) > after.get(("replica", "fenced"), 0)

        # A cold state load for display (B never loaded `quiet`) is a read like the others.
        before = await _reads(b)
        shown = await hb.get(f"/v1/sessions/{quiet}/state")
        assert shown.status_code == 200 and shown.headers["etag"]
        assert (await _reads(b)).get(("replica", "fenced"), 0) > before.get(
            ("replica", "fenced"), 0
        )
        shown = await hb.get(f"/v1/sessions/{sid}")
        assert shown.status_code == 200 and shown.json()["last_seq"] == 7

        # Strict reads on A miss no write acknowledged before them, so even a session with
        # nothing newer goes to the primary while the replica lags.
        before_a = await _reads(a)
        assert await _seqs(ha, quiet) == [1]
        after_a = await _reads(a)
        assert after_a.get(("primary", "behind"), 0) > before_a.get(("primary", "behind"), 0)

        # SSE resumed with Last-Event-ID while replay is paused: exact, then live.
        async def write_eight() -> None:
            await append_item(ha, sid, "live 8")

        ids = await _stream_ids(hb, sid, 4, then=write_eight, until=8)
        assert ids == [5, 6, 7, 8]

        # Replay resumed: the replica catches up, and streams stay exact.
        async with standby.connect() as conn:
            await conn.execute(text("SELECT pg_wal_replay_resume()"))
            await conn.commit()
        await _until_applied(standby, sid, 8)

        async def write_nine() -> None:
            await append_item(ha, sid, "live 9")

        ids = await _stream_ids(hb, sid, 6, then=write_nine, until=9)
        assert ids == [7, 8, 9]
        # Caught up, the replica serves A's strict reads again.
        await _until_applied(standby, sid, 9)
        before_a = await _reads(a)
        assert await _seqs(ha, sid) == list(range(1, 10))
        after_a = await _reads(a)
        assert after_a.get(("replica", "fenced"), 0) > before_a.get(("replica", "fenced"), 0)

        # Strict reads on A see every write B acknowledged before them, replica or not.
        before_a = await _reads(a)
        for _ in range(15):
            head = await append_item(hb, sid, "written on b")
            assert (await _seqs(ha, sid, after_seq=head - 1)) == [head]
            created = await new_session(hb)
            listed = await ha.get("/v1/sessions", params={"limit": 5})
            assert created in {s["session_id"] for s in listed.json()["data"]}
        after_a = await _reads(a)
        served = {k: after_a.get(k, 0) - before_a.get(k, 0) for k in after_a}
        assert sum(served.values()) >= 30, served

        # The replica dies: no client notices.
        replica.stop("immediate")
        for http in (ha, hb):
            assert await _seqs(http, sid) == list(range(1, head + 1))
            assert await _seqs(http, quiet) == [1]
            listed = await http.get("/v1/sessions", params={"limit": 100})
            assert listed.status_code == 200 and {quiet, sid} <= {
                s["session_id"] for s in listed.json()["data"]
            }
        assert await append_item(ha, sid, "after death") == head + 1
        assert await _seqs(hb, sid, after_seq=head) == [head + 1]

        async def write_one_more() -> None:
            await append_item(ha, sid, "live, replica dead")

        ids = await _stream_ids(hb, sid, head - 1, then=write_one_more, until=head + 2)
        assert ids == [head, head + 1, head + 2]
        reads = await _reads(b)
        assert (
            reads.get(("primary", "unavailable"), 0) + reads.get(("primary", "no_replica"), 0) > 0
        )
