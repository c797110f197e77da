"""Operations over ASGI: health, readiness, metrics, request ids and JSON logs.

Metric values are asserted exactly, so these tests build a fresh app (its own registry)
instead of the shared one whose counters other tests move.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.logs import JsonFormatter, redact
from app.main import begin_shutdown, create_app
from app.services import services_of
from app.settings import Settings
from app.store.migrations import script_revisions, upgrade_head
from tests.conftest import TenantKey, create_database, drop_database

USER = {"type": "message", "role": "user", "content": "a secret payload line"}


@pytest.fixture
async def fresh_app(settings: Settings) -> AsyncIterator[FastAPI]:
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


def _client(app: FastAPI, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://asr.test", headers=headers)


def _sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in Prometheus text, or None when it is absent."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and line.split(" ")[0] != name:
            continue
        series, value = line.rsplit(" ", 1)
        found = dict(re.findall(r'(\w+)="([^"]*)"', series))
        if series.split("{")[0] == name and found == labels:
            return float(value)
    return None


async def test_healthz_and_readyz_at_head(anon: httpx.AsyncClient) -> None:
    assert (await anon.get("/healthz")).json() == {"status": "ok"}
    ready = await anon.get("/readyz")
    assert ready.status_code == 200
    head, _ = script_revisions()
    assert ready.json()["schema"] == {"current": head, "expected": head, "state": "at_head"}


async def test_readyz_refuses_a_database_that_was_never_migrated(tmp_path: Path) -> None:
    # These helpers run their own event loop (asyncio.run), so they go to a thread.
    url = await asyncio.to_thread(create_database, tmp_path, "unmigrated")
    try:
        application = create_app(Settings(database_url=url, bootstrap_default_tenant=False))
        async with application.router.lifespan_context(application), _client(application) as c:
            response = await c.get("/readyz")
            assert response.status_code == 503
            assert response.headers["content-type"] == "application/problem+json"
            body = response.json()
            assert body["code"] == "not_ready" and body["reason"] == "schema_not_migrated"
            assert (await c.get("/healthz")).status_code == 200
            await asyncio.to_thread(upgrade_head, url)
            assert (await c.get("/readyz")).status_code == 200
    finally:
        await asyncio.to_thread(drop_database, url)


async def test_readyz_is_503_once_shutdown_begins(fresh_app: FastAPI) -> None:
    async with _client(fresh_app) as c:
        assert (await c.get("/readyz")).status_code == 200
        begin_shutdown(fresh_app)
        for _ in range(10):  # set through the loop: give it a turn
            if fresh_app.state.shutdown_event.is_set():
                break
            await asyncio.sleep(0)
        response = await c.get("/readyz")
        assert response.status_code == 503 and response.json()["reason"] == "shutting_down"
        assert (await c.get("/healthz")).status_code == 200


async def test_lifespan_exit_sets_the_shutdown_event(settings: Settings) -> None:
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        assert not application.state.shutdown_event.is_set()
    assert application.state.shutdown_event.is_set()


async def test_request_id_is_accepted_generated_and_sanitised(anon: httpx.AsyncClient) -> None:
    given = await anon.get("/healthz", headers={"X-Request-ID": "edge-42.abc"})
    assert given.headers["x-request-id"] == "edge-42.abc"
    generated = await anon.get("/healthz")
    assert re.fullmatch(r"[0-9a-f]{32}", generated.headers["x-request-id"])
    hostile = await anon.get("/healthz", headers={"X-Request-ID": "x" * 200})
    assert re.fullmatch(r"[0-9a-f]{32}", hostile.headers["x-request-id"])
    problem = await anon.get("/v1/sessions", headers={"X-Request-ID": "r-401"})
    assert problem.status_code == 401 and problem.headers["x-request-id"] == "r-401"


async def test_metrics_count_requests_by_route_template_and_events_by_type(
    fresh_app: FastAPI, tenant: TenantKey
) -> None:
    async with _client(fresh_app, tenant.headers) as c:
        ids = []
        for _ in range(2):
            created = await c.post("/v1/sessions", json={})
            assert created.status_code == 201
            ids.append(created.json()["session_id"])
        for _ in range(3):
            appended = await c.post(f"/v1/sessions/{ids[0]}/items", json={"items": [USER]})
            assert appended.status_code == 201
        assert (await c.get(f"/v1/sessions/{ids[1]}")).status_code == 200
        assert (await c.get("/v1/sessions/no-such-session")).status_code == 404
        assert (await c.get("/no/such/route")).status_code == 404
        await c.post(f"/v1/sessions/{ids[0]}/items", content=b"x" * 2_000_000)  # 413
        scrape = await c.get("/metrics")
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain")
    text = scrape.text
    http = "asr_http_requests_total"
    assert _sample(text, http, method="POST", route="/v1/sessions", status="201") == 2
    items = "/v1/sessions/{session_id}/items"
    assert _sample(text, http, method="POST", route=items, status="201") == 3
    assert _sample(text, http, method="POST", route=items, status="413") == 1
    one = "/v1/sessions/{session_id}"
    assert _sample(text, http, method="GET", route=one, status="200") == 1
    assert _sample(text, http, method="GET", route=one, status="404") == 1
    assert _sample(text, http, method="GET", route="unmatched", status="404") == 1
    latency = "asr_http_request_duration_seconds_count"
    assert _sample(text, latency, method="POST", route=items) == 4
    events = "asr_events_appended_total"
    assert _sample(text, events, type="SESSION_CREATED") == 2
    assert _sample(text, events, type="MEMORY_ITEMS_APPENDED") == 3
    assert _sample(text, "asr_sse_streams_active") == 0
    # No raw path, id or tenant ever becomes a label.
    for secret in (*ids, tenant.tenant_id, tenant.key, "no-such-session", "/no/such/route"):
        assert secret not in text


async def test_metrics_after_runs_match_what_the_runs_did(
    fresh_app: FastAPI, tenant: TenantKey
) -> None:
    inputs = {"hello": "COMPLETED", "[ask] anything": "NEEDS_USER_INPUT", "[fail]": None}
    usage = {"input_tokens": 0, "output_tokens": 0}
    async with _client(fresh_app, tenant.headers) as c:
        sid = (await c.post("/v1/sessions", json={})).json()["session_id"]
        for text, reason in inputs.items():
            run = await c.post(f"/v1/sessions/{sid}/runs", json={"input": text, "mode": "wait"})
            assert run.status_code == 200, run.text
            body = run.json()
            assert body["stop_reason"] == reason
            for key in usage:
                usage[key] += int((body.get("usage") or {}).get(key) or 0)
        events = (await c.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})).json()
        text = (await c.get("/metrics")).text
    types = [e["type"] for e in events["data"]]
    for event_type in set(types):
        assert _sample(text, "asr_events_appended_total", type=event_type) == types.count(
            event_type
        ), event_type
    runs = "asr_runs_finished_total"
    assert _sample(text, runs, stop_reason="COMPLETED") == 1
    assert _sample(text, runs, stop_reason="NEEDS_USER_INPUT") == 1
    assert _sample(text, runs, stop_reason="FAILED") == 1
    assert _sample(text, "asr_run_duration_seconds_count", stop_reason="COMPLETED") == 1
    calls = "asr_model_calls_total"
    assert _sample(text, calls, provider="scripted", outcome="ok") == 2
    assert _sample(text, calls, provider="scripted", outcome="error") == 1
    assert usage["input_tokens"] > 0
    tokens = "asr_model_tokens_total"
    assert _sample(text, tokens, provider="scripted", direction="input") == usage["input_tokens"]
    assert _sample(text, tokens, provider="scripted", direction="output") == usage["output_tokens"]
    route = "/v1/sessions/{session_id}/runs"
    assert _sample(text, "asr_http_requests_total", method="POST", route=route, status="200") == 3
    assert sid not in text


async def test_observer_records_bounded_labels(fresh_app: FastAPI) -> None:
    """Every Observer method lands in its series; unknown values collapse to `other`."""
    metrics = services_of(fresh_app).metrics
    runtime_observer = services_of(fresh_app).runtime.observer
    assert runtime_observer is metrics
    metrics.run_finished(stop_reason="COMPLETED", seconds=0.2)
    metrics.run_finished(stop_reason="COMPLETED", seconds=0.4)
    metrics.run_finished(stop_reason="something-unbounded-1234", seconds=1)
    metrics.model_call(provider="scripted", seconds=0.01, input_tokens=7, output_tokens=5)
    metrics.model_call(provider="scripted", seconds=0.01, ok=False)
    metrics.sse_streams_changed(1)
    metrics.bus_reconnected()
    metrics.lease_expired()
    async with _client(fresh_app) as c:
        text = (await c.get("/metrics")).text
    assert _sample(text, "asr_runs_finished_total", stop_reason="COMPLETED") == 2
    assert _sample(text, "asr_runs_finished_total", stop_reason="other") == 1
    assert (
        _sample(text, "asr_run_duration_seconds_sum", stop_reason="COMPLETED") == 0.6000000000000001
        or abs((_sample(text, "asr_run_duration_seconds_sum", stop_reason="COMPLETED") or 0) - 0.6)
        < 1e-9
    )
    assert _sample(text, "asr_model_calls_total", provider="scripted", outcome="ok") == 1
    assert _sample(text, "asr_model_calls_total", provider="scripted", outcome="error") == 1
    assert _sample(text, "asr_model_tokens_total", provider="scripted", direction="input") == 7
    assert _sample(text, "asr_model_tokens_total", provider="scripted", direction="output") == 5
    assert _sample(text, "asr_sse_streams_active") == 1
    assert _sample(text, "asr_bus_reconnects_total") == 1
    assert _sample(text, "asr_lease_expiries_total") == 1
    assert "something-unbounded" not in text


async def test_metrics_can_be_disabled(settings: Settings) -> None:
    application = create_app(settings.model_copy(update={"metrics_enabled": False}))
    async with application.router.lifespan_context(application), _client(application) as c:
        assert (await c.get("/metrics")).status_code == 404
        assert (await c.get("/healthz")).status_code == 200


async def test_access_log_is_json_with_ids_and_without_payload_or_key(
    fresh_app: FastAPI, tenant: TenantKey
) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger("app.access")
    access.addHandler(handler)
    previous = access.level
    access.setLevel(logging.INFO)
    try:
        async with _client(fresh_app, tenant.headers) as c:
            sid = (await c.post("/v1/sessions", json={})).json()["session_id"]
            headers = {"X-Request-ID": "req-items-1"}
            await c.post(f"/v1/sessions/{sid}/items", json={"items": [USER]}, headers=headers)
    finally:
        access.removeHandler(handler)
        access.setLevel(previous)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 2
    entry = lines[1]
    assert entry["msg"] == "request" and entry["level"] == "info"
    assert entry["request_id"] == "req-items-1"
    assert entry["tenant_id"] == tenant.tenant_id
    assert entry["session_id"] == sid
    assert entry["route"] == "/v1/sessions/{session_id}/items" and entry["status"] == 201
    raw = stream.getvalue()
    assert "secret payload" not in raw and tenant.key not in raw


def test_redaction_masks_keys_bearer_tokens_and_url_passwords() -> None:
    key = "asr_0123456789ab_" + "S3cr3t-value_xyz"
    text = redact(f"key={key} auth='Bearer abc.def' url=postgresql://u:pw@h/db")
    assert "S3cr3t" not in text and "abc.def" not in text and ":pw@" not in text
    assert "asr_0123456789ab_***" in text
