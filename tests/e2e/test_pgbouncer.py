"""The service through PgBouncer in transaction pooling mode (ASR_DB_PGBOUNCER=true).

A PgBouncer of our own (tests/pgbouncer.py) on a free loopback port forwards to this run's
PostgreSQL; a real `asr serve` talks only to it. Concurrent appends, a fork and the event
listing must behave exactly as on a direct connection. `.ci/run` also runs a larger part of
the suite through PgBouncer; this test keeps the path covered in every PostgreSQL pass.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.store.stores import Stores
from tests import pgbouncer
from tests.conftest import make_tenant, start_server, stop_server


@pytest.fixture
def bouncer_url(is_postgres: bool, database_url: str) -> Iterator[str]:
    if not is_postgres:
        pytest.skip("PgBouncer sits in front of PostgreSQL: PostgreSQL pass only")
    if pgbouncer.binary() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("pgbouncer must be installed under CI=true (.ci/run installs it)")
        pytest.skip("pgbouncer not installed (Debian package `pgbouncer`)")
    url = make_url(database_url)
    # Not under pytest's tmp_path: as root, PgBouncer runs as `postgres`, which must read it.
    root = Path(tempfile.mkdtemp(prefix="asr-pgbouncer-"))
    try:
        users = tuple({"postgres", url.username or "postgres"})
        port = pgbouncer.start(root, upstream_port=url.port or 5432, users=users)
        yield url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    finally:
        pgbouncer.stop(root)
        shutil.rmtree(root, ignore_errors=True)


async def test_service_works_through_pgbouncer_in_transaction_mode(
    bouncer_url: str, store: Stores, tmp_path: Path
) -> None:
    tenant = await make_tenant(store)
    server = await asyncio.to_thread(
        start_server, bouncer_url, tmp_path / "server.log", ASR_DB_PGBOUNCER="true"
    )
    try:
        async with httpx.AsyncClient(
            base_url=server.base_url, headers=tenant.headers, timeout=30
        ) as http:
            assert (await http.get("/readyz")).status_code == 200
            sid = (await http.post("/v1/sessions", json={})).json()["session_id"]

            async def append(i: int) -> int:
                item = {"type": "message", "role": "user", "content": f"m{i}"}
                response = await http.post(f"/v1/sessions/{sid}/items", json={"items": [item]})
                return response.status_code

            assert await asyncio.gather(*(append(i) for i in range(30))) == [201] * 30
            fork = await http.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 10})
            assert fork.status_code == 201, fork.text
            events = (await http.get(f"/v1/sessions/{sid}/events", params={"limit": 100})).json()
            assert [e["seq"] for e in events["data"]] == list(range(1, 32))
            projection = (await http.get(f"/v1/sessions/{sid}/projection")).json()
            assert projection["equals_live"] is True
    finally:
        await asyncio.to_thread(stop_server, server)
    assert "Traceback" not in server.log(), server.log()[-3000:]
