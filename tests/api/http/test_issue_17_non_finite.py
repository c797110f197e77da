"""Issue #17, defect 2: NaN, Infinity and -Infinity were a 500.

Python's json reads them (and turns an overflowing literal such as 1e999 into infinity), but
they are not JSON: the response encoder and PostgreSQL's JSONB refuse them, so creating a
session with one in its metadata, patching it in, or sending one in a binding or a client
tool's parameters failed as a 500 `internal_error`. Now they are a 422 `non_finite_number`,
and nothing is written.
"""

from __future__ import annotations

import httpx
import pytest

JSON = {"Content-Type": "application/json"}
TOKENS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 400 + ".5"]


def assert_non_finite(response: httpx.Response) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["code"] == "non_finite_number", body
    assert "NaN" in body["detail"]


@pytest.fixture
async def session_id(client: httpx.AsyncClient) -> str:
    response = await client.post("/v1/sessions", json={"binding": {"workspace": "w"}})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize(
    "template",
    ['{"metadata": {"a": %s}}', '{"binding": {"workspace": "w", "n": [%s]}}'],
    ids=["metadata", "binding"],
)
async def test_create_refuses_non_finite_numbers(
    client: httpx.AsyncClient, template: str, token: str
) -> None:
    response = await client.post("/v1/sessions", content=template % token, headers=JSON)
    assert_non_finite(response)
    assert (await client.get("/v1/sessions")).json()["data"] == []


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize(
    ("method", "path", "template"),
    [
        ("PATCH", "/v1/sessions/{sid}", '{"metadata": {"a": {"b": %s}}}'),
        ("POST", "/v1/sessions/{sid}/resume", '{"binding": {"workspace": %s}}'),
        (
            "POST",
            "/v1/sessions/{sid}/runs",
            '{"input": "hi", "client_tools": [{"name": "t", "parameters": {"maximum": %s}}]}',
        ),
        (
            "POST",
            "/v1/sessions/{sid}/items",
            '{"items": [{"type": "function_call_output", "call_id": "c", "output": [%s]}]}',
        ),
    ],
    ids=["patch", "resume-binding", "client-tools", "items"],
)
async def test_other_routes_refuse_non_finite_numbers(
    client: httpx.AsyncClient, session_id: str, method: str, path: str, template: str, token: str
) -> None:
    url = path.format(sid=session_id)
    response = await client.request(method, url, content=template % token, headers=JSON)
    assert_non_finite(response)
    events = (await client.get(f"/v1/sessions/{session_id}/events")).json()["data"]
    assert [e["type"] for e in events] == ["SESSION_CREATED"]


async def test_the_words_inside_strings_and_large_finite_numbers_are_fine(
    client: httpx.AsyncClient,
) -> None:
    body = '{"metadata": {"NaN": "Infinity", "big": 1e308, "int": 1%s}}' % ("0" * 400)
    response = await client.post("/v1/sessions", content=body, headers=JSON)
    assert response.status_code == 201, response.text
    metadata = response.json()["metadata"]
    # PostgreSQL's JSONB writes 1e308 back out in full, as an integer: compare as floats.
    assert metadata["NaN"] == "Infinity" and float(metadata["big"]) == 1e308
    assert metadata["int"] == 10**400
    sid = response.json()["session_id"]
    assert (await client.get(f"/v1/sessions/{sid}")).json()["metadata"] == metadata
