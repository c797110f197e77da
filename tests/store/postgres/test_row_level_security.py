"""R19: PostgreSQL row-level security, the second tenant wall.

The database is set up as docs/how-to/security.md says: `deploy/postgres/roles.sql` makes
an owner role (migrations) and an app role (the service) that owns nothing, is no superuser
and cannot bypass RLS; `asr migrate` runs as the owner. Then, connected as the app role:
a raw query with no tenant sees nothing, one scoped to tenant A sees only A's rows, a pooled
connection carries no tenant from one transaction into the next, and the whole service
(runs, streams, forks, the sweeper) works. SQLite has no RLS (the embedded default is
single-tenant); the application's own tenant filters are tested on both backends (R16).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy import select, text

from app.runtime.events import EventType, NewEvent
from app.runtime.ports import NewSession
from app.settings import Settings
from app.store.base import ALL_TENANTS
from app.store.engine import make_engine
from app.store.store import AgentSessionStore, store_for
from app.store.tables import metadata, sessions
from tests.conftest import (
    PG_ENV,
    TenantKey,
    create_database,
    drop_database,
    make_tenant,
    start_server,
    stop_server,
)
from tests.pgroles import Roles, drop_roles, make_roles

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get(PG_ENV), reason="row-level security is PostgreSQL's (SQLite has none)"
    ),
    # The PgBouncer tier's pooler knows only its own users; these roles are made per run on
    # the server itself, and the direct PostgreSQL tier runs this module (and everything
    # else, as the app role).
    pytest.mark.skipif(
        os.environ.get("ASR_DB_PGBOUNCER") == "true", reason="roles are made on the server"
    ),
]

# Every table that holds a tenant's rows: the catalog check below also proves that the
# migration's policies cover each of them.
TENANT_TABLES = tuple(t.name for t in metadata.sorted_tables if "tenant_id" in t.c)


@pytest.fixture(scope="module")
def roles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Roles]:
    """A fresh database set up by roles.sql and migrated by its owner role."""
    admin_url = create_database(tmp_path_factory.mktemp("rls"), "rls")
    roles = make_roles(admin_url)
    yield roles
    drop_database(admin_url)
    drop_roles(admin_url, roles)


@pytest.fixture
async def app_store(roles: Roles) -> AsyncIterator[AgentSessionStore]:
    """The store as the service runs it, on one pooled connection (R19 case 2)."""
    engine = make_engine(Settings(database_url=roles.app_url, db_pool_size=1, db_max_overflow=0))
    yield store_for(engine)
    await engine.dispose()


def _items(n: int, tag: str) -> list[NewEvent]:
    return [
        NewEvent(
            EventType.MEMORY_ITEMS_APPENDED,
            {"items": [{"type": "message", "role": "user", "content": f"{tag}-{i}"}]},
        )
        for i in range(n)
    ]


async def _tenant_with_session(store: AgentSessionStore, n: int) -> TenantKey:
    tenant = await make_tenant(store)
    await store.create_session(
        tenant.tenant_id,
        session=NewSession(session_id="s", metadata={}, agent={}, binding={}),
        events=_items(n, tenant.name),
    )
    return tenant


async def test_catalog_app_role_is_walled_and_every_tenant_table_forces_rls(roles: Roles) -> None:
    conn = await asyncpg.connect(Roles.dsn(roles.owner_url))
    try:
        flags = await conn.fetchrow(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1", roles.app
        )
        assert flags is not None and not flags["rolsuper"] and not flags["rolbypassrls"]
        rows = await conn.fetch(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,"
            " pg_get_userbyid(c.relowner) AS owner,"
            " (SELECT count(*) FROM pg_policies p WHERE p.tablename = c.relname) AS policies"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind = 'r'"
            " AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid"
            "             AND a.attname = 'tenant_id' AND NOT a.attisdropped)"
        )
    finally:
        await conn.close()
    found = {r["relname"]: r for r in rows}
    assert set(found) == set(TENANT_TABLES), "every table with a tenant_id is listed here"
    for name, row in found.items():
        assert row["relrowsecurity"] and row["relforcerowsecurity"], name
        assert row["policies"] == 1, name
        assert row["owner"] == roles.owner != roles.app, name


async def test_raw_select_sees_only_the_transactions_tenant(
    roles: Roles, app_store: AgentSessionStore
) -> None:
    a = await _tenant_with_session(app_store, 5)
    b = await _tenant_with_session(app_store, 3)
    a_events = await app_store.list_events(a.tenant_id, "s")
    conn = await asyncpg.connect(Roles.dsn(roles.app_url))
    try:
        async with conn.transaction():
            await conn.execute("SELECT set_config('app.tenant_id', $1, true)", a.tenant_id)
            rows = await conn.fetch("SELECT * FROM session_events")
        assert {r["tenant_id"] for r in rows} == {a.tenant_id}
        assert sorted(r["seq"] for r in rows) == [e.seq for e in a_events]
        # R19 (1): a transaction that names no tenant sees nothing, in every table.
        async with conn.transaction():
            for table in TENANT_TABLES:
                assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0, table
        # SET LOCAL ends with its transaction.
        async with conn.transaction():
            await conn.execute("SELECT set_config('app.tenant_id', $1, true)", b.tenant_id)
        assert await conn.fetchval("SELECT count(*) FROM session_events") == 0
        # Writes are walled too: A cannot insert B's row nor touch B's.
        async with conn.transaction():
            await conn.execute("SELECT set_config('app.tenant_id', $1, true)", a.tenant_id)
            changed = await conn.execute("UPDATE sessions SET status = status")
            assert changed == "UPDATE 1"
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
                async with conn.transaction():
                    await conn.execute(
                        "UPDATE sessions SET tenant_id = $1 WHERE tenant_id = $2",
                        b.tenant_id,
                        a.tenant_id,
                    )
        # And the app role cannot turn the wall off.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("ALTER TABLE session_events DISABLE ROW LEVEL SECURITY")
    finally:
        await conn.close()
    assert await app_store.list_events(a.tenant_id, "s") == a_events


async def test_pooled_connection_and_a_query_without_its_tenant_filter(
    app_store: AgentSessionStore,
) -> None:
    a = await _tenant_with_session(app_store, 2)
    b = await _tenant_with_session(app_store, 2)
    # R19 (2): A's request, then B's, on the one pooled connection.
    assert [s.session_id for s in await app_store.list_sessions(a.tenant_id, limit=10)] == ["s"]
    async with app_store.read(b.tenant_id) as conn:
        # R19 (3): a query that forgets `WHERE tenant_id` still sees only B's rows.
        forgot = (await conn.execute(select(sessions.c.tenant_id))).scalars().all()
        assert set(forgot) == {b.tenant_id}
    # A transaction on that connection that names no tenant sees no rows at all.
    async with app_store.engine.connect() as conn, conn.begin():
        setting = await conn.execute(text("SELECT current_setting('app.tenant_id', true)"))
        assert setting.scalar_one() in (None, "")
        assert (await conn.execute(text("SELECT count(*) FROM sessions"))).scalar_one() == 0
    # System work says so explicitly, and then spans tenants.
    async with app_store.read(ALL_TENANTS) as conn:
        everyone = set((await conn.execute(select(sessions.c.tenant_id))).scalars().all())
    assert {a.tenant_id, b.tenant_id} <= everyone


def test_the_service_runs_as_the_app_role(roles: Roles, tmp_path: Path) -> None:
    """Runs, streams, forks, snapshots, auth and the sweeper, all through the policies."""

    async def tenant() -> TenantKey:
        engine = make_engine(Settings(database_url=roles.app_url))
        try:
            return await make_tenant(store_for(engine))
        finally:
            await engine.dispose()

    t = asyncio.run(tenant())
    server = start_server(roles.app_url, tmp_path / "server.log", ASR_RUN_SWEEP_SECONDS="0.5")
    try:
        with httpx.Client(base_url=server.base_url, headers=t.headers, timeout=30) as http:
            assert http.get("/readyz").status_code == 200
            assert http.post("/v1/sessions", json={"session_id": "s"}).status_code == 201
            run = http.post("/v1/sessions/s/runs", json={"input": "[words:5]", "mode": "wait"})
            assert run.status_code == 200, run.text
            assert run.json()["status"] == "finished"
            events = http.get("/v1/sessions/s/events", params={"after_seq": 0}).json()
            seqs = [e["seq"] for e in events["data"]]
            assert seqs == list(range(1, len(seqs) + 1))
            replay = http.stream("GET", "/v1/sessions/s/events/stream", params={"after_seq": 0})
            with replay as stream:
                assert stream.status_code in (200, 204)
            assert http.post("/v1/sessions/s/save").status_code in (200, 201)
            fork = http.post("/v1/sessions/s/fork", json={"at_seq": 2, "session_id": "f"})
            assert fork.status_code == 201, fork.text
            projection = http.get("/v1/sessions/f/projection")
            assert projection.status_code == 200 and projection.json()
    finally:
        stop_server(server)
    log = server.log()
    assert "Traceback" not in log and "row-level security" not in log, log[-4000:]


async def test_the_append_function_runs_with_the_callers_rights(
    roles: Roles, app_store: AgentSessionStore
) -> None:
    """Migration 0005's asr_append_events is SECURITY INVOKER, so the policies bind the app
    role inside it too; its tenant scope ends with its own transaction."""
    conn = await asyncpg.connect(Roles.dsn(roles.owner_url))
    try:
        row = await conn.fetchrow(
            "SELECT p.prosecdef, pg_get_userbyid(p.proowner) AS owner,"
            " has_function_privilege($1, p.oid, 'EXECUTE') AS runnable"
            " FROM pg_proc p WHERE p.proname = 'asr_append_events'",
            roles.app,
        )
    finally:
        await conn.close()
    assert row is not None and not row["prosecdef"] and row["runnable"]
    assert row["owner"] == roles.owner
    a = await _tenant_with_session(app_store, 1)
    b = await _tenant_with_session(app_store, 1)
    appended = await app_store.append_events(a.tenant_id, "s", events=_items(2, "x"))
    assert [e.seq for e in appended.events] == [2, 3]
    assert len(await app_store.list_events(b.tenant_id, "s")) == 1  # B's ledger untouched
    # The one pooled connection: the append's tenant did not outlive its transaction.
    async with app_store.engine.connect() as c, c.begin():
        setting = await c.execute(text("SELECT current_setting('app.tenant_id', true)"))
        assert setting.scalar_one() in (None, "")
        assert (await c.execute(text("SELECT count(*) FROM session_events"))).scalar_one() == 0
