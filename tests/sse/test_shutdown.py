"""Graceful shutdown with streams open: each gets a final `shutdown` frame (no id) naming
where to resume, and the process exits by itself (a bounded wait stops a hung exit; how fast
it goes is not judged here)."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from tests.conftest import TenantKey
from tests.sse.conftest import (
    Frame,
    append_item,
    new_session,
    read_frames,
    session_seqs,
    start_sse_server,
    stop_and_check,
)


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
            srv.process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                results = await asyncio.gather(*followers)
        for frames in results:
            assert [f.id for f in frames] == ["1", None]
            assert frames[-1].event == "shutdown" and frames[-1].json["resume_after"] == "1"
        # Bounded wait only: a process still there after 20 s (uvicorn's graceful timeout)
        # fails here; how fast it exits is not judged.
        srv.process.wait(timeout=20)
    finally:
        stop_and_check(srv)


async def test_r7_sigterm_with_a_run_and_20_clients_who_resume_on_the_other_replica(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, tenant: TenantKey
) -> None:
    """R7 in full: a run in flight and 20 timeline subscribers on replica A; SIGTERM A.

    Every subscriber gets `event: shutdown` (no id) and its connection closes; A exits well
    inside uvicorn's 20 s; the run is closed INTERRUPTED in its ledger; each subscriber
    reconnects to replica B with its Last-Event-ID and, across both connections, has
    received exactly seqs 1..N of the final ledger, including what was appended meanwhile.
    """
    logs = tmp_path_factory.mktemp("r7")
    a = start_sse_server(database_url, logs, "a")
    b = start_sse_server(database_url, logs, "b")
    clients = 20
    try:
        async with (
            httpx.AsyncClient(base_url=a.base_url, headers=tenant.headers, timeout=30) as on_a,
            httpx.AsyncClient(base_url=b.base_url, headers=tenant.headers, timeout=30) as on_b,
        ):
            sid = await new_session(on_a)
            run = await on_a.post(
                f"/v1/sessions/{sid}/runs",
                json={"input": "[sleep:20000] long", "mode": "background"},
            )
            assert run.status_code == 202, run.text
            subscribed = asyncio.Semaphore(0)

            async def first_leg() -> list[Frame]:
                frames: list[Frame] = []
                async with on_a.stream("GET", f"/v1/sessions/{sid}/events/stream") as response:
                    assert response.status_code == 200
                    async for frame in read_frames(response):
                        if frame.comment is not None or frame.retry is not None:
                            continue
                        frames.append(frame)
                        if frame.event == "MODEL_REQUEST":
                            subscribed.release()
                return frames

            legs = [asyncio.create_task(first_leg()) for _ in range(clients)]
            async with asyncio.timeout(20):
                for _ in range(clients):
                    await subscribed.acquire()
            a.process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(15):
                first = await asyncio.gather(*legs)
            await asyncio.to_thread(a.process.wait, 25)  # bounded: a hung exit fails here
            # Written on B while the subscribers are away: the resume must bring it.
            await append_item(on_b, sid, "while you were away")

            async def second_leg(last_id: str) -> list[Frame]:
                frames: list[Frame] = []
                headers = {"Last-Event-ID": last_id}
                url = f"/v1/sessions/{sid}/events/stream"
                async with on_b.stream("GET", url, headers=headers) as response:
                    assert response.status_code == 200
                    async for frame in read_frames(response):
                        if frame.id is not None:
                            frames.append(frame)
                        if (
                            frame.event == "MEMORY_ITEMS_APPENDED"
                            and frame.json["payload"]["items"][0]["content"]
                            == "while you were away"
                        ):
                            return frames
                return frames

            for frames in first:
                end = frames[-1]
                assert end.event == "shutdown" and end.id is None, frames[-3:]
                assert all(f.id is not None for f in frames[:-1])
            async with asyncio.timeout(20):
                second = await asyncio.gather(
                    *(second_leg(frames[-2].id or "0") for frames in first)
                )
            ledger = await session_seqs(on_b, sid)
            types = [
                e["type"] for e in (await on_b.get(f"/v1/sessions/{sid}/events")).json()["data"]
            ]
            runs = (await on_b.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        assert [(r["status"], r["stop_reason"]) for r in runs] == [("interrupted", "INTERRUPTED")]
        assert types[-3:] == ["AUTO_STOP", "RUN_FINISHED", "MEMORY_ITEMS_APPENDED"]
        for before, after in zip(first, second, strict=True):
            ids = [int(f.id) for f in before if f.id] + [int(f.id) for f in after if f.id]
            assert ids == ledger, (ids, ledger)
    finally:
        stop_and_check(a)
        stop_and_check(b)
