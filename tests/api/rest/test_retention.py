"""Retention policies as data: a tenant's policy through the operators' API, a session's own
expiry and idle TTL at create and by PATCH, and a pass (dry, then real) that deletes what is
due and prunes long ledgers, counted in metrics.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.main import create_app
from app.runtime.session.retention import RetentionPolicy, apply_retention
from app.services import services_of
from app.settings import Settings
from tests.conftest import TenantKey, make_tenant

ADMIN_TOKEN = "operators-token-" + "r" * 32


@pytest.fixture(scope="module")
async def retention_app(settings: Settings) -> AsyncIterator[Any]:
    application = create_app(settings.model_copy(update={"admin_token": SecretStr(ADMIN_TOKEN)}))
    async with application.router.lifespan_context(application):
        yield application


def client_of(app: Any, headers: dict[str, str]) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=headers, timeout=30
    )


@pytest.fixture
async def clients(retention_app: Any) -> AsyncIterator[tuple[TenantKey, Any, Any]]:
    tenant = await make_tenant(services_of(retention_app).stores)
    async with (
        client_of(retention_app, tenant.headers) as user,
        client_of(retention_app, {"Authorization": f"Bearer {ADMIN_TOKEN}"}) as admin,
    ):
        yield tenant, user, admin


async def test_a_tenant_policy_is_data_the_operators_read_and_set(
    clients: tuple[TenantKey, httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    tenant, user, admin = clients
    path = f"/v1/admin/tenants/{tenant.tenant_id}/retention"
    default = (await admin.get(path)).json()
    assert default["stored"] is False and default["prune"] is False
    put = await admin.put(path, json={"idle_days": 30, "prune": True, "prune_min_events": 50})
    assert put.status_code == 200, put.text
    read = (await admin.get(path)).json()
    assert (read["idle_days"], read["prune"], read["prune_min_events"]) == (30, True, 50)
    assert read["stored"] is True
    assert (await admin.put(path, json={"idle_days": 0})).status_code == 422
    assert (await admin.put(path, json={"prune": "sometimes"})).status_code == 422
    unknown = await admin.put("/v1/admin/tenants/no-such-tenant/retention", json={})
    assert unknown.status_code == 404
    assert unknown.headers["content-type"].startswith("application/problem+json")
    assert (await user.get(path)).status_code == 401  # a tenant's key is not the admin token


async def test_a_session_sets_its_own_expiry_and_idle_ttl(
    clients: tuple[TenantKey, httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    _, user, _ = clients
    created = await user.post(
        "/v1/sessions",
        json={"idle_ttl_seconds": 3600, "expires_at": "2030-01-01T00:00:00Z"},
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["idle_ttl_seconds"] == 3600
    assert body["expires_at"].startswith("2030-01-01T00:00:00")
    sid = body["session_id"]
    patched = await user.patch(f"/v1/sessions/{sid}", json={"expires_at": None})
    assert patched.status_code == 200, patched.text
    assert patched.json()["expires_at"] is None and patched.json()["idle_ttl_seconds"] == 3600
    assert (await user.get(f"/v1/sessions/{sid}")).json()["idle_ttl_seconds"] == 3600
    for bad in ("2030-01-01T00:00:00", 0, "0000-01-01T00:00:00Z", "tomorrow"):
        refused = await user.patch(f"/v1/sessions/{sid}", json={"expires_at": bad})
        assert refused.status_code == 422, bad  # a time needs its zone; a number is none
    for bad in (5, 3_153_599_999):  # under a minute; over what the column holds
        ttl = await user.patch(f"/v1/sessions/{sid}", json={"idle_ttl_seconds": bad})
        assert ttl.status_code == 422, bad


async def _session(user: httpx.AsyncClient, items: int = 0, **body: Any) -> str:
    sid = str((await user.post("/v1/sessions", json=body)).json()["session_id"])
    for i in range(items):
        item = {"type": "message", "role": "user", "content": f"m{i}"}
        assert (
            await user.post(f"/v1/sessions/{sid}/items", json={"items": [item]})
        ).status_code == 201
    return sid


async def test_a_pass_deletes_what_is_due_and_prunes_long_ledgers(
    clients: tuple[TenantKey, httpx.AsyncClient, httpx.AsyncClient], retention_app: Any
) -> None:
    tenant, user, admin = clients
    expired = await _session(user, expires_at="2020-01-01T00:00:00Z")
    short_ttl = await _session(user, idle_ttl_seconds=60)
    kept = await _session(user, idle_ttl_seconds=86_400)
    long = await _session(user, items=8)
    assert (await user.post(f"/v1/sessions/{long}/save", json={})).status_code == 200
    await _session(user, items=2)  # too short to prune
    policy = f"/v1/admin/tenants/{tenant.tenant_id}/retention"
    assert (await admin.put(policy, json={"prune": True, "prune_min_events": 5})).status_code == 200

    run = f"/v1/admin/tenants/{tenant.tenant_id}/retention/run"
    dry = (await admin.post(run)).json()
    assert dry["dry_run"] is True
    assert {s["session_id"] for s in dry["sessions_deleted"]} == {expired}
    assert [(s["session_id"], s["cut_seq"]) for s in dry["sessions_pruned"]] == [(long, 10)]
    assert (await user.get(f"/v1/sessions/{expired}")).status_code == 200  # nothing removed

    services = services_of(retention_app)
    metrics = services.metrics
    deleted_before = metrics.retention_sessions_deleted._value.get()
    pruned_before = metrics.retention_events_pruned._value.get()
    real = await admin.post(run, params={"dry_run": "false"})
    assert real.status_code == 200, real.text
    report = real.json()
    assert {s["session_id"] for s in report["sessions_deleted"]} == {expired}
    assert report["events_pruned"] == 10
    assert (await user.get(f"/v1/sessions/{expired}")).status_code == 404
    first = (await user.get(f"/v1/sessions/{long}/events")).json()["data"][0]
    assert (first["type"], first["seq"]) == ("HISTORY_PRUNED", 10)
    assert metrics.retention_sessions_deleted._value.get() - deleted_before == 1
    assert metrics.retention_events_pruned._value.get() - pruned_before == 10

    # Later: the short idle TTL has passed, the long one has not.
    later = datetime.now(UTC) + timedelta(minutes=5)
    stores = services.stores
    again = await apply_retention(
        stores.maintenance,
        RetentionPolicy(idle_days=None, keep_snapshots=3),
        tenants=stores.accounts,
        now=later,
        tenant_ids=[tenant.tenant_id],
        pruner=services.runtime,
    )
    assert again.sessions_erased == [(tenant.tenant_id, short_ttl)]
    assert again.sessions_pruned == []  # pruned once: nothing new to prune
    assert (await user.get(f"/v1/sessions/{kept}")).status_code == 200
    assert (await user.get(f"/v1/sessions/{long}/projection")).json()["equals_live"] is True
