"""Issue #18: the OpenAPI document is the contract.

Every operation has a stable camelCase id, a summary, a description and examples; every
example validates against the schema it illustrates; every error answer is a problem
document; events are typed by `type` (a discriminated union) and the ledger's real events
validate against it; stream answers describe their frames; every timestamp is RFC 3339 with
`Z`, and usage always has its three counters.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from app.runtime.session.events import EventType

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")
VERBS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture(scope="module")
async def spec(app: Any) -> dict[str, Any]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://asr.test") as c:
        return (await c.get("/openapi.json")).json()


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (verb, path, op)
        for path, item in spec["paths"].items()
        for verb, op in item.items()
        if verb in VERBS
    ]


def validator(spec: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator({**schema, "components": spec["components"]})


def test_every_operation_has_an_id_summary_description_and_example(spec: dict) -> None:
    ids = []
    for verb, path, op in operations(spec):
        where = f"{verb.upper()} {path}"
        assert re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", op["operationId"]), where
        assert op.get("summary"), where
        assert len(op.get("description", "")) > 40, where
        assert "'example'" in str(op), where
        for media_type, media in op.get("requestBody", {}).get("content", {}).items():
            assert "example" in media, (where, "request", media_type)
        for status, response in op["responses"].items():
            for media_type, media in response.get("content", {}).items():
                assert "example" in media, (where, status, media_type)
        ids.append(op["operationId"])
    assert len(ids) == len(set(ids)) >= 40


def test_every_error_answer_is_a_problem_document(spec: dict) -> None:
    for verb, path, op in operations(spec):
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            content = response.get("content", {})
            assert list(content) == ["application/problem+json"], (verb, path, status)
            media = content["application/problem+json"]
            assert media["schema"] == {"$ref": "#/components/schemas/Problem"}
            assert media["example"]["status"] == int(status)


def test_every_example_matches_its_schema(spec: dict) -> None:
    checked = 0
    for verb, path, op in operations(spec):
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body and "example" in body:
            errors = list(validator(spec, body["schema"]).iter_errors(body["example"]))
            assert errors == [], (verb, path, errors[0].message)
            checked += 1
        for status, response in op["responses"].items():
            for media_type, media in response.get("content", {}).items():
                if "example" not in media or media_type == "text/event-stream":
                    continue
                schema = media.get("schema", {})
                errors = list(validator(spec, schema).iter_errors(media["example"]))
                assert errors == [], (verb, path, status, errors[0].message)
                checked += 1
    assert checked > 80


def test_event_types_are_an_enum_and_events_a_discriminated_union(spec: dict) -> None:
    schemas = spec["components"]["schemas"]
    items = schemas["EventList"]["properties"]["data"]["items"]
    assert items["discriminator"]["propertyName"] == "type"
    assert set(items["discriminator"]["mapping"]) == {t.value for t in EventType}
    assert len(items["oneOf"]) == len(EventType)
    final = schemas["FinalOutputEvent"]
    assert final["properties"]["type"]["const"] == "FINAL_OUTPUT"
    assert final["properties"]["payload"]["$ref"] == "#/components/schemas/FinalOutput"
    type_field = schemas["EventTypeRead"]["properties"]["type"]
    assert set(type_field["enum"]) == {t.value for t in EventType}


def test_stream_answers_describe_their_frames(spec: dict) -> None:
    streams = 0
    for verb, path, op in operations(spec):
        for response in op["responses"].values():
            media = response.get("content", {}).get("text/event-stream")
            if media is None:
                continue
            description = media["schema"]["description"]
            if path.startswith("/a2a"):
                # A2A's own frames: `data:` lines of JSON-RPC responses only.
                assert "JSON-RPC" in description and "data: " in media["example"]
                continue
            if path.startswith("/v1/ag-ui"):
                # AG-UI's own frames (issue #22): `data:` lines of AG-UI events only.
                assert "AG-UI events" in description and "data: " in media["example"]
                continue
            for frame in ("ledger event", "delta", "control", "Last-Event-ID"):
                assert frame in description, (verb, path)
            assert "event: " in media["example"], (verb, path)
            streams += 1
    assert streams == 6  # two timelines, and four routes that may stream a run
    for name in ("ServerSentEvent", "DeltaFrame", "StreamEndFrame", "ShutdownFrame"):
        assert name in spec["components"]["schemas"]


async def test_real_events_validate_against_the_union(
    spec: dict, client: httpx.AsyncClient
) -> None:
    sid = (await client.post("/v1/sessions", json={"metadata": {"u": "a"}})).json()["session_id"]
    await client.post(f"/v1/sessions/{sid}/runs", json={"input": "[words:3]"})
    asked = await client.post(
        f"/v1/sessions/{sid}/runs",
        json={"input": '[tool:lookup {"q": "x"}]', "client_tools": [{"name": "lookup"}]},
    )
    call_id = asked.json()["pending"][0]["call_id"]
    await client.post(
        f"/v1/sessions/{sid}/tool-outputs", json={"outputs": [{"call_id": call_id, "output": "y"}]}
    )
    await client.post(f"/v1/sessions/{sid}/save")
    await client.post(f"/v1/sessions/{sid}/compact", json={"strategy": "truncate", "keep_last": 1})
    await client.patch(f"/v1/sessions/{sid}", json={"metadata": {"v": 1}, "max_items": 9})
    page = await client.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})
    schema = spec["paths"]["/v1/sessions/{session_id}/events"]["get"]["responses"]["200"]
    check = validator(spec, schema["content"]["application/json"]["schema"])
    errors = [e.message for e in check.iter_errors(page.json())]
    assert errors == []
    assert len({e["type"] for e in page.json()["data"]}) >= 15


def _timestamps(value: Any, key: str = "") -> list[str]:
    if isinstance(value, dict):
        return [t for k, v in value.items() if k != "payload" for t in _timestamps(v, k)]
    if isinstance(value, list):
        return [t for v in value for t in _timestamps(v, key)]
    return [value] if key.endswith("_at") and isinstance(value, str) else []


async def test_one_timestamp_format_and_full_usage_everywhere(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/sessions", json={})
    sid = created.json()["session_id"]
    answers = [
        created,
        await client.get(f"/v1/sessions/{sid}"),
        await client.get("/v1/sessions"),
        await client.post(
            f"/v1/sessions/{sid}/items",
            json={"items": [{"type": "message", "role": "user", "content": "hi"}]},
        ),
        await client.post(f"/v1/sessions/{sid}/runs", json={"input": "hi"}),
        await client.get(f"/v1/sessions/{sid}/runs"),
        await client.get(f"/v1/sessions/{sid}/events"),
        await client.post("/v1/stream-tokens", json={"session_id": sid}),
        await client.post(f"/v1/sessions/{sid}/fork", json={}),
    ]
    background = await client.post(
        f"/v1/sessions/{sid}/runs", json={"input": "[sleep:200] x", "mode": "background"}
    )
    assert background.status_code == 202
    assert set(background.json()["usage"]) == {"input_tokens", "output_tokens", "total_tokens"}
    answers.append(background)
    stamps = [t for answer in answers for t in _timestamps(answer.json())]
    assert len(stamps) > 20
    assert [t for t in stamps if not TIMESTAMP.match(t)] == []
    ndjson = {"Accept": "application/x-ndjson"}
    export = await client.get(f"/v1/sessions/{sid}/events", headers=ndjson)
    lines = [json.loads(line) for line in export.text.splitlines()]
    assert lines and all(TIMESTAMP.match(line["created_at"]) for line in lines)
    runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
    for run in runs:
        await client.post(f"/v1/sessions/{sid}/runs/{run['run_id']}/cancel")


def test_every_tag_is_described(spec: dict) -> None:
    used = {tag for _, _, op in operations(spec) for tag in op.get("tags", [])}
    described = {tag["name"]: tag.get("description", "") for tag in spec["tags"]}
    assert used == set(described)
    assert all(len(text) > 30 for text in described.values()), described


def test_webhooks_describe_a_delivery_of_every_event_type(spec: dict) -> None:
    webhooks = spec["webhooks"]
    assert set(webhooks) == {t.value for t in EventType}
    examples = 0
    for event_type, item in webhooks.items():
        post = item["post"]
        headers = {p["name"] for p in post["parameters"] if p["in"] == "header"}
        assert headers == {"webhook-id", "webhook-timestamp", "webhook-signature"}
        media = post["requestBody"]["content"]["application/json"]
        if "example" in media:
            errors = list(validator(spec, media["schema"]).iter_errors(media["example"]))
            assert errors == [], (event_type, errors[0].message)
            examples += 1
    assert examples >= 2


async def test_a_real_delivery_body_matches_its_webhook(
    spec: dict, client: httpx.AsyncClient
) -> None:
    """What the deliverer sends for the ledger's real events is what the document promises."""
    from app.runtime.session.events import Event
    from app.runtime.webhooks.delivery import delivery_body

    sid = (await client.post("/v1/sessions", json={})).json()["session_id"]
    await client.post(f"/v1/sessions/{sid}/runs", json={"input": "[words:3]"})
    page = (await client.get(f"/v1/sessions/{sid}/events", params={"limit": 100})).json()
    for shown in page["data"]:
        event = Event(**{**shown, "created_at": datetime.fromisoformat(shown["created_at"])})
        body = json.loads(delivery_body(event))
        schema = spec["webhooks"][shown["type"]]["post"]["requestBody"]["content"]
        errors = list(validator(spec, schema["application/json"]["schema"]).iter_errors(body))
        assert errors == [], (shown["type"], errors[0].message)
