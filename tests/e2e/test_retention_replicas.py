"""Retention applied by the service itself, once across replicas: two `asr serve` replicas
on one PostgreSQL run a retention pass every 0.3 s. A tenant's policy (prune, through the
operators' API) and sessions' own expiry are applied: every expired session is deleted and
every long ledger pruned exactly once between them -- the replicas' metrics add up to the
numbers, and stay there over further passes -- and each pruned ledger starts with one
HISTORY_PRUNED marker at its snapshot.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from app.store.engine import make_engine
from app.store.migrations import upgrade_head
from app.store.stores import open_stores
from tests.conftest import (
    Server,
    TenantKey,
    create_database,
    drop_database,
    make_tenant,
    start_server,
    stop_server,
)

ADMIN_TOKEN = "operators-token-" + "p" * 32
EXPIRING, LONG, ITEMS = 12, 6, 8
COUNTERS = (
    "asr_retention_sessions_deleted_total",
    "asr_retention_sessions_pruned_total",
    "asr_retention_events_pruned_total",
)


@pytest.fixture
def postgres(database_url: str, tmp_path: Path) -> Iterator[str]:
    """A database of the test's own: the passes work across every tenant of theirs."""
    if not database_url.startswith("postgresql"):
        pytest.skip("replicas share a database: PostgreSQL (SQLite has one process)")
    url = create_database(tmp_path, "retention")
    upgrade_head(url)
    yield url
    drop_database(url)


@pytest.fixture
async def tenant(postgres: str) -> AsyncIterator[TenantKey]:
    engine = make_engine(Settings(database_url=postgres))
    try:
        yield await make_tenant(open_stores(engine))
    finally:
        await engine.dispose()


@pytest.fixture
def pair(postgres: str, tmp_path: Path) -> Iterator[list[Server]]:
    env = {"ASR_RETENTION_INTERVAL_SECONDS": "0.3", "ASR_ADMIN_TOKEN": ADMIN_TOKEN}
    servers = [
        start_server(postgres, tmp_path / f"{name}.log", ready_seconds=120, **env) for name in "ab"
    ]
    yield servers
    for server in servers:
        stop_server(server)
        assert "Traceback" not in server.log(), server.log()[-4000:]


async def _counters(http: httpx.AsyncClient, server: Server) -> dict[str, float]:
    text = (await http.get(server.base_url + "/metrics")).text
    out = {}
    for name in COUNTERS:
        found = re.search(rf"^{name} ([0-9.e+]+)$", text, re.MULTILINE)
        out[name] = float(found.group(1)) if found else 0.0
    return out


async def _totals(http: httpx.AsyncClient, servers: list[Server]) -> dict[str, float]:
    each = [await _counters(http, s) for s in servers]
    return {name: sum(c[name] for c in each) for name in COUNTERS}


@pytest.mark.timeout(300)
async def test_two_replicas_delete_and_prune_each_session_once(
    pair: list[Server], tenant: TenantKey
) -> None:
    a, b = pair
    expires = (datetime.now(UTC) + timedelta(seconds=4)).isoformat()
    async with httpx.AsyncClient(headers=tenant.headers, timeout=30) as http:
        expiring = []
        for i in range(EXPIRING):
            base = (a if i % 2 else b).base_url
            r = await http.post(f"{base}/v1/sessions", json={"expires_at": expires})
            assert r.status_code == 201, r.text
            expiring.append(r.json()["session_id"])
        long, cuts = [], {}
        for i in range(LONG):
            base = (a if i % 2 else b).base_url
            sid = (await http.post(f"{base}/v1/sessions", json={})).json()["session_id"]
            for n in range(ITEMS):
                item = {"type": "message", "role": "user", "content": f"m{n}"}
                r = await http.post(f"{base}/v1/sessions/{sid}/items", json={"items": [item]})
                assert r.status_code == 201, r.text
            assert (await http.post(f"{base}/v1/sessions/{sid}/save", json={})).is_success
            cuts[sid] = ITEMS + 2  # SESSION_CREATED, the items, SESSION_SAVED
            long.append(sid)
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        put = await http.put(
            f"{a.base_url}/v1/admin/tenants/{tenant.tenant_id}/retention",
            json={"prune": True, "prune_min_events": 5},
            headers=admin,
        )
        assert put.status_code == 200, put.text

        want = {
            "asr_retention_sessions_deleted_total": EXPIRING,
            "asr_retention_sessions_pruned_total": LONG,
            "asr_retention_events_pruned_total": sum(cuts.values()),
        }
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if await _totals(http, pair) == want:
                break
            await asyncio.sleep(0.3)
        assert await _totals(http, pair) == want
        await asyncio.sleep(2)  # several more passes on each replica: nothing more to do
        assert await _totals(http, pair) == want

        for sid in expiring:
            assert (await http.get(f"{a.base_url}/v1/sessions/{sid}")).status_code == 404
        for sid in long:
            events = (await http.get(f"{b.base_url}/v1/sessions/{sid}/events")).json()["data"]
            assert [e["type"] for e in events].count("HISTORY_PRUNED") == 1
            assert (events[0]["type"], events[0]["seq"]) == ("HISTORY_PRUNED", cuts[sid])
            assert events[0]["payload"]["events_pruned"] == cuts[sid]
            projection = await http.get(f"{a.base_url}/v1/sessions/{sid}/projection")
            assert projection.json()["equals_live"] is True
