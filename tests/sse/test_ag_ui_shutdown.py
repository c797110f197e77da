"""Issue #22: an AG-UI stream open when the server shuts down ends with a terminal AG-UI
event (RUN_ERROR `stream_cut`, or RUN_FINISHED `cancelled` if the run's interruption got
there first), never a bare cut, and the process still exits by itself (bounded wait only)."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid

import httpx
import pytest

from tests.conftest import TenantKey
from tests.sse.conftest import start_sse_server, stop_and_check


async def test_sigterm_ends_an_ag_ui_stream_with_a_terminal_event(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, tenant: TenantKey
) -> None:
    srv = start_sse_server(database_url, tmp_path_factory.mktemp("ag-ui"), "ag-ui")
    try:
        async with httpx.AsyncClient(
            base_url=srv.base_url, headers=tenant.headers, timeout=30
        ) as http:
            thread = f"t-{uuid.uuid4().hex[:8]}"
            body = {
                "threadId": thread,
                "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "[sleep:20000] long"}],
            }

            async def follow() -> list[dict]:
                events = []
                async with http.stream("POST", "/v1/ag-ui", json=body) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data:"):
                            events.append(json.loads(line[5:]))
                return events

            stream = asyncio.create_task(follow())
            for _ in range(300):  # bounded: until the run has started
                listed = await http.get(f"/v1/sessions/{thread}/runs")
                if listed.status_code == 200 and listed.json()["data"]:
                    break
                await asyncio.sleep(0.02)
            srv.process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(25):
                events = await stream
        assert events[0]["type"] == "RUN_STARTED"
        last = events[-1]
        assert (last["type"], last.get("code")) == ("RUN_ERROR", "stream_cut") or (
            last["type"] == "RUN_FINISHED" and last["outcome"] == {"type": "cancelled"}
        ), last
        srv.process.wait(timeout=20)
    finally:
        stop_and_check(srv)
