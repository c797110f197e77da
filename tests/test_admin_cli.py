"""Operator verbs: `asr tenant list`, `asr sessions ...` and `asr retention run`.

The export/import round trip runs the real `asr` command (a subprocess) on a session built
through the HTTP API, and compares the two ledgers and their folds.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from app.runtime.session.retention import RetentionPolicy, apply_retention
from app.services import services_of
from app.store.stores import Stores
from app.store.tables import session_snapshots, sessions
from tests.conftest import TenantKey
from tests.test_cli import asr


def _message(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": text}


async def _rich_session(client: httpx.AsyncClient) -> tuple[str, str]:
    """A session with a window, items, tool calls, a metadata patch, a save, a restore and a
    fork; returns (session id, fork id)."""
    created = await client.post(
        "/v1/sessions", json={"metadata": {"user": "ada"}, "binding": {"ws": "a"}, "max_items": 50}
    )
    sid = created.json()["session_id"]
    call = {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "42"}
    batches = [
        [_message("user", "hello")],
        [call, output, _message("assistant", "it is 42")],
        [_message("user", "again")],
    ]
    for batch in batches:
        assert (await client.post(f"/v1/sessions/{sid}/items", json={"items": batch})).is_success
    assert (await client.patch(f"/v1/sessions/{sid}", json={"metadata": {"n": 1}})).is_success
    assert (await client.post(f"/v1/sessions/{sid}/save")).is_success
    state = (await client.get(f"/v1/sessions/{sid}/state")).json()
    assert (await client.post(f"/v1/sessions/{sid}/restore", json={"state": state})).is_success
    fork = await client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 4, "metadata": {"f": 1}})
    fork_id = fork.json()["session_id"]
    await client.post(f"/v1/sessions/{fork_id}/items", json={"items": [_message("user", "b")]})
    return sid, fork_id


def _ledger(events: list[Any]) -> list[tuple[int, str, Any, Any, Any]]:
    return [(e.seq, e.type, e.payload, e.run_id, e.turn_id) for e in events]


@pytest.mark.parametrize("which", ["root", "fork"])
async def test_export_then_import_gives_an_identical_ledger_and_projection(
    which: str,
    app: Any,
    client: httpx.AsyncClient,
    tenant: TenantKey,
    other_tenant: TenantKey,
    database_url: str,
    tmp_path: Path,
) -> None:
    sid, fork_id = await _rich_session(client)
    source = sid if which == "root" else fork_id
    export = tmp_path / "session.jsonl"
    exported = asr(
        database_url, "sessions", "export", "--tenant", tenant.name, source, "-o", str(export)
    )
    assert exported.returncode == 0, exported.stderr
    lines = export.read_text().splitlines()
    assert json.loads(lines[0])["format"] == "asr.session-ledger.v1"

    imported = asr(database_url, "sessions", "import", "--tenant", other_tenant.name, str(export))
    assert imported.returncode == 0, imported.stderr
    new_id = imported.stdout.strip().splitlines()[-1]
    assert new_id != source

    runtime = services_of(app).runtime
    before = await runtime.list_events(tenant.tenant_id, source, limit=10_000)
    after = await runtime.list_events(other_tenant.tenant_id, new_id, limit=10_000)
    assert len(before) == len(lines) - 1
    assert _ledger(after) == _ledger(before)
    original = await runtime.load(tenant.tenant_id, source)
    copy = await runtime.load(other_tenant.tenant_id, new_id)
    assert copy.state.to_json() == original.state.to_json()
    _, folded = await runtime.projection(other_tenant.tenant_id, new_id)
    assert folded.to_json() == original.state.to_json()
    assert copy.session.metadata == original.session.metadata
    assert copy.session.binding == original.session.binding
    assert copy.session.root_session_id == new_id and copy.session.parent_session_id is None


def test_import_refuses_a_ledger_with_a_gap(
    database_url: str, tenant: TenantKey, tmp_path: Path
) -> None:
    header = {"format": "asr.session-ledger.v1", "last_seq": 2, "metadata": {}}
    event = {"seq": 1, "type": "SESSION_CREATED", "payload": {}}
    gapped = {"seq": 3, "type": "USER_INPUT", "payload": {}}
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(x) for x in (header, event, gapped)) + "\n")
    result = asr(database_url, "sessions", "import", "--tenant", tenant.name, str(bad))
    assert result.returncode == 1 and "line 3: seq 3, expected 2" in result.stderr


async def test_sessions_list_show_events_tail_and_tenant_list(
    client: httpx.AsyncClient, tenant: TenantKey, database_url: str
) -> None:
    sid = (await client.post("/v1/sessions", json={"metadata": {"k": "v"}})).json()["session_id"]
    await client.post(f"/v1/sessions/{sid}/items", json={"items": [_message("user", "x")]})
    tenants = asr(database_url, "tenant", "list")
    assert tenants.returncode == 0, tenants.stderr
    names = [json.loads(line)["name"] for line in tenants.stdout.splitlines()]
    assert tenant.name in names
    listing = asr(database_url, "sessions", "list", "--tenant", tenant.name)
    rows = [json.loads(line) for line in listing.stdout.splitlines()]
    assert [r["session_id"] for r in rows] == [sid] and rows[0]["last_seq"] == 2
    shown = json.loads(asr(database_url, "sessions", "show", "--tenant", tenant.name, sid).stdout)
    assert shown["memory_items"] == 1 and shown["metadata"] == {"k": "v"}
    events = asr(
        database_url, "sessions", "events", "--tenant", tenant.name, sid, "--after-seq", "1"
    )
    assert [json.loads(line)["type"] for line in events.stdout.splitlines()] == [
        "MEMORY_ITEMS_APPENDED"
    ]
    tail = asr(
        database_url, "sessions", "tail", "--tenant", tenant.name, sid,
        "--interval", "0.1", "--max-seconds", "0.3",
    )  # fmt: skip
    assert [json.loads(line)["seq"] for line in tail.stdout.splitlines()] == [1, 2]
    missing = asr(database_url, "sessions", "show", "--tenant", tenant.name, "nope")
    assert missing.returncode == 1 and "nope" in missing.stderr


async def _backdate(store: Stores, tenant_id: str, sid: str, **values: Any) -> None:
    async with store.database.write(tenant_id) as conn:
        await conn.execute(
            update(sessions)
            .where(sessions.c.tenant_id == tenant_id, sessions.c.session_id == sid)
            .values(**values)
        )


async def _snapshot_seqs(store: Stores, tenant_id: str, sid: str) -> list[int]:
    snap = session_snapshots.c
    async with store.database.read(tenant_id) as conn:
        rows = await conn.execute(
            select(snap.seq)
            .where(snap.tenant_id == tenant_id, snap.session_id == sid)
            .order_by(snap.seq)
        )
        return [r.seq for r in rows]


async def test_retention_erases_idle_sessions_and_prunes_snapshots(
    app: Any, client: httpx.AsyncClient, tenant: TenantKey, store: Stores
) -> None:
    ids = []
    for _ in range(3):
        ids.append((await client.post("/v1/sessions", json={})).json()["session_id"])
    idle, busy, live = ids
    old = datetime.now(UTC) - timedelta(days=40)
    await _backdate(store, tenant.tenant_id, idle, updated_at=old)
    await _backdate(store, tenant.tenant_id, busy, updated_at=old, active_run_id="run-1")
    for n in range(5):
        await client.post(f"/v1/sessions/{live}/items", json={"items": [_message("user", str(n))]})
        assert (await client.post(f"/v1/sessions/{live}/save")).is_success
    before = await _snapshot_seqs(store, tenant.tenant_id, live)
    assert len(before) == 5
    events_before = await store.ledger.list_events(tenant.tenant_id, live)
    policy = RetentionPolicy(idle_days=30, keep_snapshots=2)

    dry = await apply_retention(
        store.maintenance,
        policy,
        tenants=store.accounts,
        dry_run=True,
        tenant_ids=[tenant.tenant_id],
    )
    assert dry.sessions_erased == [(tenant.tenant_id, idle)]
    assert await store.ledger.get_session(tenant.tenant_id, idle) is not None

    report = await apply_retention(
        store.maintenance, policy, tenants=store.accounts, tenant_ids=[tenant.tenant_id]
    )
    assert report.sessions_erased == [(tenant.tenant_id, idle)]
    assert report.snapshots_deleted == 3
    assert await store.ledger.get_session(tenant.tenant_id, idle) is None
    assert await store.ledger.list_events(tenant.tenant_id, idle) == []
    assert await store.ledger.get_session(tenant.tenant_id, busy) is not None
    assert await _snapshot_seqs(store, tenant.tenant_id, live) == before[-2:]
    # Events are never pruned; the state still folds to the same memory.
    assert await store.ledger.list_events(tenant.tenant_id, live) == events_before
    loaded, folded = await services_of(app).runtime.projection(tenant.tenant_id, live)
    assert folded.memory_json() == loaded.state.memory_json()
    async with store.database.read(tenant.tenant_id) as conn:
        remaining = await conn.execute(
            select(func.count()).where(
                sessions.c.tenant_id == tenant.tenant_id, sessions.c.session_id.in_(ids)
            )
        )
        assert remaining.scalar_one() == 2


def test_retention_cli_reports_json(database_url: str, tenant: TenantKey) -> None:
    result = asr(
        database_url, "retention", "run", "--tenant", tenant.name,
        "--idle-days", "30", "--keep-snapshots", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary == {
        "dry_run": False,
        "idle_days": 30,
        "keep_snapshots": 1,
        "sessions_erased": 0,
        "sessions_pruned": 0,
        "events_pruned": 0,
        "snapshots_deleted": 0,
        "deliveries_deleted": 0,
    }


def test_retention_set_and_show_keep_a_tenant_policy(database_url: str, tenant: TenantKey) -> None:
    shown = asr(database_url, "retention", "show", "--tenant", tenant.name)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout.splitlines()[-1])["stored"] is False
    put = asr(
        database_url, "retention", "set", "--tenant", tenant.name,
        "--idle-days", "14", "--prune", "--prune-min-events", "500",
    )  # fmt: skip
    assert put.returncode == 0, put.stderr
    policy = {
        "tenant_id": tenant.tenant_id,
        "idle_days": 14,
        "prune": True,
        "prune_min_events": 500,
        "stored": True,
    }
    assert json.loads(put.stdout.splitlines()[-1]) == policy
    # What is not given stays.
    asr(database_url, "retention", "set", "--tenant", tenant.name, "--no-idle")
    shown = asr(database_url, "retention", "show", "--tenant", tenant.name)
    assert json.loads(shown.stdout.splitlines()[-1]) == {**policy, "idle_days": None}
    bad = asr(database_url, "retention", "set", "--tenant", tenant.name, "--idle-days", "0")
    assert bad.returncode != 0
    dry = asr(database_url, "retention", "run", "--tenant", tenant.name, "--dry-run")
    assert dry.returncode == 0, dry.stderr


def test_tenant_erase_prints_a_receipt_that_erasures_lists(
    database_url: str, tenant: TenantKey
) -> None:
    erased = asr(database_url, "tenant", "erase", tenant.name, "--by", "ticket-7")
    assert erased.returncode == 0, erased.stderr
    receipt = json.loads(erased.stdout.splitlines()[-1])
    assert receipt["tenant_id"] == tenant.tenant_id and receipt["scope"] == "tenant"
    assert receipt["requested_by"] == "cli:ticket-7"
    assert receipt["counts"] == {"api_keys": 1, "tenants": 1}
    listed = asr(database_url, "tenant", "erasures", tenant.tenant_id)
    assert [json.loads(line) for line in listed.stdout.splitlines()] == [receipt]
