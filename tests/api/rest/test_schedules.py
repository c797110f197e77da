"""`/v1/schedules` over ASGI: the verbs, their problem+json refusals (bad cron, bad time zone,
bad interval: 422, never 500), Idempotency-Key on the creating POSTs, pagination, the
scheduler loop of an app firing a tick, and the metrics it reports.

The shared test app runs no scheduler (it would fire every test's schedules, across tenants);
the firing test starts an app of its own that does, for as long as the test lasts."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import TenantKey


async def _session(client: httpx.AsyncClient) -> str:
    return (await client.post("/v1/sessions", json={})).json()["session_id"]


async def _schedule(client: httpx.AsyncClient, **body: object) -> dict:
    response = await client.post("/v1/schedules", json=body)
    assert response.status_code == 201, response.text
    return response.json()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"cron": "61 * * * *"}, "invalid_schedule"),
        ({"cron": "* * * *"}, "invalid_schedule"),
        ({"cron": "not cron at all"}, "invalid_schedule"),
        ({"cron": "0 0 31 2 *"}, "invalid_schedule"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "invalid_schedule"),
        ({"cron": "0 9 * * *", "timezone": "../../etc/passwd"}, "invalid_schedule"),
        ({}, "invalid_schedule"),
        ({"cron": "* * * * *", "interval_seconds": 60}, "invalid_schedule"),
        ({"interval_seconds": 0}, "validation_error"),
        ({"interval_seconds": 10**9}, "validation_error"),
        ({"interval_seconds": 60, "missed": "sometimes"}, "validation_error"),
        ({"interval_seconds": 60, "multitask": "reject"}, "validation_error"),
        ({"interval_seconds": 60, "tenant_id": "x"}, "validation_error"),
    ],
)
async def test_bad_schedules_are_problem_documents(
    client: httpx.AsyncClient, body: dict, code: str
) -> None:
    sid = await _session(client)
    response = await client.post("/v1/schedules", json={"session_id": sid, **body})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == code


async def test_targets_must_exist(client: httpx.AsyncClient) -> None:
    gone = await client.post("/v1/schedules", json={"session_id": "nope", "interval_seconds": 60})
    assert gone.status_code == 404 and gone.json()["code"] == "session_not_found"
    agent = await client.post("/v1/schedules", json={"agent_name": "nope", "interval_seconds": 60})
    assert agent.status_code == 422 and agent.json()["code"] == "unknown_agent"
    both = await client.post(
        "/v1/schedules", json={"session_id": "a", "agent_name": "b", "interval_seconds": 60}
    )
    assert both.status_code == 422 and both.json()["code"] == "invalid_schedule"


async def test_create_get_patch_pause_resume_delete(client: httpx.AsyncClient) -> None:
    sid = await _session(client)
    made = await _schedule(
        client, session_id=sid, input="hello", cron="0 9 * * 1-5", timezone="Europe/Paris"
    )
    sch = made["schedule_id"]
    assert made["status"] == "active" and made["next_fire_at"].endswith("Z")
    assert re.match(r"\d{4}-\d\d-\d\dT0[78]:00:00Z", made["next_fire_at"])  # 09:00 in Paris
    got = await client.get(f"/v1/schedules/{sch}")
    assert got.status_code == 200 and got.json() == made
    patched = await client.patch(f"/v1/schedules/{sch}", json={"interval_seconds": 3600})
    assert patched.status_code == 200
    assert patched.json()["cron"] is None and patched.json()["interval_seconds"] == 3600
    bad = await client.patch(f"/v1/schedules/{sch}", json={"timezone": "Nowhere/Else"})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_schedule"
    null = await client.patch(f"/v1/schedules/{sch}", json={"missed": None})
    assert null.status_code == 422
    paused = (await client.post(f"/v1/schedules/{sch}/pause")).json()
    assert paused["status"] == "paused" and paused["next_fire_at"] is None
    resumed = (await client.post(f"/v1/schedules/{sch}/resume")).json()
    assert resumed["status"] == "active" and resumed["next_fire_at"] is not None
    assert (await client.delete(f"/v1/schedules/{sch}")).status_code == 204
    gone = await client.get(f"/v1/schedules/{sch}")
    assert gone.status_code == 404 and gone.json()["code"] == "schedule_not_found"
    assert (await client.delete(f"/v1/schedules/{sch}")).status_code == 404


async def test_another_tenants_schedule_is_not_found(
    client: httpx.AsyncClient, app: object, other_tenant: TenantKey
) -> None:
    made = await _schedule(
        client, session_id=await _session(client), interval_seconds=600, paused=True
    )
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=other_tenant.headers
    ) as other:
        for method, path in (
            ("GET", ""),
            ("PATCH", ""),
            ("DELETE", ""),
            ("POST", "/pause"),
            ("POST", "/trigger"),
            ("GET", "/runs"),
        ):
            body = {"input": "x"} if method == "PATCH" else None
            response = await other.request(
                method, f"/v1/schedules/{made['schedule_id']}{path}", json=body
            )
            assert response.status_code == 404, (method, path, response.text)
        assert (await other.get("/v1/schedules")).json()["data"] == []


async def test_create_with_an_idempotency_key_is_replayed(client: httpx.AsyncClient) -> None:
    sid = await _session(client)
    body = {"session_id": sid, "interval_seconds": 600, "paused": True}
    headers = {"Idempotency-Key": f"create-{time.time_ns()}"}
    first = await client.post("/v1/schedules", json=body, headers=headers)
    again = await client.post("/v1/schedules", json=body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["schedule_id"] == first.json()["schedule_id"]
    other = await client.post(
        "/v1/schedules", json={**body, "interval_seconds": 60}, headers=headers
    )
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert len((await client.get("/v1/schedules")).json()["data"]) == 1


async def test_list_is_keyset_paginated(client: httpx.AsyncClient) -> None:
    sid = await _session(client)
    made = [
        (await _schedule(client, session_id=sid, interval_seconds=600, paused=True))["schedule_id"]
        for _ in range(5)
    ]
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/schedules", params=params)).json()
        seen += [s["schedule_id"] for s in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))
    bad = await client.get("/v1/schedules", params={"cursor": "!!"})
    assert bad.status_code == 422


async def test_trigger_starts_a_run_and_lists_it(client: httpx.AsyncClient) -> None:
    sid = await _session(client)
    made = await _schedule(client, session_id=sid, input="now", interval_seconds=3600, paused=True)
    sch = made["schedule_id"]
    headers = {"Idempotency-Key": f"trigger-{time.time_ns()}"}
    fired = await client.post(f"/v1/schedules/{sch}/trigger", headers=headers)
    assert fired.status_code == 202, fired.text
    fire = fired.json()
    assert fire["outcome"] == "started" and fire["trigger"] == "manual"
    assert fired.headers["Location"] == f"/v1/sessions/{sid}/runs/{fire['run_id']}"
    again = await client.post(f"/v1/schedules/{sch}/trigger", headers=headers)
    assert again.json()["run_id"] == fire["run_id"]
    listed = (await client.get(f"/v1/schedules/{sch}/runs")).json()
    assert [f["run_id"] for f in listed["data"]] == [fire["run_id"]]
    runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
    assert [r["run_id"] for r in runs] == [fire["run_id"]]


@pytest.fixture
async def firing(settings: Settings, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app whose scheduler runs (every 0.2 s), stopped with the test."""
    application = create_app(
        settings.model_copy(update={"schedules_enabled": True, "schedule_poll_seconds": 0.2})
    )
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://asr.test", headers=tenant.headers
        ) as c:
            yield c


async def test_the_app_fires_due_ticks_and_counts_them(firing: httpx.AsyncClient) -> None:
    client = firing
    sid = await _session(client)
    sch = (await _schedule(client, session_id=sid, input="tick", interval_seconds=1))["schedule_id"]
    fires: list[dict] = []
    for _ in range(100):  # the app's loop looks every 0.2 s: bounded at ~10 s
        fires = (await client.get(f"/v1/schedules/{sch}/runs")).json()["data"]
        if any(f["outcome"] == "started" for f in fires):
            break
        await asyncio.sleep(0.1)
    await client.post(f"/v1/schedules/{sch}/pause")
    assert any(f["outcome"] == "started" for f in fires), fires
    scrape = (await client.get("/metrics")).text
    assert re.search(r'^asr_schedule_fires_total\{trigger="schedule"\} [1-9]', scrape, re.M)
    assert "asr_schedule_skips_total" in scrape or "# TYPE asr_schedule_skips" in scrape


async def test_nul_in_input_and_metadata_is_stored_not_a_500(client: httpx.AsyncClient) -> None:
    """PostgreSQL's JSONB refuses NUL: it goes through the store's funnel, as in a run."""
    sid = await _session(client)
    made = await client.post(
        "/v1/schedules",
        json={
            "session_id": sid,
            "input": "a\x00b",
            "metadata": {"k": "c\x00d"},
            "cron": "@daily",
            "paused": True,
        },
    )
    assert made.status_code == 201, made.text
    assert "\x00" not in made.text
