"""R20: canary secrets never reach the events, snapshots, runs, logs, SSE or the export."""

from __future__ import annotations

import json

import httpx
from sqlalchemy import text

from app.store.store import AgentSessionStore
from tests.conftest import Server, TenantKey

CANARIES = [
    "sk-test-CANARY0123456789abcdef",
    "ghp_CANARY0123456789abcdefghij",
    "AKIACANARY0123456789",
    "Bearer CANARYbearerTOKEN0123",
    "API_KEY=CANARYvalue42",
]


def leaked(blob: str) -> list[str]:
    return [c for c in ("CANARY0123456789", "CANARYbearer", "CANARYvalue") if c in blob]


async def test_r20_canaries_are_redacted_everywhere(
    server: Server, tenant: TenantKey, store: AgentSessionStore
) -> None:
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=tenant.headers, timeout=60
    ) as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        for canary in CANARIES:
            item = {"type": "message", "role": "user", "content": f"my key is {canary}"}
            await http.post(f"/v1/sessions/{sid}/items", json={"items": [item]})
        # Model output (echo), tool arguments and tool results, and a stream transcript.
        async with http.stream(
            "POST",
            f"/v1/sessions/{sid}/runs",
            json={"input": f"repeat {CANARIES[0]}", "mode": "stream"},
        ) as response:
            transcript = (await response.aread()).decode()
        arg = json.dumps({"text": CANARIES[1]})
        await http.post(f"/v1/sessions/{sid}/runs", json={"input": f"[tool:echo {arg}]"})
        await http.post(f"/v1/sessions/{sid}/save")
        export = (
            await http.get(f"/v1/sessions/{sid}/events", headers={"Accept": "application/x-ndjson"})
        ).text
        state = (await http.get(f"/v1/sessions/{sid}/state")).text
        runs = (await http.get(f"/v1/sessions/{sid}/runs")).text
        assert (await http.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"]
    assert leaked(transcript) == [] and "[REDACTED]" in transcript
    assert leaked(export) == [] and export.count("[REDACTED]") >= len(CANARIES)
    assert leaked(state) == [] and leaked(runs) == []
    async with store.read(tenant.tenant_id) as conn:
        for table in ("session_events", "session_snapshots", "runs"):
            rows = (await conn.execute(text(f"SELECT * FROM {table}"))).all()
            assert leaked(repr(rows)) == [], table
    assert leaked(server.log()) == []
