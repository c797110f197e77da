"""R21: tenant caps answer 429 with Retry-After (never a 500, never unbounded growth)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import TenantKey, start_server, stop_server


async def test_per_tenant_caps_answer_429_with_retry_after(
    database_url: str, tmp_path: Path, tenant: TenantKey
) -> None:
    srv = start_server(
        database_url,
        tmp_path / "limits.log",
        ASR_MAX_SESSIONS_PER_TENANT="2",
        ASR_MAX_LIVE_RUNS_PER_TENANT="1",
        ASR_MAX_RUNS_PER_MINUTE="3",
    )
    try:
        async with httpx.AsyncClient(
            base_url=srv.base_url, headers=tenant.headers, timeout=30
        ) as h:
            a = (await h.post("/v1/sessions", json={})).json()["session_id"]
            b = (await h.post("/v1/sessions", json={})).json()["session_id"]
            third = await h.post("/v1/sessions", json={})
            assert third.status_code == 429 and third.json()["code"] == "too_many_sessions"
            assert int(third.headers["retry-after"]) > 0
            # Normal service right after: the tenant's sessions still answer.
            assert (await h.get(f"/v1/sessions/{a}")).status_code == 200

            slow = {"input": "[sleep:3000] x", "mode": "background"}
            started = await h.post(f"/v1/sessions/{a}/runs", json=slow)
            assert started.status_code == 202
            busy = await h.post(f"/v1/sessions/{b}/runs", json={"input": "hi"})
            assert busy.status_code == 429 and busy.json()["code"] == "too_many_runs"
            assert busy.headers["retry-after"] == "1"
            await h.post(f"/v1/sessions/{a}/runs/{started.json()['run_id']}/cancel")
            assert (await h.post(f"/v1/sessions/{b}/runs", json={"input": "ok"})).status_code == 200
            # Three runs a minute: a, b ("ok"), one more; the fourth is refused.
            assert (await h.post(f"/v1/sessions/{b}/runs", json={"input": "3"})).status_code == 200
            limited = await h.post(f"/v1/sessions/{b}/runs", json={"input": "4"})
            assert limited.status_code == 429 and limited.json()["code"] == "rate_limited"
            assert 0 < int(limited.headers["retry-after"]) <= 61
            page = await h.get(f"/v1/sessions/{a}/events", params={"limit": 100_000})
            assert page.status_code == 200  # clamped to ASR_PAGE_LIMIT_MAX, not refused
    finally:
        stop_server(srv)
    assert "Traceback" not in srv.log()


async def test_items_per_request_and_event_size_caps_then_normal_service(
    database_url: str, tmp_path: Path, tenant: TenantKey
) -> None:
    srv = start_server(
        database_url,
        tmp_path / "sizes.log",
        ASR_MAX_ITEMS_PER_REQUEST="3",
        ASR_MAX_EVENT_BYTES="4096",
    )

    def item(text: str) -> dict[str, str]:
        return {"type": "message", "role": "user", "content": text}

    try:
        async with httpx.AsyncClient(
            base_url=srv.base_url, headers=tenant.headers, timeout=30
        ) as h:
            sid = (await h.post("/v1/sessions", json={})).json()["session_id"]
            items = f"/v1/sessions/{sid}/items"
            many = await h.post(items, json={"items": [item(str(i)) for i in range(4)]})
            assert many.status_code == 422, many.text
            assert many.headers["content-type"].startswith("application/problem+json")
            big = await h.post(items, json={"items": [item("x" * 5000)]})
            assert big.status_code == 413 and big.json()["code"] == "payload_too_large"
            # Neither left a trace, and the session answers normally right after.
            events = (await h.get(f"/v1/sessions/{sid}/events")).json()["data"]
            assert [e["type"] for e in events] == ["SESSION_CREATED"]
            ok = await h.post(items, json={"items": [item("fine") for _ in range(3)]})
            assert ok.status_code == 201 and ok.json()["last_seq"] == 2
    finally:
        stop_server(srv)
    assert "Traceback" not in srv.log()
