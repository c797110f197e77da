"""Clients that do not keep up (R14), and the per-tenant stream cap.

A server with a tiny inbox (16 items) and a 3 s send timeout: a frozen client (a socket
that never reads, as after `kill -STOP`) is cut off by the send timeout (nothing else would
end it; how soon is printed, not judged), while a healthy client on the same session keeps
receiving everything; a slow client gets a final `overflow` frame (no id) naming where to
resume, and resuming loses nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.conftest import Server, TenantKey
from tests.sse.conftest import (
    Frame,
    RawStream,
    gauges,
    new_session,
    read_frames,
    session_seqs,
    start_sse_server,
    stop_and_check,
    user_item,
    wait_until,
)

SEND_TIMEOUT = 3.0
PING = 1.0
BIG = "x" * 4096


@pytest.fixture(scope="module")
def tight_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_sse_server(
        database_url,
        tmp_path_factory.mktemp("tight"),
        "tight",
        ASR_SSE_QUEUE_SIZE="16",
        ASR_SSE_REPLAY_BATCH="64",
        ASR_SSE_MAX_STREAMS_PER_TENANT="4",
        ASR_SSE_SEND_TIMEOUT_SECONDS=str(SEND_TIMEOUT),
        ASR_SSE_PING_SECONDS=str(PING),
    )
    yield srv
    stop_and_check(srv)


@pytest.fixture
async def http(tight_server: Server, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=tight_server.base_url, headers=tenant.headers, timeout=15
    ) as client:
        yield client


async def overflows(server: Server) -> int:
    return (await gauges(server.base_url))["bus"]["overflows"]


async def produce_until_overflow(
    http: httpx.AsyncClient, server: Server, sid: str, *, baseline: int, limit: int = 1500
) -> int:
    """Append 4 KiB events (8 writers) until the server reports one more overflow; returns
    the session's head. Loopback buffers take a few MB before a send blocks."""
    done = asyncio.Event()
    heads: list[int] = []

    async def write() -> None:
        for _ in range(limit // 8):
            if done.is_set():
                return
            body = {"items": [user_item(BIG)]}
            response = await http.post(f"/v1/sessions/{sid}/items", json=body)
            heads.append(response.json()["last_seq"])

    async def watch() -> None:
        for _ in range(600):
            if await overflows(server) > baseline:
                done.set()
                return
            await asyncio.sleep(0.05)

    watching = asyncio.create_task(watch())
    await asyncio.gather(*(write() for _ in range(8)))
    await watching
    assert done.is_set(), f"no overflow after {len(heads)} events of 4 KiB"
    return max(heads)


async def test_r14_frozen_client_is_cut_off_and_a_healthy_one_is_not(
    http: httpx.AsyncClient, tight_server: Server, tenant: TenantKey
) -> None:
    sid = await new_session(http)
    path = f"/v1/sessions/{sid}/events/stream"
    healthy_ids: list[int] = []
    healthy_controls: list[Frame] = []

    async def healthy() -> None:
        async with http.stream("GET", path) as response:
            async for frame in read_frames(response):
                if frame.id is not None:
                    healthy_ids.append(int(frame.id))
                elif frame.event is not None:
                    healthy_controls.append(frame)

    reading = asyncio.create_task(healthy())
    # Sends its request, then never reads (as after kill -STOP), with a tiny receive buffer.
    frozen = await RawStream.open(tight_server, path, tenant.headers, rcvbuf=4096)
    try:

        async def both_open() -> bool:
            return (await gauges(tight_server.base_url))["open_streams"] == 2

        await wait_until(both_open, within=5)
        baseline = await overflows(tight_server)
        head = await produce_until_overflow(http, tight_server, sid, baseline=baseline)

        async def frozen_gone() -> bool:
            g = await gauges(tight_server.base_url)
            return g["open_streams"] == 1 and g["bus"]["subscriptions"] == 1

        took = await wait_until(frozen_gone, within=30)  # a hang guard, not a latency bound
        print(f"R14: frozen stream closed {took:.2f} s after its inbox overflowed")

        async def healthy_caught_up() -> bool:
            return bool(healthy_ids) and healthy_ids[-1] == head

        await wait_until(healthy_caught_up, within=10)
    finally:
        frozen.close()
        reading.cancel()
    assert healthy_ids == list(range(1, head + 1))
    assert healthy_controls == []  # the healthy client was never cut off


async def test_slow_client_gets_an_overflow_frame_and_resumes_without_loss(
    tight_server: Server, tenant: TenantKey, http: httpx.AsyncClient
) -> None:
    sid = await new_session(http)
    path = f"/v1/sessions/{sid}/events/stream"
    slow = await RawStream.open(tight_server, path, tenant.headers, rcvbuf=4096)
    received: list[int] = []
    end: Frame | None = None
    try:
        assert await slow.read_head() == 200
        frames = slow.frames()
        async with asyncio.timeout(5):
            first = await anext(f async for f in frames if f.id is not None)
        received.append(int(first.id or 0))
        # Stop reading while the session grows, until the server gives up on this client.
        baseline = await overflows(tight_server)
        head = await produce_until_overflow(http, tight_server, sid, baseline=baseline)
        async with asyncio.timeout(10):
            async for frame in frames:
                if frame.id is not None:
                    received.append(int(frame.id))
                elif frame.event is not None:
                    end = frame
    finally:
        slow.close()
    assert end is not None and end.event == "overflow" and end.id is None
    assert end.json["resume_after"] == str(received[-1])
    assert received == list(range(1, received[-1] + 1))
    resume = {"Last-Event-ID": end.json["resume_after"]}
    async with http.stream("GET", path, headers=resume) as response:
        async with asyncio.timeout(10):
            async for frame in read_frames(response):
                if frame.id is not None:
                    received.append(int(frame.id))
                    if received[-1] == head:
                        break
    assert received == list(range(1, head + 1)) == await session_seqs(http, sid)


async def test_streams_per_tenant_are_capped_with_429(
    http: httpx.AsyncClient, tight_server: Server
) -> None:
    sid = await new_session(http)
    path = f"/v1/sessions/{sid}/events/stream"
    async with asyncio.timeout(15):
        opened = [await http.send(http.build_request("GET", path), stream=True) for _ in range(4)]
        assert [r.status_code for r in opened] == [200] * 4
        refused = await http.get("/v1/events/stream")
        assert refused.status_code == 429
        assert refused.json()["code"] == "too_many_streams"
        assert int(refused.headers["Retry-After"]) >= 1
        await opened.pop().aclose()

        async def slot_free() -> bool:
            return (await gauges(tight_server.base_url))["open_streams"] < 4

        await wait_until(slot_free, within=5)
        again = await http.send(http.build_request("GET", path), stream=True)
        assert again.status_code == 200
        for response in [*opened, again]:
            await response.aclose()
