"""R9 over real HTTP: a server whose streams pause 200 ms between subscribing and reading
the table (the test-only fault point `ASR_SSE_HANDOFF_DELAY_MS`), 40 connects while a
producer appends without pause. Every connection receives exactly the seqs after its
cursor, up to where it stops reading: none missing, none twice."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Server, TenantKey
from tests.sse.conftest import (
    append_item,
    new_session,
    read_frames,
    start_sse_server,
    stop_and_check,
)


@pytest.fixture(scope="module")
def slow_handoff_server(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    srv = start_sse_server(
        database_url, tmp_path_factory.mktemp("handoff"), "handoff", ASR_SSE_HANDOFF_DELAY_MS="200"
    )
    yield srv
    stop_and_check(srv)


async def test_r9_handoff_race_over_http(slow_handoff_server: Server, tenant: TenantKey) -> None:
    async with httpx.AsyncClient(
        base_url=slow_handoff_server.base_url,
        headers=tenant.headers,
        timeout=15,
        limits=httpx.Limits(max_connections=40),
    ) as http:
        sid = await new_session(http)
        stop = asyncio.Event()

        async def produce() -> None:
            for i in range(5000):  # bounded; stopped once the connects are done
                if stop.is_set():
                    return
                await append_item(http, sid, f"p{i}")

        producing = asyncio.create_task(produce())
        rng = random.Random(99)

        async def connect() -> tuple[int, list[int]]:
            head = (await http.get(f"/v1/sessions/{sid}")).json()["last_seq"]
            after = rng.randint(max(0, head - 10), head)
            target = head + rng.randint(2, 8)  # beyond what was committed at connect time
            got: list[int] = []
            path = f"/v1/sessions/{sid}/events/stream"
            async with http.stream("GET", path, params={"after_seq": after}) as response:
                async with asyncio.timeout(15):
                    async for frame in read_frames(response):
                        if frame.id is not None:
                            got.append(int(frame.id))
                            if got[-1] >= target:
                                break
            return after, got

        try:
            await asyncio.sleep(0.1)
            results = []
            for _wave in range(4):  # 4 waves x 10 concurrent connects
                results += await asyncio.gather(*(connect() for _ in range(10)))
        finally:
            stop.set()
            await producing
    for after, got in results:
        assert got == list(range(after + 1, got[-1] + 1)), (after, got)
