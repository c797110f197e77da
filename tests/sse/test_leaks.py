"""R13: streams that are opened and dropped leave nothing behind.

200 streams (50 at a time): a third reset (RST) right after sending the request, before the
first byte comes back; a third read a few events and close normally; a third reset after
the headers. Afterwards the open-stream gauge, the per-tenant slots and the bus's
subscriptions are back to zero, and the server's asyncio tasks within 5 of the baseline.
"""

from __future__ import annotations

import asyncio
import gc

import httpx

from app.live.stream_response import StreamResponse, StreamSlots, StreamStop
from app.settings import Settings
from tests.conftest import Server, TenantKey
from tests.sse.conftest import RawStream, append_item, gauges, new_session, read_frames, wait_until


async def test_r13_open_and_abort_200_streams(
    http: httpx.AsyncClient, sse_server: Server, tenant: TenantKey
) -> None:
    sid = await new_session(http)
    for i in range(3):
        await append_item(http, sid, f"e{i}")
    path = f"/v1/sessions/{sid}/events/stream"
    # Warm up: the first stream of a process starts its one shutdown watcher.
    async with http.stream("GET", path) as response:
        async with asyncio.timeout(5):
            await anext(f async for f in read_frames(response) if f.id is not None)

    async def idle() -> bool:
        g = await gauges(sse_server.base_url)
        return g["open_streams"] == 0 and g["bus"]["subscriptions"] == 0

    await wait_until(idle, within=5)
    baseline = await gauges(sse_server.base_url)
    limit = asyncio.Semaphore(50)

    async def open_and_drop(i: int) -> None:
        async with limit:
            raw = await RawStream.open(sse_server, path, tenant.headers)
            try:
                if i % 3 == 1:
                    assert await raw.read_head() == 200
                    async with asyncio.timeout(10):
                        frames = raw.frames()
                        for _ in range(2):
                            await anext(f async for f in frames if f.id is not None)
                    raw.close()
                    return
                if i % 3 == 2:
                    assert await raw.read_head() == 200
                raw.reset()
            finally:
                raw.close()

    async with asyncio.timeout(60):
        await asyncio.gather(*(open_and_drop(i) for i in range(200)))

    async def back_to_baseline() -> bool:
        g = await gauges(sse_server.base_url)
        return (
            g["open_streams"] == 0
            and g["bus"]["subscriptions"] == 0
            and g["bus"]["topics"] == 0
            and abs(g["tasks"] - baseline["tasks"]) <= 5
        )

    try:
        took = await wait_until(back_to_baseline, within=10)
    except AssertionError:
        print("baseline", baseline, "now", await gauges(sse_server.base_url))
        raise
    after = await gauges(sse_server.base_url)
    print(f"R13: back to baseline {took:.2f} s after 200 dropped streams: {after}")
    assert after["open_streams_by_tenant"] == {}
    assert after["shutdown_watchers"] <= 1


async def test_slots_are_released_once_even_if_the_response_never_runs() -> None:
    """A slot taken by the route must come back although the body never starts (the
    client reset before the first byte) and however often release is called."""
    slots = StreamSlots(per_tenant=2)
    first = slots.acquire("t")
    first.release()
    first.release()
    assert slots.total == 0

    async def never_started():  # pragma: no cover - the point is that it never runs
        yield b""

    body = never_started()
    response = StreamResponse(body, slot=slots.acquire("t"), stop=StreamStop(), settings=Settings())
    assert slots.by_tenant() == {"t": 1}
    del response
    gc.collect()
    assert slots.total == 0
    await body.aclose()
