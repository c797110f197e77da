"""Issue #17, defect 1: deep nesting poisoned reads.

Metadata nested ~260 levels deep was accepted (201), and from then on GET of the session,
its events and the list pages answered 500 ("Maximum serialization depth exceeded"); at
~500-990 levels creation itself was a 500 (RecursionError in the recursive redaction walk).
Now every JSON body is scanned before it is parsed: deeper than 64 levels is a 422
`json_too_deep` naming the limit, wherever the deep value sits; 64 levels are stored and
read back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from app.runtime.session.json_limits import MAX_JSON_DEPTH

JSON = {"Content-Type": "application/json"}


def nested(depth: int) -> str:
    """A JSON array nested `depth` levels deep (depth 1 is `[]`)."""
    return "[" * depth + "]" * depth


def assert_too_deep(response: httpx.Response) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["code"] == "json_too_deep"
    assert body["max_depth"] == MAX_JSON_DEPTH
    assert str(MAX_JSON_DEPTH) in body["detail"]


@pytest.fixture
async def session_id(client: httpx.AsyncClient) -> str:
    response = await client.post("/v1/sessions", json={})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 260, 600, 990, 5000, 200_000])
async def test_deep_metadata_on_create_is_422(client: httpx.AsyncClient, depth: int) -> None:
    body = '{"metadata": {"a": ' + nested(depth) + "}}"
    response = await client.post("/v1/sessions", content=body, headers=JSON)
    assert_too_deep(response)
    listing = await client.get("/v1/sessions")
    assert listing.status_code == 200 and listing.json()["data"] == []


@pytest.mark.parametrize(
    ("method", "path", "template"),
    [
        ("PATCH", "/v1/sessions/{sid}", '{"metadata": {"a": %s}}'),
        ("POST", "/v1/sessions/{sid}/resume", '{"binding": {"w": %s}}'),
        ("POST", "/v1/sessions/{sid}/fork", '{"binding": {"w": %s}, "rebind": true}'),
        ("POST", "/v1/sessions/{sid}/restore", '{"state": {"memory": %s}}'),
        (
            "POST",
            "/v1/sessions/{sid}/items",
            '{"items": [{"type": "function_call_output", "call_id": "c", "output": %s}]}',
        ),
        (
            "POST",
            "/v1/sessions/{sid}/runs",
            '{"input": "hi", "client_tools": [{"name": "t", "parameters": {"p": %s}}]}',
        ),
    ],
)
async def test_deep_values_are_422_on_every_route(
    client: httpx.AsyncClient, session_id: str, method: str, path: str, template: str
) -> None:
    body = template % nested(600)
    response = await client.request(method, path.format(sid=session_id), content=body, headers=JSON)
    assert_too_deep(response)
    events = await client.get(f"/v1/sessions/{session_id}/events")
    assert events.status_code == 200
    assert [e["type"] for e in events.json()["data"]] == ["SESSION_CREATED"]


async def test_a_chunked_deep_body_is_422(client: httpx.AsyncClient) -> None:
    """Without a Content-Length the body arrives in pieces; it is scanned once whole."""

    async def pieces() -> AsyncIterator[bytes]:
        yield b'{"metadata": {"a": '
        for _ in range(10):
            yield b"[" * 100
        for _ in range(10):
            yield b"]" * 100
        yield b"}}"

    response = await client.post("/v1/sessions", content=pieces(), headers=JSON)
    assert_too_deep(response)


async def test_the_deepest_allowed_body_is_stored_and_read_back(
    client: httpx.AsyncClient,
) -> None:
    """The body `{"metadata": {"a": X}}` is 2 levels plus X's: X may be 62 deep, not 63."""
    too_deep = '{"metadata": {"a": ' + nested(MAX_JSON_DEPTH - 1) + "}}"
    assert_too_deep(await client.post("/v1/sessions", content=too_deep, headers=JSON))

    deepest = '{"metadata": {"a": ' + nested(MAX_JSON_DEPTH - 2) + "}}"
    created = await client.post("/v1/sessions", content=deepest, headers=JSON)
    assert created.status_code == 201, created.text
    sid = created.json()["session_id"]
    expected = json.loads(deepest)["metadata"]
    for path in (f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/events", "/v1/sessions"):
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text)
    assert (await client.get(f"/v1/sessions/{sid}")).json()["metadata"] == expected
    patched = await client.patch(f"/v1/sessions/{sid}", json={"metadata": {"b": 1}})
    assert patched.status_code == 200, patched.text
    assert (await client.get(f"/v1/sessions/{sid}")).json()["metadata"] == {**expected, "b": 1}


async def test_brackets_inside_strings_do_not_count(client: httpx.AsyncClient) -> None:
    text = '\\"' + nested(5000) + "{{{\\\\"  # escaped quotes and backslashes among them
    body = '{"metadata": {"a": "' + text + '"}}'
    created = await client.post("/v1/sessions", content=body, headers=JSON)
    assert created.status_code == 201, created.text
    assert created.json()["metadata"] == json.loads(body)["metadata"]


async def test_a_deep_tool_argument_in_a_run_input_does_not_crash_the_run(
    client: httpx.AsyncClient, session_id: str
) -> None:
    """The input is a string, so the body is shallow, but the scripted model and the tool
    parse the JSON inside it: their (recursive) parsers must refuse it, not crash the run."""
    directive = '[tool:echo {"text": ' + nested(5000) + "}]"
    response = await client.post(
        f"/v1/sessions/{session_id}/runs", json={"input": directive, "mode": "wait"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "finished", response.text
    for path in (f"/v1/sessions/{session_id}", f"/v1/sessions/{session_id}/events"):
        assert (await client.get(path)).status_code == 200
