"""Graceful shutdown with streams open: each gets a final `shutdown` frame (no id) naming
where to resume, and the process exits well inside uvicorn's 20 s graceful timeout."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest

from tests.conftest import TenantKey
from tests.sse.conftest import Frame, new_session, read_frames, start_sse_server, stop_and_check


async def test_sigterm_says_goodbye_on_every_stream(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, tenant: TenantKey
) -> None:
    srv = start_sse_server(database_url, tmp_path_factory.mktemp("shutdown"), "shutdown")
    try:
        async with httpx.AsyncClient(
            base_url=srv.base_url, headers=tenant.headers, timeout=15
        ) as http:
            sid = await new_session(http)

            async def follow() -> list[Frame]:
                frames: list[Frame] = []
                async with http.stream("GET", f"/v1/sessions/{sid}/events/stream") as response:
                    async for frame in read_frames(response):
                        if frame.comment is None and frame.retry is None:
                            frames.append(frame)
                return frames

            followers = [asyncio.create_task(follow()) for _ in range(3)]
            await asyncio.sleep(0.5)
            started = time.monotonic()
            srv.process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                results = await asyncio.gather(*followers)
        for frames in results:
            assert [f.id for f in frames] == ["1", None]
            assert frames[-1].event == "shutdown" and frames[-1].json["resume_after"] == "1"
        srv.process.wait(timeout=20)
        assert time.monotonic() - started < 10
    finally:
        stop_and_check(srv)
