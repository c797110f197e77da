"""Issue #17, defect 3: `asr_sse_streams_active` never moved.

Nothing called `observer.sse_stream()`, so the gauge read 0 with streams open. Now every
response that starts as `text/event-stream` (a session stream, the tenant stream, a run in
stream mode) counts until it ends, however it ends: here a normal close, a reset (RST) and a
client that goes away mid-run. A server of its own, so that no other test's stream counts.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.conftest import Server, TenantKey
from tests.sse.conftest import (
    Frame,
    RawStream,
    append_item,
    new_session,
    read_frames,
    start_sse_server,
    stop_and_check,
    wait_until,
)

_GAUGE = re.compile(r"^asr_sse_streams_active (\S+)$", re.MULTILINE)


@pytest.fixture
def gauge_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_sse_server(database_url, tmp_path_factory.mktemp("gauge"), "gauge")
    yield srv
    stop_and_check(srv)


async def next_event(frames: AsyncIterator[Frame]) -> Frame:
    """The next frame with an id, leaving `frames` open (a generator expression around it
    would be closed when dropped, and close the response with it)."""
    async with asyncio.timeout(10):
        async for frame in frames:
            if frame.id is not None:
                return frame
    raise AssertionError("the stream ended")


async def active_streams(base_url: str) -> float:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        text = (await client.get("/metrics")).text
    match = _GAUGE.search(text)
    assert match is not None, text[:2000]
    return float(match.group(1))


async def test_the_gauge_counts_open_streams_and_drops_on_close_and_disconnect(
    gauge_server: Server, tenant: TenantKey
) -> None:
    base = gauge_server.base_url
    async with httpx.AsyncClient(
        base_url=base, headers=tenant.headers, timeout=httpx.Timeout(15, read=10)
    ) as http:
        sid = await new_session(http)
        await append_item(http, sid)
        assert await active_streams(base) == 0

        async def settles_at(value: float) -> None:
            async def reached() -> bool:
                return await active_streams(base) == value

            await wait_until(reached, within=10)

        async with http.stream("GET", f"/v1/sessions/{sid}/events/stream") as session_stream:
            session_frames = read_frames(session_stream)
            await next_event(session_frames)
            assert await active_streams(base) == 1

            tenant_stream = await RawStream.open(gauge_server, "/v1/events/stream", tenant.headers)
            try:
                assert await tenant_stream.read_head() == 200
                await next_event(tenant_stream.frames())
                assert await active_streams(base) == 2

                run = {"input": "[sleep:20000] slow", "mode": "stream"}
                async with http.stream("POST", f"/v1/sessions/{sid}/runs", json=run) as run_stream:
                    assert run_stream.status_code == 200
                    run_frames = read_frames(run_stream)
                    await next_event(run_frames)
                    assert await active_streams(base) == 3
                # The run's client went away mid-run: its stream ends, the run goes on.
                await settles_at(2)
            finally:
                tenant_stream.reset()  # RST, as a crashed client would
                tenant_stream.close()
            await settles_at(1)
        await settles_at(0)

        # A plain request never counts.
        assert (await http.get(f"/v1/sessions/{sid}")).status_code == 200
        assert await active_streams(base) == 0
        runs = (await http.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        for run_view in runs:
            await http.post(f"/v1/sessions/{sid}/runs/{run_view['run_id']}/cancel")
