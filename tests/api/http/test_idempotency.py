"""R2 for create: Idempotency-Key replays, conflicts and tenant scoping."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI

from app.runtime.session.service import SessionRuntime
from app.services import services_of
from tests.conftest import TenantKey


async def count_sessions(client: httpx.AsyncClient) -> int:
    return len((await client.get("/v1/sessions", params={"limit": 1000})).json()["data"])


async def test_same_key_same_body_replays_byte_identical(client: httpx.AsyncClient) -> None:
    body = {"metadata": {"n": 1}}
    headers = {"Idempotency-Key": "create-1"}
    first = await client.post("/v1/sessions", json=body, headers=headers)
    assert first.status_code == 201 and "idempotent-replayed" not in first.headers
    for _ in range(2):
        again = await client.post("/v1/sessions", json=body, headers=headers)
        assert again.status_code == 201
        assert again.content == first.content
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["location"] == first.headers["location"]
    assert await count_sessions(client) == 1


async def test_same_key_other_body_is_422(client: httpx.AsyncClient) -> None:
    headers = {"Idempotency-Key": "create-2"}
    await client.post("/v1/sessions", json={"metadata": {"n": 1}}, headers=headers)
    other = await client.post("/v1/sessions", json={"metadata": {"n": 2}}, headers=headers)
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert await count_sessions(client) == 1


async def test_a_failed_request_saves_nothing_and_may_be_retried(client: httpx.AsyncClient) -> None:
    await client.post("/v1/sessions", json={"session_id": "fixed"})
    headers = {"Idempotency-Key": "create-3"}
    clash = await client.post("/v1/sessions", json={"session_id": "fixed"}, headers=headers)
    assert clash.status_code == 409
    await client.delete("/v1/sessions/fixed")
    retried = await client.post("/v1/sessions", json={"session_id": "fixed"}, headers=headers)
    assert retried.status_code == 201


async def test_keys_are_scoped_to_the_tenant(
    app: FastAPI, client: httpx.AsyncClient, other_tenant: TenantKey
) -> None:
    headers = {"Idempotency-Key": "shared-key"}
    mine = await client.post("/v1/sessions", json={}, headers=headers)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=other_tenant.headers
    ) as other:
        theirs = await other.post("/v1/sessions", json={}, headers=headers)
        assert theirs.status_code == 201 and "idempotent-replayed" not in theirs.headers
        assert theirs.json()["session_id"] != mine.json()["session_id"]
        assert await count_sessions(other) == 1


async def test_concurrent_duplicates_run_once_and_the_other_replays(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime: SessionRuntime = services_of(app).runtime
    original = runtime.create
    gate = asyncio.Event()

    async def slow_create(*args: object, **kwargs: object):  # the test hook: hold the work open
        await gate.wait()
        return await original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime, "create", slow_create)
    headers = {"Idempotency-Key": "race"}
    # Both attempts are inside the work at once; the key, written in the work's transaction,
    # lets only one commit, and the other answers as a replay of it.
    first = asyncio.create_task(client.post("/v1/sessions", json={}, headers=headers))
    second = asyncio.create_task(client.post("/v1/sessions", json={}, headers=headers))
    await asyncio.sleep(0.2)
    gate.set()
    answers = [await first, await second]
    assert [a.status_code for a in answers] == [201, 201]
    assert answers[0].json() == answers[1].json()
    assert sorted(a.headers.get("idempotent-replayed", "") for a in answers) == ["", "true"]
    replay = await client.post("/v1/sessions", json={}, headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == answers[0].json()
    assert await count_sessions(client) == 1


async def test_keys_live_at_least_24_hours(app: FastAPI) -> None:
    assert services_of(app).stores.idempotency.idempotency_ttl.total_seconds() >= 24 * 3600
