"""`GET /v1/event-types`: the event catalogue over HTTP (issue #15, typed events)."""

from __future__ import annotations

import httpx
from jsonschema import Draft202012Validator

from app.runtime.session.event_catalogue import event_catalogue
from app.runtime.session.events import EventType


async def test_every_event_type_is_served_with_its_description_and_schema(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/v1/event-types")
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [entry["type"] for entry in data] == [str(t) for t in EventType]
    assert data == [info.to_json() for info in event_catalogue()]
    for entry in data:
        assert set(entry) == {"type", "description", "payload_schema"}
        assert entry["description"]


async def test_the_catalogue_needs_a_key(anon: httpx.AsyncClient) -> None:
    response = await anon.get("/v1/event-types")
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_what_a_run_writes_validates_against_the_served_schemas(
    client: httpx.AsyncClient,
) -> None:
    schemas = {
        e["type"]: e["payload_schema"] for e in (await client.get("/v1/event-types")).json()["data"]
    }
    sid = (await client.post("/v1/sessions", json={"max_items": 20})).json()["session_id"]
    for text in ('[tool:echo {"text": "hi"}]', "[continue:1] more", "[fail]"):
        await client.post(f"/v1/sessions/{sid}/runs", json={"input": text, "mode": "wait"})
    await client.post(f"/v1/sessions/{sid}/compact", json={"strategy": "truncate", "keep_last": 2})
    events = (await client.get(f"/v1/sessions/{sid}/events")).json()["data"]
    assert {"TOOL_RESULT", "AUTO_CONTINUE", "ERROR", "MEMORY_COMPRESS"} <= {
        e["type"] for e in events
    }
    for event in events:
        validator = Draft202012Validator(schemas[event["type"]])
        assert [e.message for e in validator.iter_errors(event["payload"])] == [], event["type"]
