"""Erasure leaves no trace: a unique marker is written through every path that stores
content (metadata, items, a run with a tool call and its approval, a compaction summary, a
webhook subscription, a schedule, delegation, a process with its workspace file, and
Idempotency-Key answers), the session is erased -- and, separately, a whole tenant -- and
then every column of every table (PostgreSQL as the superuser) and the workspace folder are
scanned: the marker is nowhere. What stays is the receipt, which holds counts only.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from app.main import create_app
from app.runtime.session.retention import RetentionPolicy, apply_retention
from app.settings import Settings
from app.store.stores import Stores
from tests.conftest import TenantKey
from tests.scan import files_holding, tables_holding

ADMIN_TOKEN = "operators-token-" + "x" * 32


@pytest.fixture(scope="module")
def workspace_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("erasure-workspaces")


@pytest.fixture(scope="module")
async def erasing_app(settings: Settings, workspace_root: Path) -> AsyncIterator[object]:
    application = create_app(
        settings.model_copy(
            update={
                "processes_enabled": True,
                "workspace_root": workspace_root,
                "process_allowlist": "tee,cat",
                "webhook_allow_networks": "127.0.0.1/32",
                "admin_token": SecretStr(ADMIN_TOKEN),
            }
        )
    )
    async with application.router.lifespan_context(application):
        yield application


def client_of(app: object, headers: dict[str, str]) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=headers, timeout=30
    )


@pytest.fixture
async def api(erasing_app: object, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(erasing_app, tenant.headers) as c:
        yield c


@pytest.fixture
async def admin(erasing_app: object) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(erasing_app, {"Authorization": f"Bearer {ADMIN_TOKEN}"}) as c:
        yield c


async def ok(response: httpx.Response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json() if response.content else {}


async def write_everywhere(api: httpx.AsyncClient, marker: str) -> str:
    """A session holding `marker` in every place content is stored; returns its id."""
    session = await ok(
        await api.post(
            "/v1/sessions",
            json={"metadata": {"note": marker}, "agent": {"approval_required": ["echo"]}},
        ),
        201,
    )
    sid = session["session_id"]
    item = {"type": "message", "role": "user", "content": f"remember {marker}"}
    await ok(await api.post(f"/v1/sessions/{sid}/items", json={"items": [item]}), 201)
    # A tool call that waits for an approval, then approved; the start's Idempotency-Key
    # keeps the answer it rendered.
    tool = json.dumps({"text": marker})
    started = await ok(
        await api.post(
            f"/v1/sessions/{sid}/runs",
            json={"input": f"[tool:echo {tool}] {marker}"},
            headers={"Idempotency-Key": f"start-{uuid.uuid4().hex}"},
        )
    )
    assert started["stop_reason"] == "BLOCKED_BY_APPROVAL", started
    call_id = started["pending"][0]["call_id"]
    approved = await ok(
        await api.post(
            f"/v1/sessions/{sid}/approvals",
            json={"call_id": call_id, "decision": "approve"},
            headers={"Idempotency-Key": f"approve-{uuid.uuid4().hex}"},
        )
    )
    assert marker in approved["output"]
    # Delegation: a child session whose own ledger holds the marker.
    child = json.dumps({"input": marker})
    delegated = await ok(
        await api.post(f"/v1/sessions/{sid}/runs", json={"input": f"[tool:delegate {child}]"})
    )
    assert marker in delegated["output"], delegated
    compact = {"strategy": "summarize", "keep_last": 1}
    await ok(await api.post(f"/v1/sessions/{sid}/compact", json=compact))
    await ok(
        await api.post(
            "/v1/webhooks",
            json={
                "url": f"http://127.0.0.1:9/{marker}",
                "event_types": ["RUN_FINISHED"],
                "session_id": sid,
                "description": marker,
            },
        ),
        201,
    )
    # An A2A push config: its token and credentials are kept in the webhook's format options.
    push = {
        "taskId": started["run_id"],
        "url": "http://127.0.0.1:9/a2a",
        "token": marker,
        "authentication": {"scheme": "Bearer", "credentials": marker},
    }
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig"}
    made = await ok(
        await api.post("/a2a", json={**rpc, "params": push}, headers={"A2A-Version": "1.0"})
    )
    assert made["result"]["token"] == marker, made
    await ok(
        await api.post(
            "/v1/schedules",
            json={"session_id": sid, "input": marker, "interval_seconds": 3600, "paused": True},
        ),
        201,
    )
    process = await ok(
        await api.post(
            f"/v1/sessions/{sid}/processes", json={"command": "tee notes.txt", "stdin": marker}
        ),
        201,
    )
    await until_exited(api, sid, process["process_id"])
    await ok(await api.post(f"/v1/sessions/{sid}/save"))  # a snapshot of it all
    return sid


async def until_exited(api: httpx.AsyncClient, sid: str, process_id: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        view = await ok(await api.get(f"/v1/sessions/{sid}/processes/{process_id}"))
        if view["status"] != "running":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the process did not exit within 10 s")


async def test_erasing_a_session_leaves_its_marker_nowhere(
    api: httpx.AsyncClient,
    admin: httpx.AsyncClient,
    tenant: TenantKey,
    database_url: str,
    workspace_root: Path,
) -> None:
    marker = f"mk{uuid.uuid4().hex}"
    sid = await write_everywhere(api, marker)
    before = await tables_holding(database_url, marker)
    for table in (
        "sessions",
        "session_events",
        "session_snapshots",
        "runs",
        "idempotency_keys",
        "webhook_subscriptions",
        "schedules",
    ):
        assert before.get(table), (table, before)
    assert files_holding(workspace_root, marker) != []
    children = (await api.get("/v1/sessions", params={"metadata.delegated_from": sid})).json()
    assert len(children["data"]) == 1

    await ok(await api.delete(f"/v1/sessions/{sid}"), 204)

    assert await tables_holding(database_url, marker) == {}
    assert files_holding(workspace_root, marker) == []
    for gone in (sid, children["data"][0]["session_id"]):
        assert (await api.get(f"/v1/sessions/{gone}")).status_code == 404
    receipts = await ok(await admin.get(f"/v1/admin/tenants/{tenant.tenant_id}/erasures"))
    [receipt] = receipts["data"]
    assert receipt["scope"] == "session" and receipt["session_id"] == sid
    assert receipt["requested_by"].startswith("key:")
    assert receipt["counts"]["sessions_erased"] == 2 and receipt["counts"]["files"] == 1
    assert marker not in json.dumps(receipt)


async def test_erasing_a_tenant_leaves_its_marker_nowhere_and_others_untouched(
    erasing_app: object,
    admin: httpx.AsyncClient,
    tenant: TenantKey,
    other_tenant: TenantKey,
    database_url: str,
    workspace_root: Path,
) -> None:
    marker, kept = f"mk{uuid.uuid4().hex}", f"mk{uuid.uuid4().hex}"
    async with client_of(erasing_app, tenant.headers) as api:
        await write_everywhere(api, marker)
        await write_everywhere(api, marker)  # two sessions, and the children they delegated
    async with client_of(erasing_app, other_tenant.headers) as other:
        other_sid = await write_everywhere(other, kept)
    assert (await tables_holding(database_url, marker)).get("session_events")

    receipt = await ok(
        await admin.delete(
            f"/v1/admin/tenants/{tenant.tenant_id}", params={"requested_by": "ticket-1"}
        )
    )

    assert await tables_holding(database_url, marker) == {}
    assert files_holding(workspace_root, marker) == []
    assert not (workspace_root / tenant.tenant_id).exists()
    assert receipt["scope"] == "tenant" and receipt["requested_by"] == "admin-api:ticket-1"
    counts = receipt["counts"]
    assert counts["tenants"] == 1 and counts["api_keys"] == 1 and counts["sessions"] == 4
    assert counts["files"] == 2 and marker not in json.dumps(receipt)
    async with client_of(erasing_app, tenant.headers) as api:
        refused = await api.get("/v1/sessions")
        assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"
    listed = await ok(await admin.get(f"/v1/admin/tenants/{tenant.tenant_id}/erasures"))
    assert [r["receipt_id"] for r in listed["data"]] == [receipt["receipt_id"]]
    # The other tenant keeps everything.
    assert (await tables_holding(database_url, kept)).get("session_events")
    assert files_holding(workspace_root, kept) != []
    async with client_of(erasing_app, other_tenant.headers) as other:
        await ok(await other.get(f"/v1/sessions/{other_sid}"))
    again = await admin.delete(f"/v1/admin/tenants/{tenant.tenant_id}")
    assert again.status_code == 404 and again.json()["code"] == "tenant_not_found"


async def test_the_operators_routes_take_the_admin_token_only(
    erasing_app: object, tenant: TenantKey, anon: httpx.AsyncClient
) -> None:
    path = f"/v1/admin/tenants/{tenant.tenant_id}/erasures"
    async with client_of(erasing_app, tenant.headers) as api:
        refused = await api.get(path)
    assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"
    async with client_of(erasing_app, {"Authorization": "Bearer " + "y" * 48}) as wrong:
        assert (await wrong.delete(f"/v1/admin/tenants/{tenant.tenant_id}")).status_code == 401
    # The shared test app has no admin token: the routes do not exist there.
    off = await anon.get(path)
    assert off.status_code == 404 and off.json()["code"] == "admin_disabled"
    async with client_of(erasing_app, {"Authorization": f"Bearer {ADMIN_TOKEN}"}) as admin:
        bad = await admin.get(path, params={"cursor": "../x"})
        assert bad.status_code == 422
        bad_id = await admin.delete("/v1/admin/tenants/a%20b")
        assert bad_id.status_code == 422


async def test_retention_erases_an_idle_session_as_completely_as_delete(
    api: httpx.AsyncClient, store: Stores, tenant: TenantKey, database_url: str
) -> None:
    """Rows only: a retention pass from the command line has no process plane, and the
    workspace folders are the service's (see docs/how-to/erase-data.md)."""
    marker = f"mk{uuid.uuid4().hex}"
    await write_everywhere(api, marker)
    report = await apply_retention(
        store.maintenance,
        RetentionPolicy(idle_days=1, keep_snapshots=1, webhook_log_days=None),
        tenants=store.accounts,
        now=datetime.now(UTC) + timedelta(days=2),
        tenant_ids=[tenant.tenant_id],
    )
    assert len(report.sessions_erased) == 2  # the session and the child it delegated to
    assert await tables_holding(database_url, marker) == {}
