"""`GET /v1/export/sessions`: a tenant's sessions as one JSON Lines stream, resumable."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.conftest import TenantKey

NDJSON = "application/x-ndjson"


@pytest.fixture
async def other_client(app: object, other_tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=other_tenant.headers
    ) as c:
        yield c


async def export(client: httpx.AsyncClient, **params: object) -> list[dict]:
    response = await client.get("/v1/export/sessions", params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(NDJSON)
    return [json.loads(line) for line in response.text.splitlines()]


async def test_every_session_with_its_ledger_then_resumed_by_cursor(
    client: httpx.AsyncClient, other_client: httpx.AsyncClient
) -> None:
    ids = []
    for n in range(3):
        sid = (await client.post("/v1/sessions", json={"metadata": {"n": n}})).json()["session_id"]
        item = {"type": "message", "role": "user", "content": f"hello {n}"}
        await client.post(f"/v1/sessions/{sid}/items", json={"items": [item]})
        ids.append(sid)
    await other_client.post("/v1/sessions", json={})  # another tenant's: never exported

    lines = await export(client)
    assert [line["kind"] for line in lines] == ["session", "event", "event", "cursor"] * 3 + ["end"]
    assert [line["session_id"] for line in lines if line["kind"] == "session"] == ids[::-1]
    events = [line for line in lines if line["kind"] == "event"]
    per_session = {
        sid: [(e["seq"], e["type"]) for e in events if e["session_id"] == sid] for sid in ids
    }
    for sid in ids:
        ndjson = await client.get(f"/v1/sessions/{sid}/events", headers={"Accept": NDJSON})
        single = [json.loads(line) for line in ndjson.text.splitlines()]
        assert per_session[sid] == [(e["seq"], e["type"]) for e in single]
    assert lines[-1] == {"kind": "end", "sessions": 3}

    first = await export(client, limit=1)
    assert [line["kind"] for line in first][-2:] == ["cursor", "end"]
    resumed = await export(client, cursor=first[-2]["cursor"])
    assert [line["session_id"] for line in resumed if line["kind"] == "session"] == ids[1::-1]
    assert resumed[-1] == {"kind": "end", "sessions": 2}

    bad = await client.get("/v1/export/sessions", params={"cursor": "garbage"})
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem")
