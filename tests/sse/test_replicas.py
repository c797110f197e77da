"""R10: two `asr serve` processes on one PostgreSQL.

Events appended through server A reach a subscriber on server B, in order and complete,
in well under a second while NOTIFY works. B polls only every 30 s here, so anything it
delivers soon came from its LISTEN connection: when that backend is killed
(`pg_terminate_backend`, the method of artalis-io/hull#273), B reconnects, re-LISTENs and
catches up from the table what was committed meanwhile. A third server with NOTIFY
disabled delivers through polling alone, within the poll interval plus 200 ms.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.runtime.session.events import EventType, NewEvent
from app.store.base import NO_TENANT
from app.store.stores import Stores
from tests.conftest import Server, TenantKey
from tests.sse.conftest import (
    Frame,
    append_item,
    gauges,
    new_session,
    read_frames,
    start_sse_server,
    stop_and_check,
    wait_until,
)

POLL_FALLBACK = 0.5


@pytest.fixture(scope="module")
def servers(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, sse_server: Server
) -> Iterator[dict[str, Server]]:
    """A: the tier's shared server (the writer); B and C: subscribers."""
    if not database_url.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY across replicas needs PostgreSQL (SQLite has one process)")
    logs = tmp_path_factory.mktemp("replicas")
    started: dict[str, Server] = {}
    try:
        started["b"] = start_sse_server(database_url, logs, "b", ASR_SSE_POLL_SECONDS="30")
        started["c"] = start_sse_server(
            database_url,
            logs,
            "c",
            ASR_SSE_NOTIFY="false",
            ASR_SSE_POLL_SECONDS=str(POLL_FALLBACK),
        )
        yield {"a": sse_server, **started}
    finally:
        for srv in started.values():
            stop_and_check(srv)


@pytest.fixture
async def clients(
    servers: dict[str, Server], tenant: TenantKey
) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    opened = {
        name: httpx.AsyncClient(base_url=srv.base_url, headers=tenant.headers, timeout=15)
        for name, srv in servers.items()
    }
    yield opened
    for client in opened.values():
        await client.aclose()


class Tail:
    """A subscriber that records when each event id arrives."""

    def __init__(self, client: httpx.AsyncClient, path: str) -> None:
        self.client, self.path = client, path
        self.arrived: dict[int, float] = {}
        self.ids: list[int] = []
        self.controls: list[Frame] = []
        self.events: list[dict[str, Any]] = []
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with self.client.stream("GET", self.path) as response:
            async for frame in read_frames(response):
                if frame.event is not None and frame.id is None:
                    self.controls.append(frame)
                if frame.id is not None:
                    event = frame.json
                    self.events.append(event)
                    self.ids.append(event["seq"])
                    self.arrived[event["seq"]] = time.monotonic()

    def start(self) -> Tail:
        self.task = asyncio.create_task(self._run())
        return self

    async def has(self, seq: int, *, within: float) -> float:
        async def arrived() -> bool:
            return seq in self.arrived

        return await wait_until(arrived, within=within, every=0.01)

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def terminate_listener(store: Stores, server: Server) -> int:
    query = text(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE query LIKE 'LISTEN%' AND application_name = :name"
    )
    async with store.database.read(NO_TENANT) as conn:
        rows = (await conn.execute(query, {"name": f"asr-listen:{server.process.pid}"})).all()
    return len(rows)


async def test_r10_cross_replica_tail_survives_a_killed_listen_connection(
    servers: dict[str, Server],
    clients: dict[str, httpx.AsyncClient],
    store: Stores,
    tenant: TenantKey,
) -> None:
    a, b = clients["a"], clients["b"]
    sid = await new_session(a)
    tail = Tail(b, f"/v1/sessions/{sid}/events/stream").start()
    everything = Tail(b, "/v1/events/stream").start()  # the tenant stream, on B too
    try:
        await tail.has(1, within=5)
        latencies = []
        for i in range(40):
            committed_at = time.monotonic()
            seq = await append_item(a, sid, f"a{i}")
            await tail.has(seq, within=2)
            latencies.append(tail.arrived[seq] - committed_at)
        p95 = statistics.quantiles(latencies, n=20)[-1]
        print(
            f"R10: A->B commit-to-client p50 {statistics.median(latencies) * 1000:.1f} ms, "
            f"p95 {p95 * 1000:.1f} ms"
        )
        assert p95 < 1.0

        before = (await gauges(servers["b"].base_url))["bus"]
        assert before["listener"]["connected"] and before["listener"]["connects"] == 1
        assert await terminate_listener(store, servers["b"]) == 1

        async def listener_down() -> bool:
            return not (await gauges(servers["b"].base_url))["bus"]["listener"]["connected"]

        await wait_until(listener_down, within=2, every=0.005)
        # Committed while B is not listening: no NOTIFY will ever tell B about these.
        result = await store.ledger.append_events(
            tenant.tenant_id,
            sid,
            events=[NewEvent(EventType.METADATA_UPDATED, {"during_outage": i}) for i in range(5)],
        )
        head = result.session.last_seq
        took = await tail.has(head, within=5)
        after = (await gauges(servers["b"].base_url))["bus"]
        print(f"R10: events committed during the outage delivered {took:.2f} s later")
        assert after["listener"]["connected"] and after["listener"]["connects"] == 2
        assert after["listener"]["backend_pid"] != before["listener"]["backend_pid"]
        assert after["catch_ups"] == before["catch_ups"] + 1
        assert after["polls"] == 0  # B's 30 s poll never ran: this was the catch-up

        for i in range(10):  # and live again through the new connection
            head = await append_item(a, sid, f"b{i}")
        await tail.has(head, within=2)
        # The tenant stream waits for every older transaction on the cluster to end (other
        # databases' included), so it may trail; it must still get everything.
        await everything.has(head, within=45)
    finally:
        tail.stop()
        everything.stop()
    assert tail.ids == list(range(1, head + 1))
    assert everything.controls == []
    assert [e["seq"] for e in everything.events] == list(range(1, head + 1))


async def test_r10_polling_delivers_with_notify_disabled(
    servers: dict[str, Server], clients: dict[str, httpx.AsyncClient]
) -> None:
    a, c = clients["a"], clients["c"]
    assert "listener" not in (await gauges(servers["c"].base_url))["bus"]  # no LISTEN at all
    sid = await new_session(a)
    tail = Tail(c, f"/v1/sessions/{sid}/events/stream").start()
    try:
        await tail.has(1, within=5)
        delays = []
        for i in range(6):
            committed_at = time.monotonic()
            seq = await append_item(a, sid, f"p{i}")
            # A hang guard, not a latency bound: without NOTIFY only the poll can deliver, so
            # a broken poll never does. The delays are printed (timing is a benchmark's job).
            await tail.has(seq, within=15)
            delays.append(tail.arrived[seq] - committed_at)
            await asyncio.sleep(0.13 * i)  # land at different points of the poll cycle
    finally:
        tail.stop()
    print(f"R10: polling only, delivery delays {[round(d, 3) for d in delays]} s")
    assert tail.ids == list(range(1, seq + 1))
