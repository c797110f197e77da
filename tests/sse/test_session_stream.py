"""`GET /v1/sessions/{id}/events/stream` over real HTTP: R8, R11 (end to end), R15, tokens.

Every loop is bounded in count and in time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from app.assembly import runtime_over
from app.runtime.session.events import EventType, NewEvent
from app.store.stores import Stores
from tests.conftest import Server, TenantKey, make_tenant
from tests.sse.conftest import Frame, append_item, new_session, read_frames, session_seqs


@asynccontextmanager
async def stream(
    http: httpx.AsyncClient, path: str, **kw: Any
) -> AsyncIterator[tuple[httpx.Response, AsyncIterator[Frame]]]:
    async with http.stream("GET", path, **kw) as response:
        yield response, read_frames(response)


async def read_ids(
    frames: AsyncIterator[Frame], *, until_seq: int | None = None, count: int | None = None
) -> list[int]:
    """Ids of event frames (checking id == data.seq) up to a seq or a count; bounded."""
    ids: list[int] = []
    async with asyncio.timeout(15):
        async for frame in frames:
            if frame.id is None:
                assert frame.event in (None, "delta"), frame  # no overflow/ERROR expected
                continue
            assert frame.id == str(frame.json["seq"]) and frame.event == frame.json["type"]
            ids.append(int(frame.id))
            if (until_seq is not None and ids[-1] >= until_seq) or len(ids) == count:
                break
    return ids


async def test_r15_headers_retry_once_pings_and_no_ids_on_control_frames(
    http: httpx.AsyncClient,
) -> None:
    sid = await new_session(http)
    seen: list[Frame] = []
    headers = {"Accept-Encoding": "gzip, br"}
    async with stream(http, f"/v1/sessions/{sid}/events/stream", headers=headers) as (resp, frames):
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["cache-control"] == "no-store"
        assert resp.headers["x-accel-buffering"] == "no"
        assert "content-encoding" not in resp.headers
        # Idle, the stream keeps sending pings (every 1 s, ASR_SSE_PING_SECONDS): wait for
        # three. The timeout only stops a stream that never pings; their spacing is not judged.
        async with asyncio.timeout(30):
            async for frame in frames:
                seen.append(frame)
                if sum(f.comment is not None for f in seen) == 3:
                    break
    assert seen[0].retry == 1500 and sum(f.retry is not None for f in seen) == 1
    assert seen[1].id == "1" and seen[1].event == "SESSION_CREATED"
    assert all(f.id is None for f in seen if f.comment is not None or f.retry is not None)


async def test_r8_resume_exactness_over_20_reconnects(http: httpx.AsyncClient) -> None:
    """A producer appends ~200 events/s; the client drops after a random number of events
    and resumes, alternately with Last-Event-ID and with ?after_seq. The ids, concatenated,
    are exactly 1..N."""
    sid = await new_session(http)
    total = 240

    async def produce() -> None:
        for i in range(total):
            await append_item(http, sid, f"p{i}")
            await asyncio.sleep(0.003)

    producer = asyncio.create_task(produce())
    rng = random.Random(8)
    received: list[int] = []
    path = f"/v1/sessions/{sid}/events/stream"
    try:
        for attempt in range(20):
            cursor = received[-1] if received else 0
            if attempt % 2 == 0:
                kw: dict[str, Any] = {"headers": {"Last-Event-ID": str(cursor)}}
            else:
                kw = {"params": {"after_seq": cursor}}
            async with stream(http, path, **kw) as (_resp, frames):
                received += await read_ids(frames, count=rng.randint(3, 15))
    finally:
        await producer
    head = total + 1
    async with stream(http, path, headers={"Last-Event-ID": str(received[-1])}) as (_, frames):
        received += await read_ids(frames, until_seq=head)
    assert received == list(range(1, head + 1))
    assert received == await session_seqs(http, sid)


async def test_r8_reconnect_mid_run_receives_every_event_once_in_order(
    http: httpx.AsyncClient,
) -> None:
    sid = await new_session(http)
    run = await http.post(
        f"/v1/sessions/{sid}/runs",
        json={"input": "[continue:6] [sleep:60]", "mode": "background"},
    )
    assert run.status_code == 202, run.text
    run_path = run.headers["Location"]
    path = f"/v1/sessions/{sid}/events/stream"
    received: list[int] = []
    for _ in range(4):  # drop three times while the run is going
        cursor = received[-1] if received else 0
        async with stream(http, path, headers={"Last-Event-ID": str(cursor)}) as (_, frames):
            received += await read_ids(frames, count=4)
    for _ in range(200):  # bounded wait for the run to end
        if (await http.get(run_path)).json()["status"] not in ("queued", "running"):
            break
        await asyncio.sleep(0.05)
    head = (await http.get(f"/v1/sessions/{sid}")).json()["last_seq"]
    async with stream(http, path, headers={"Last-Event-ID": str(received[-1])}) as (_, frames):
        received += await read_ids(frames, until_seq=head)
    assert received == list(range(1, head + 1)) == await session_seqs(http, sid)
    assert head > 16, "the run should have produced events across the reconnects"


async def test_r8_bad_cursors_and_foreign_sessions(
    http: httpx.AsyncClient, sse_server: Server, store: Stores
) -> None:
    sid = await new_session(http)
    path = f"/v1/sessions/{sid}/events/stream"
    bad = await http.get(path, headers={"Last-Event-ID": "not-a-seq"})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_cursor"
    assert bad.headers["content-type"] == "application/problem+json"
    ahead = await http.get(path, headers={"Last-Event-ID": "99"})
    assert ahead.status_code == 422 and ahead.json()["code"] == "cursor_out_of_range"
    assert ahead.json()["last_seq"] == 1
    assert (await http.get(path, params={"after_seq": 2})).json()["code"] == "cursor_out_of_range"
    assert (await http.get(path, params={"after_seq": -1})).status_code == 422
    missing = await http.get("/v1/sessions/nope/events/stream")
    assert missing.status_code == 404
    other = await make_tenant(store)
    async with httpx.AsyncClient(base_url=sse_server.base_url, headers=other.headers) as foreign:
        response = await foreign.get(path, headers={"Last-Event-ID": "1"})
        assert response.status_code == 404 and response.json() == {
            **missing.json(),
            "detail": f"session {sid!r} not found",
            "instance": path,
        }
    async with httpx.AsyncClient(base_url=sse_server.base_url) as anonymous:
        assert (await anonymous.get(path)).status_code == 401


async def test_r11_a_1mib_event_streams_and_a_rolled_back_append_reaches_no_one(
    http: httpx.AsyncClient, store: Stores, tenant: TenantKey
) -> None:
    sid = await new_session(http)
    big = "x" * (1 << 20)
    async with stream(http, f"/v1/sessions/{sid}/events/stream") as (_, frames):
        assert await read_ids(frames, count=1) == [1]
        with pytest.raises(ValueError):  # inserts its event, then fails: rolled back
            await store.ledger.append_events(
                tenant.tenant_id,
                sid,
                events=[NewEvent(EventType.METADATA_UPDATED, {"doomed": True})],
                expected_seq=1,
                snapshot=("save", {"seq": 0}),
            )
        await store.ledger.append_events(
            tenant.tenant_id, sid, events=[NewEvent(EventType.METADATA_UPDATED, {"big": big})]
        )
        async with asyncio.timeout(10):
            frame = await anext(f async for f in frames if f.id is not None)
    assert frame.id == "2" and frame.json["payload"] == {"big": big}


async def test_types_filter_and_deltas_of_a_run(http: httpx.AsyncClient) -> None:
    sid = await new_session(http)
    path = f"/v1/sessions/{sid}/events/stream"
    params = {"types": "RUN_STARTED,RUN_FINISHED", "include": "deltas"}
    async with stream(http, path, params=params) as (_, frames):
        await asyncio.sleep(0.2)  # subscribed before the run starts: deltas are live only
        run = await http.post(
            f"/v1/sessions/{sid}/runs", json={"input": "[words:12]", "mode": "background"}
        )
        assert run.status_code == 202, run.text
        got: list[Frame] = []
        async with asyncio.timeout(15):
            async for frame in frames:
                if frame.retry is None and frame.comment is None:
                    got.append(frame)
                if frame.event == "RUN_FINISHED":
                    break
    events = [f.event for f in got if f.id is not None]
    deltas = [f.json["text"] for f in got if f.event == "delta"]
    assert events == ["RUN_STARTED", "RUN_FINISHED"]
    assert "".join(deltas) == " ".join(f"word{i}" for i in range(1, 13))
    assert all(f.id is None for f in got if f.event == "delta")


async def test_stream_tokens_scope_and_authenticate_browser_streams(
    http: httpx.AsyncClient, sse_server: Server
) -> None:
    sid = await new_session(http)
    other_sid = await new_session(http)
    issued = await http.post("/v1/stream-tokens", json={"session_id": sid, "ttl_seconds": 60})
    assert issued.status_code == 201, issued.text
    token = issued.json()["token"]
    tenant_wide = (await http.post("/v1/stream-tokens", json={})).json()["token"]
    key = http.headers["Authorization"].removeprefix("Bearer ")
    async with httpx.AsyncClient(base_url=sse_server.base_url, timeout=10) as browser:
        path = f"/v1/sessions/{sid}/events/stream"
        async with stream(browser, path, params={"token": token}) as (resp, frames):
            assert resp.status_code == 200
            assert await read_ids(frames, count=1) == [1]
        async with stream(browser, "/v1/events/stream", params={"token": tenant_wide}) as (r, _):
            assert r.status_code == 200
        other_path = f"/v1/sessions/{other_sid}/events/stream"
        other = await browser.get(other_path, params={"token": token})
        assert other.status_code == 404
        assert (await browser.get("/v1/events/stream", params={"token": token})).status_code == 401
        forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
        assert (await browser.get(path, params={"token": forged})).status_code == 401
        assert (await browser.get(path, params={"token": key})).status_code == 401  # never a key
        assert (await browser.post("/v1/stream-tokens", json={})).status_code == 401
    missing = await http.post("/v1/stream-tokens", json={"session_id": "nope"})
    assert missing.status_code == 404


async def test_resume_before_a_pruned_prefix_gets_the_marker_then_the_tail_then_live(
    http: httpx.AsyncClient, store: Stores, tenant: TenantKey
) -> None:
    """Pruning replaced seqs 1..cut by one HISTORY_PRUNED event at cut: a client resuming
    from inside that range gets the marker (which names the range), the tail, then live
    events, with no gap after the marker and no duplicate."""
    sid = await new_session(http)
    for i in range(5):
        await append_item(http, sid, f"before{i}")
    assert (await http.post(f"/v1/sessions/{sid}/save", json={})).is_success
    cut = (await http.get(f"/v1/sessions/{sid}")).json()["last_seq"]
    for i in range(3):
        await append_item(http, sid, f"after{i}")
    head = (await http.get(f"/v1/sessions/{sid}")).json()["last_seq"]
    outcome = await runtime_over(store).prune(tenant.tenant_id, sid)
    assert outcome.cut_seq == cut
    path = f"/v1/sessions/{sid}/events/stream"
    async with stream(http, path, headers={"Last-Event-ID": "2"}) as (_, frames):
        marker: Frame | None = None
        ids: list[int] = []
        async with asyncio.timeout(15):
            async for frame in frames:
                if frame.id is None:
                    continue
                if marker is None:
                    marker = frame
                ids.append(int(frame.id))
                if ids[-1] == head:
                    break
        assert marker is not None and marker.event == "HISTORY_PRUNED"
        assert marker.json["payload"]["first_seq"] == 1
        assert marker.json["payload"]["last_seq"] == cut
        assert ids == list(range(cut, head + 1))
        await append_item(http, sid, "live")
        assert await read_ids(frames, count=1) == [head + 1]
