"""R7 (short form): SIGTERM to a replica during a streamed run and a background run.

Replica A streams a long run (`[sleep:20000]`) to a client and executes a short background
run; it gets SIGTERM mid-run. Expected:
- the stream ends with a final `event: shutdown` frame that carries no `id` (so the client's
  Last-Event-ID stays at the last real event) and tells it to reconnect;
- the process exits cleanly (exit code 0 or -SIGTERM; a bounded wait stops a hung exit);
- the short run finishes within the runs' grace period (COMPLETED); the long one is
  interrupted and that is recorded in its ledger (AUTO_STOP INTERRUPTED, RUN_FINISHED);
- replica B, on the same database, sees every event the stream delivered, in a gapless
  ledger (nothing lost, nothing half-written).
The full R7 (20 SSE clients on the session timelines, resumed on the other replica) needs
the SSE timelines, which live with another issue.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx

from app.store.stores import Stores
from tests.conftest import make_tenant, start_server, stop_server


async def _frames(response: httpx.Response) -> list[dict[str, str]]:
    """Raw SSE frames (field -> value), so a frame without `id` is visible as such."""
    frames: list[dict[str, str]] = []
    current: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if current:
                frames.append(current)
            current = {}
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        current[field] = value.removeprefix(" ")
    if current:
        frames.append(current)
    return frames


async def test_sigterm_mid_run_ends_streams_with_a_final_frame_and_loses_nothing(
    database_url: str, store: Stores, tmp_path: Path
) -> None:
    tenant = await make_tenant(store)
    a = await asyncio.to_thread(start_server, database_url, tmp_path / "a.log")
    b = await asyncio.to_thread(start_server, database_url, tmp_path / "b.log")
    try:
        async with (
            httpx.AsyncClient(base_url=a.base_url, headers=tenant.headers, timeout=30) as on_a,
            httpx.AsyncClient(base_url=b.base_url, headers=tenant.headers, timeout=30) as on_b,
        ):
            long_sid = (await on_a.post("/v1/sessions", json={})).json()["session_id"]
            short_sid = (await on_a.post("/v1/sessions", json={})).json()["session_id"]
            body = {"input": "[sleep:20000] long", "mode": "stream", "include_deltas": False}
            async with on_a.stream("POST", f"/v1/sessions/{long_sid}/runs", json=body) as stream:
                assert stream.status_code == 200
                reader = asyncio.create_task(_frames(stream))

                async def model_called() -> bool:
                    events = await on_b.get(f"/v1/sessions/{long_sid}/events")
                    return any(e["type"] == "MODEL_REQUEST" for e in events.json()["data"])

                for _ in range(100):
                    if await model_called():
                        break
                    await asyncio.sleep(0.1)
                short = await on_a.post(
                    f"/v1/sessions/{short_sid}/runs",
                    json={"input": "[sleep:1000] short", "mode": "background"},
                )
                assert short.status_code == 202
                a.process.send_signal(signal.SIGTERM)
                frames = await asyncio.wait_for(reader, 15)
            code = await asyncio.to_thread(a.process.wait, 25)  # bounded: a hung exit fails

            last = frames[-1]
            assert last.get("event") == "shutdown" and "id" not in last, frames[-3:]
            assert json.loads(last["data"])["reconnect"] is True
            assert code in (0, -signal.SIGTERM), a.log()[-3000:]

            runs = (await on_b.get(f"/v1/sessions/{long_sid}/runs")).json()["data"]
            assert [(r["status"], r["stop_reason"]) for r in runs] == [
                ("interrupted", "INTERRUPTED")
            ]
            short_runs = (await on_b.get(f"/v1/sessions/{short_sid}/runs")).json()["data"]
            assert [(r["status"], r["stop_reason"]) for r in short_runs] == [
                ("finished", "COMPLETED")
            ]
            ledger = (await on_b.get(f"/v1/sessions/{long_sid}/events")).json()["data"]
            assert [e["seq"] for e in ledger] == list(range(1, len(ledger) + 1))
            by_seq = {e["seq"]: e["type"] for e in ledger}
            delivered = [(int(f["id"]), f["event"]) for f in frames if "id" in f]
            assert delivered and all(by_seq[seq] == kind for seq, kind in delivered)
            tail = [e["type"] for e in ledger if e["seq"] > delivered[-1][0]]
            assert tail[-2:] == ["AUTO_STOP", "RUN_FINISHED"]
            projection = (await on_b.get(f"/v1/sessions/{long_sid}/projection")).json()
            assert projection["equals_live"] is True
    finally:
        for server in (a, b):
            await asyncio.to_thread(stop_server, server)
    assert "Traceback" not in a.log(), a.log()[-3000:]
