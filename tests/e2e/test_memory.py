"""Memory management over real HTTP: auto-compaction under a budget, the breaker, the window,
and R6 (kill -9 during save and compact)."""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, TenantKey, start_server, stop_server


@pytest.fixture
async def http(server: Server, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, headers=tenant.headers, timeout=60) as c:
        yield c


async def all_events(http: httpx.AsyncClient, sid: str) -> list[dict]:
    return (await http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})).json()["data"]


async def test_words_past_a_4000_token_budget(http: httpx.AsyncClient) -> None:
    agent = {
        "max_input_tokens": 4000,
        "reserved_output_tokens": 500,
        "compaction": {"strategy": "summarize", "threshold_tokens": 3000, "keep_last": 4},
    }
    sid = (await http.post("/v1/sessions", json={"agent": agent})).json()["session_id"]
    for i in range(10):
        result = (
            await http.post(f"/v1/sessions/{sid}/runs", json={"input": f"[words:400] {i}"})
        ).json()
        assert result["stop_reason"] == "COMPLETED"
        display = (await http.get(f"/v1/sessions/{sid}")).json()
        assert display["estimated_tokens"] <= 3000, (i, display["estimated_tokens"])
    events = await all_events(http, sid)
    requests = [e["payload"] for e in events if e["type"] == "MODEL_REQUEST"]
    assert len(requests) == 10 and all(r["estimated_tokens"] <= 3500 for r in requests)
    compactions = [
        e for e in events if e["type"] == "MEMORY_COMPRESS" and e["payload"]["kind"] == "compact"
    ]
    assert compactions and all(c["payload"]["result"]["trigger"] == "auto" for c in compactions)
    display = (await http.get(f"/v1/sessions/{sid}")).json()
    assert display["last_compact"]["strategy"] == "summarize" and display["has_summary"]
    assert display["truncated"] is True
    memory = (await http.get(f"/v1/sessions/{sid}/memory", params={"full": "true"})).json()
    assert len(memory["history"]) == 20  # every original input and answer, from the ledger
    assert memory["truncated"] and memory["covers_seq"][0] > 1
    assert (await http.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"]


async def test_failing_summaries_trip_the_breaker_and_reset_closes_it(
    http: httpx.AsyncClient,
) -> None:
    agent = {"compaction": {"threshold_tokens": 64, "keep_last": 2, "breaker_threshold": 3}}
    sid = (await http.post("/v1/sessions", json={"agent": agent})).json()["session_id"]
    poison = {"type": "message", "role": "user", "content": "[fail-summary] " + "pad " * 200}
    await http.post(f"/v1/sessions/{sid}/items", json={"items": [poison]})
    for _ in range(3):
        run = (await http.post(f"/v1/sessions/{sid}/runs", json={"input": "more " * 50})).json()
        assert run["stop_reason"] == "COMPLETED"
    display = (await http.get(f"/v1/sessions/{sid}")).json()
    assert display["breaker"] == {"consecutive_failures": 3, "open": True}
    failures = [
        e
        for e in await all_events(http, sid)
        if e["type"] == "MEMORY_COMPRESS" and e["payload"]["kind"] == "compact_failed"
    ]
    assert len(failures) == 3  # open: no fourth attempt
    resumed = (await http.post(f"/v1/sessions/{sid}/resume", json={})).json()
    assert resumed["breaker"]["open"] is True
    manual = await http.post(f"/v1/sessions/{sid}/compact", json={"strategy": "summarize"})
    assert manual.status_code == 502 and manual.json()["code"] == "compaction_failed"
    reset = await http.post(f"/v1/sessions/{sid}/compact", json={"reset_breaker": True})
    assert reset.status_code == 200 and reset.json()["breaker"]["open"] is False
    truncated = await http.post(f"/v1/sessions/{sid}/compact", json={"strategy": "truncate"})
    assert truncated.json()["result"]["items_removed"] > 0
    assert (await http.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"]


async def test_window_context_preview_and_tool_results(http: httpx.AsyncClient) -> None:
    sid = (await http.post("/v1/sessions", json={"max_items": 4})).json()["session_id"]
    for i in range(4):
        await http.post(f"/v1/sessions/{sid}/runs", json={"input": f"q{i}"})
    memory = (await http.get(f"/v1/sessions/{sid}/memory")).json()
    assert [i["content"] for i in memory["items"]] == ["q2", "echo: q2", "q3", "echo: q3"]
    assert memory["truncated"] is True
    patched = await http.patch(f"/v1/sessions/{sid}", json={"max_items": 2})
    assert patched.json()["max_items"] == 2 and patched.json()["counts"]["items"] == 2
    await http.patch(f"/v1/sessions/{sid}", json={"clear_window": True})
    events_before = len(await all_events(http, sid))
    preview = (await http.get(f"/v1/sessions/{sid}/context", params={"max_input_tokens": 5})).json()
    assert preview["report"]["items_dropped"] == 0 and not preview["report"]["fits"]
    assert len(await all_events(http, sid)) == events_before  # the preview wrote nothing


async def test_r6_kill_during_save_and_compact(
    database_url: str, tmp_path: Path, tenant: TenantKey
) -> None:
    """kill -9 while saves and compactions of a large state are in flight: every restart
    resumes from an intact snapshot (old or new) and the fold equals live memory."""
    rng = random.Random(6)
    big = [
        {"type": "message", "role": "user", "content": f"item {i} " + "x" * 200} for i in range(200)
    ]
    for attempt in range(4):
        srv = start_server(database_url, tmp_path / f"r6-{attempt}.log")
        try:
            async with httpx.AsyncClient(
                base_url=srv.base_url, headers=tenant.headers, timeout=30
            ) as h:
                if attempt == 0:
                    await h.post("/v1/sessions", json={"session_id": "r6"})
                    for _ in range(5):
                        await h.post("/v1/sessions/r6/items", json={"items": big})
                assert (await h.get("/v1/sessions/r6/projection")).json()["equals_live"]
                tasks = [
                    asyncio.create_task(h.post("/v1/sessions/r6/save")),
                    asyncio.create_task(
                        h.post("/v1/sessions/r6/compact", json={"strategy": "tool_results"})
                    ),
                ]
                await asyncio.sleep(rng.uniform(0.0, 0.05))
                srv.process.send_signal(signal.SIGKILL)
                srv.process.wait(timeout=10)
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            if srv.process.poll() is None:
                stop_server(srv)
    srv = start_server(database_url, tmp_path / "r6-final.log")
    try:
        async with httpx.AsyncClient(
            base_url=srv.base_url, headers=tenant.headers, timeout=30
        ) as h:
            resumed = await h.post("/v1/sessions/r6/resume", json={})
            assert resumed.status_code == 200
            assert (await h.get("/v1/sessions/r6/projection")).json()["equals_live"]
            events = await all_events(h, "r6")
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    finally:
        stop_server(srv)
