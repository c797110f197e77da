"""R24, short form: a bounded loopback load on two replicas sharing one database.

24 sessions, each doing 10 appends (spread over both replicas) and one scripted run, with at
most 32 requests in flight. Checks: no 5xx; a per-session seq audit at the end (gapless,
every append and the run present exactly once, projection equals live memory); p95 append
latency (asserted loosely here, since CI shares 2 cores with the test itself; the number is
printed); on PostgreSQL, server connections stay within the pools of the two replicas.
The long form (50 sessions, SSE subscribers, 5 minutes, RSS growth) needs the SSE timelines
and belongs to the slow tier.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from app.store.base import ALL_TENANTS
from app.store.store import AgentSessionStore
from tests.conftest import Server, make_tenant, start_server, stop_server

SESSIONS = 24
APPENDS = 10
IN_FLIGHT = 32
POOL = {"ASR_DB_POOL_SIZE": "5", "ASR_DB_MAX_OVERFLOW": "5"}
DEADLINE_SECONDS = 90


@pytest.fixture
def replicas(database_url: str, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    a = start_server(database_url, tmp_path / "a.log", **POOL)
    b = start_server(database_url, tmp_path / "b.log", **POOL)
    yield a, b
    for server in (a, b):
        stop_server(server)
    for server in (a, b):
        assert "Traceback" not in server.log(), server.log()[-3000:]


async def test_r24_short_bounded_load_on_two_replicas(
    replicas: tuple[Server, Server], store: AgentSessionStore, is_postgres: bool
) -> None:
    tenant = await make_tenant(store)
    gate = asyncio.Semaphore(IN_FLIGHT)
    statuses: list[int] = []
    append_latency: list[float] = []
    peak_connections = 0
    deadline = time.monotonic() + DEADLINE_SECONDS
    clients = [
        httpx.AsyncClient(base_url=s.base_url, headers=tenant.headers, timeout=60) for s in replicas
    ]

    async def call(i: int, method: str, path: str, **kw: object) -> httpx.Response:
        assert time.monotonic() < deadline, "the load must finish in time"
        async with gate:
            response = await clients[i % 2].request(method, path, **kw)  # type: ignore[arg-type]
        statuses.append(response.status_code)
        return response

    async def session(n: int) -> str:
        sid = (await call(n, "POST", "/v1/sessions", json={})).json()["session_id"]
        for k in range(APPENDS):
            item = {"type": "message", "role": "user", "content": f"s{n}-{k}"}
            started = time.perf_counter()
            await call(n + k, "POST", f"/v1/sessions/{sid}/items", json={"items": [item]})
            append_latency.append(time.perf_counter() - started)
        await call(n, "POST", f"/v1/sessions/{sid}/runs", json={"input": f"run {n}"})
        return sid

    async def connections() -> int:
        async with store.read(ALL_TENANTS) as conn:
            count = await conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            return int(count.scalar_one())

    async def sample_connections(stop: asyncio.Event) -> None:
        nonlocal peak_connections
        while not stop.is_set():
            peak_connections = max(peak_connections, await connections())
            await asyncio.sleep(0.2)

    # Connections this test process's own engines already hold (idle pools of earlier
    # tests) are not the replicas'; the bound applies to what the load adds.
    baseline = await connections() if is_postgres else 0
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_connections(stop)) if is_postgres else None
    try:
        ids = await asyncio.gather(*(session(n) for n in range(SESSIONS)))
    finally:
        stop.set()
        if sampler is not None:
            await sampler
        for client in clients:
            await client.aclose()

    assert not [s for s in statuses if s >= 500], sorted(set(statuses))
    assert len(statuses) == SESSIONS * (APPENDS + 2)
    for sid in ids:
        events = await store.list_events(tenant.tenant_id, sid)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        types = [e.type for e in events]
        assert types.count("RUN_STARTED") == types.count("RUN_FINISHED") == 1
        # The run appends the assistant's answer too; the audit counts the user's appends.
        contents = sorted(
            e.payload["items"][0]["content"]
            for e in events
            if e.type == "MEMORY_ITEMS_APPENDED" and e.payload["items"][0]["role"] == "user"
        )
        assert contents == sorted(f"s{ids.index(sid)}-{k}" for k in range(APPENDS))
    p95 = sorted(append_latency)[int(len(append_latency) * 0.95)]
    print(f"R24 short: {len(statuses)} requests, p95 append {p95 * 1000:.0f} ms")
    assert p95 < 1.0, f"p95 append latency {p95:.3f} s"
    if is_postgres:
        # Two replicas x (pool 5 + overflow 5); no listener connection exists yet.
        assert peak_connections - baseline <= 2 * (5 + 5), (peak_connections, baseline)
