"""Unpaired surrogates (valid JSON escapes, but not Unicode text, and refused by PostgreSQL)
are refused at the door with a 422 on both backends, instead of failing at the database as a
500 on one of them. NUL, the other such character, is stored as U+FFFD (see
`tests/api/rest/test_sessions.py`)."""

from __future__ import annotations

import json

import httpx
import pytest


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/sessions", {"metadata": {"\ud843": 1}}),
        ("/v1/sessions", {"binding": {"workspace": ["\udcb5"]}}),
    ],
)
async def test_unstorable_text_is_422(client: httpx.AsyncClient, path: str, body: dict) -> None:
    raw = json.dumps(body).encode()  # ensure_ascii: the escapes travel as JSON escapes
    response = await client.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "validation_error"


async def test_paired_surrogates_and_other_text_are_fine(client: httpx.AsyncClient) -> None:
    raw = json.dumps({"metadata": {"emoji": "\U0001f600", "tab": "a\tb"}}).encode()
    response = await client.post(
        "/v1/sessions", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["metadata"] == {"emoji": "\U0001f600", "tab": "a\tb"}
