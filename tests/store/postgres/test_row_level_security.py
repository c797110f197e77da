"""R19: PostgreSQL row-level security, the second tenant wall.

The database is set up as docs/how-to/security.md says: `deploy/postgres/roles.sql` makes
an owner role (migrations) and an app role (the service) that owns nothing, is no superuser
and cannot bypass RLS; `asr migrate` runs as the owner. Then, connected as the app role:
a raw query with no tenant sees nothing, one scoped to tenant A sees only A's rows, a pooled
connection carries no tenant from one transaction into the next, and the whole service
(runs, streams, forks, the sweeper) works.

Issue #17, defect 9: the policies admitted every tenant when `app.tenant_id` was `*`, and
the app role could set that itself. Now whatever it sets it sees one tenant at most, it
cannot become the owner, and the work that spans tenants (auth by key, the sweeper,
expired-key cleanup, retention, the admin CLI) still works through it, by the owner's
narrow SECURITY DEFINER functions. SQLite has no RLS (the embedded default is
single-tenant); the application's own tenant filters are tested on both backends (R16).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy import select, text, update

from app.main import create_app
from app.runtime.access.accounts import Accounts
from app.runtime.errors import TenantAlreadyExists, Unauthorized
from app.runtime.ports import (
    ErasureReceipt,
    FireRecord,
    IdempotencyToken,
    NewRun,
    NewSession,
    TenantRetention,
)
from app.runtime.session.events import EventType, NewEvent
from app.runtime.session.retention import RetentionPolicy, apply_retention
from app.runtime.webhooks.records import NewWebhook
from app.services import services_of
from app.settings import Settings
from app.store.base import NO_TENANT, utcnow
from app.store.engine import make_engine
from app.store.postgres.install import CROSS_TENANT, function_name
from app.store.stores import Stores, open_stores
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
from tests.test_cli import asr

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
async def app_store(roles: Roles) -> AsyncIterator[Stores]:
    """The store as the service runs it, on one pooled connection (R19 case 2)."""
    engine = make_engine(Settings(database_url=roles.app_url, db_pool_size=1, db_max_overflow=0))
    yield open_stores(engine)
    await engine.dispose()


def _items(n: int, tag: str) -> list[NewEvent]:
    return [
        NewEvent(
            EventType.MEMORY_ITEMS_APPENDED,
            {"items": [{"type": "message", "role": "user", "content": f"{tag}-{i}"}]},
        )
        for i in range(n)
    ]


async def _tenant_with_session(store: Stores, n: int) -> TenantKey:
    tenant = await make_tenant(store)
    await store.ledger.create_session(
        tenant.tenant_id,
        session=NewSession(session_id="s", metadata={}, agent={}, binding={}),
        events=_items(n, tenant.name),
    )
    return tenant


async def test_catalog_app_role_is_walled_and_every_tenant_table_forces_rls(roles: Roles) -> None:
    conn = await asyncpg.connect(Roles.dsn(roles.owner_url))
    try:
        flags = await conn.fetchrow(
            "SELECT rolsuper, rolbypassrls, pg_has_role($1, $2, 'MEMBER') AS member"
            " FROM pg_roles WHERE rolname = $1",
            roles.app,
            roles.owner,
        )
        assert flags is not None and not flags["rolsuper"] and not flags["rolbypassrls"]
        assert not flags["member"], "the app role may not become the owner"
        rows = await conn.fetch(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,"
            " pg_get_userbyid(c.relowner) AS owner"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind = 'r'"
            " AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid"
            "             AND a.attname = 'tenant_id' AND NOT a.attisdropped)"
        )
        policies = await conn.fetch(
            "SELECT tablename, policyname, cmd, roles::text[] AS roles, qual, with_check"
            " FROM pg_policies WHERE schemaname = 'public'"
        )
    finally:
        await conn.close()
    found = {r["relname"]: r for r in rows}
    assert set(found) == set(TENANT_TABLES), "every table with a tenant_id is listed here"
    for name, row in found.items():
        assert row["relrowsecurity"] and row["relforcerowsecurity"], name
        assert row["owner"] == roles.owner != roles.app, name
    # Every role's policy: exactly the named tenant, no wildcard.
    walls = {p["tablename"]: p for p in policies if p["policyname"] == "tenant_wall"}
    assert set(walls) == set(TENANT_TABLES)
    for name, wall in walls.items():
        assert wall["roles"] == ["public"] and wall["cmd"] == "ALL", name
        rule = "((tenant_id)::text = current_setting('app.tenant_id'::text, true))"
        assert (wall["qual"], wall["with_check"]) == (rule, rule), name
    # The cross-tenant functions' reach: the owner's only, and only what they do.
    reach = {
        (p["tablename"], p["cmd"]): (p["roles"], p["qual"], p["with_check"])
        for p in policies
        if p["policyname"] != "tenant_wall"
    }
    on = "(current_setting('app.cross_tenant'::text, true) = 'on'::text)"
    assert reach == {(table, cmd): ([roles.owner], on, None) for table, cmd in CROSS_TENANT_REACH}


async def test_raw_select_sees_only_the_transactions_tenant(
    roles: Roles, app_store: Stores
) -> None:
    a = await _tenant_with_session(app_store, 5)
    b = await _tenant_with_session(app_store, 3)
    a_events = await app_store.ledger.list_events(a.tenant_id, "s")
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
    assert await app_store.ledger.list_events(a.tenant_id, "s") == a_events


async def test_pooled_connection_and_a_query_without_its_tenant_filter(
    app_store: Stores,
) -> None:
    a = await _tenant_with_session(app_store, 2)
    b = await _tenant_with_session(app_store, 2)
    # R19 (2): A's request, then B's, on the one pooled connection.
    assert [s.session_id for s in await app_store.ledger.list_sessions(a.tenant_id, limit=10)] == [
        "s"
    ]
    async with app_store.database.read(b.tenant_id) as conn:
        # R19 (3): a query that forgets `WHERE tenant_id` still sees only B's rows.
        forgot = (await conn.execute(select(sessions.c.tenant_id))).scalars().all()
        assert set(forgot) == {b.tenant_id}
    # A transaction on that connection that names no tenant sees no rows at all.
    async with app_store.database.engine.connect() as conn, conn.begin():
        setting = await conn.execute(text("SELECT current_setting('app.tenant_id', true)"))
        assert setting.scalar_one() in (None, "")
        assert (await conn.execute(text("SELECT count(*) FROM sessions"))).scalar_one() == 0
    # Nor does one that says so with NO_TENANT: no value lifts the wall (see below).
    async with app_store.database.read(NO_TENANT) as conn:
        assert (await conn.execute(select(sessions.c.tenant_id))).all() == []


def _eventually(check: Callable[[], bool], *, within: float = 30) -> bool:
    """Poll `check` until it holds or `within` seconds pass (a bound on a hung test)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_the_service_runs_as_the_app_role(roles: Roles, tmp_path: Path) -> None:
    """Runs, streams, forks, snapshots, auth and the sweeper, all through the policies; and
    the cross-tenant work (issue #17): the sweeper interrupts another tenant's expired run,
    and a key revoked by the operator CLI, connected as the app role too, is refused."""

    async def tenants() -> tuple[TenantKey, TenantKey, str]:
        engine = make_engine(Settings(database_url=roles.app_url))
        try:
            store = open_stores(engine)
            other = await _tenant_with_session(store, 1)
            # Its owner died: the lease has expired, and no request of this tenant's will
            # bring the server near it before the sweeper does.
            past = utcnow() - timedelta(seconds=1)
            run_id = await _start_run(store, other.tenant_id, "s", lease_until=past)
            return await make_tenant(store), other, run_id
        finally:
            await engine.dispose()

    t, other, stale_run = asyncio.run(tenants())
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
        with httpx.Client(base_url=server.base_url, headers=other.headers, timeout=30) as http:
            run_url = f"/v1/sessions/s/runs/{stale_run}"
            assert _eventually(lambda: http.get(run_url).json()["status"] == "interrupted")
            revoked = asr(roles.app_url, "key", "revoke", other.key)
            assert revoked.returncode == 0, revoked.stderr
            assert _eventually(lambda: http.get("/v1/sessions/s").status_code == 401)
    finally:
        stop_server(server)
    log = server.log()
    assert "Traceback" not in log and "row-level security" not in log, log[-4000:]


async def test_the_append_function_runs_with_the_callers_rights(
    roles: Roles, app_store: Stores
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
    appended = await app_store.ledger.append_events(a.tenant_id, "s", events=_items(2, "x"))
    assert [e.seq for e in appended.events] == [2, 3]
    assert len(await app_store.ledger.list_events(b.tenant_id, "s")) == 1  # B's ledger untouched
    # The one pooled connection: the append's tenant did not outlive its transaction.
    async with app_store.database.engine.connect() as c, c.begin():
        setting = await c.execute(text("SELECT current_setting('app.tenant_id', true)"))
        assert setting.scalar_one() in (None, "")
        assert (await c.execute(text("SELECT count(*) FROM session_events"))).scalar_one() == 0


# ------------------------------------------------------------------ issue #17, defect 9
# 0004's policies admitted every row when `app.tenant_id` was '*', and the app role could
# set that itself: RLS contained neither SQL injected into its connection nor the app role.
# Migration 0009: no value admits more than the one tenant it names, and the work that
# spans tenants is a few narrow SECURITY DEFINER functions (app/store/postgres/sql/).

# What the cross-tenant functions read (and delete), and so the owner's policies allow.
CROSS_TENANT_REACH = (
    ("tenants", "SELECT"),
    ("api_keys", "SELECT"),
    ("sessions", "SELECT"),
    ("runs", "SELECT"),
    ("idempotency_keys", "SELECT"),
    ("idempotency_keys", "DELETE"),
    ("webhook_subscriptions", "SELECT"),
    ("webhook_deliveries", "SELECT"),
    ("webhook_deliveries", "UPDATE"),
    ("schedules", "SELECT"),  # the schedulers' due list (migration 0011)
)
_NOTHING = {table: set[str]() for table in TENANT_TABLES}


async def _start_run(
    store: Stores, tenant_id: str, session_id: str, *, lease_until: datetime
) -> str:
    run_id = f"run_{uuid.uuid4().hex}"
    run = NewRun(
        run_id=run_id,
        input={"text": "hi"},
        options={"mode": "wait"},
        owner="a-replica-that-died",
        lease_until=lease_until,
    )
    started = NewEvent(EventType.RUN_STARTED, {"input": "hi"}, run_id, f"{run_id}.t1")
    await store.runs.start_run(tenant_id, session_id, run=run, start_events=[started])
    return run_id


# A schedule row's values, as `Scheduler.create` makes them (on session "s").
_SCHEDULE = {
    "schedule_id": "sch",
    "session_id": "s",
    "agent_name": None,
    "input": "hi",
    "cron": None,
    "timezone": "UTC",
    "interval_seconds": 60,
    "missed": "skip",
    "multitask": "skip",
    "status": "active",
    "metadata": {},
}


async def _tenant_in_every_table(store: Stores) -> TenantKey:
    """A tenant with rows in every tenant table: a key, a session with events, a snapshot,
    an Idempotency-Key, a live run, a webhook subscription with a delivery, a schedule
    with a fire, an erasure receipt, and a retention policy."""
    tenant = await make_tenant(store)
    await store.webhooks.create_webhook(
        tenant.tenant_id,
        NewWebhook(
            webhook_id="wh",
            url="https://example.com/hook",
            event_types=["*"],
            session_id=None,
            metadata_filter=None,
            description=None,
            secret="whsec_" + "A" * 44,
        ),
    )
    await store.ledger.create_session(
        tenant.tenant_id,
        session=NewSession(session_id="s", metadata={}, agent={}, binding={}),
        events=_items(2, tenant.name),
    )
    await store.ledger.save_snapshot(tenant.tenant_id, "s", seq=2, kind="save", state={"seq": 2})
    token = IdempotencyToken(key=f"k-{tenant.name}", request_hash="h")
    await store.ledger.append_events(
        tenant.tenant_id, "s", events=_items(1, "k"), idempotency=token
    )
    await _start_run(store, tenant.tenant_id, "s", lease_until=utcnow() + timedelta(minutes=5))
    now = utcnow()
    schedule = await store.schedules.create_schedule(
        tenant.tenant_id,
        values={**_SCHEDULE, "anchor_at": now, "next_fire_at": now + timedelta(minutes=1)},
    )
    fire = FireRecord("sch", now, "manual", "skipped", "run_in_progress", 1, None, "s", now)
    await store.schedules.append_schedule_fire(tenant.tenant_id, fire)
    assert schedule.schedule_id == "sch"
    receipt = ErasureReceipt("er_1", tenant.tenant_id, "session", "gone", "test", now, {})
    await store.erasure.save_receipt(receipt)
    await store.maintenance.put_tenant_policy(tenant.tenant_id, TenantRetention(idle_days=7))
    return tenant


async def _visible(conn: asyncpg.Connection) -> dict[str, set[str]]:
    """The tenants whose rows the current transaction sees, table by table."""
    return {
        table: {r[0] for r in await conn.fetch(f"SELECT DISTINCT tenant_id FROM {table}")}
        for table in TENANT_TABLES
    }


def _prefix(tenant: TenantKey) -> str:
    return tenant.key.split("_")[1]


async def test_issue_17_the_app_role_sees_only_the_tenant_it_names_whatever_it_sets(
    roles: Roles, app_store: Stores
) -> None:
    a = await _tenant_in_every_table(app_store)
    b = await _tenant_in_every_table(app_store)
    ids = (a.tenant_id, b.tenant_id)
    forged = (
        *("*", "%", "_", ".*", "", " ", "NULL", "all", "true"),
        f"{ids[0]},{ids[1]}",
        f"{ids[0]}|{ids[1]}",
        f"{{{ids[0]},{ids[1]}}}",
        f"{ids[0]}' OR '1'='1",
        f"{ids[1]}' OR tenant_id <> '",
        ids[0].upper(),
        f" {ids[0]}",
        f"{ids[0]} ",
        f"{ids[0]}%",
    )
    conn = await asyncpg.connect(Roles.dsn(roles.app_url))
    try:
        for value in forged:
            async with conn.transaction():
                await conn.execute("SELECT set_config('app.tenant_id', $1, true)", value)
                assert await _visible(conn) == _NOTHING, value
        # SET LOCAL, with the owner's switch thrown as well: those policies are not the app's.
        async with conn.transaction():
            await conn.execute("SET LOCAL app.tenant_id = '*'")
            await conn.execute("SET LOCAL app.cross_tenant = 'on'")
            assert await _visible(conn) == _NOTHING
        # Session-wide, then RESET: still one tenant at most, then none.
        await conn.execute("SELECT set_config('app.tenant_id', '*', false)")
        assert await _visible(conn) == _NOTHING
        await conn.execute("SELECT set_config('app.tenant_id', $1, false)", b.tenant_id)
        assert await _visible(conn) == {table: {b.tenant_id} for table in TENANT_TABLES}
        await conn.execute("RESET app.tenant_id")
        assert await _visible(conn) == _NOTHING
        # A tenant's exact id: that tenant's rows, and no other's.
        for tenant_id in ids:
            async with conn.transaction():
                await conn.execute("SELECT set_config('app.tenant_id', $1, true)", tenant_id)
                assert await _visible(conn) == {table: {tenant_id} for table in TENANT_TABLES}
        # Writes under '*': nothing to change, and no row of another tenant goes in.
        async with conn.transaction():
            await conn.execute("SELECT set_config('app.tenant_id', '*', true)")
            assert await conn.execute("UPDATE sessions SET status = status") == "UPDATE 0"
            assert await conn.execute("DELETE FROM idempotency_keys") == "DELETE 0"
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
                await conn.execute(
                    "INSERT INTO tenants (tenant_id, name, limits, created_at)"
                    " VALUES ('forged', 'forged', '{}', now())"
                )
        # The cross-tenant functions do their one thing and leave no reach behind: no
        # argument turns a live lease or a live key into a stale one.
        async with conn.transaction():
            await conn.execute("SELECT set_config('app.tenant_id', '*', true)")
            stale = await conn.fetch("SELECT tenant_id FROM asr_stale_runs(p_limit => 1000000)")
            assert not {r["tenant_id"] for r in stale} & set(ids)
            await conn.fetchval("SELECT asr_delete_expired_idempotency_keys()")
            assert await conn.fetchval("SELECT current_setting('app.cross_tenant', true)") == ""
            assert await _visible(conn) == _NOTHING
    finally:
        await conn.close()
    for tenant in (a, b):
        assert await app_store.idempotency.get_idempotency_key(tenant.tenant_id, f"k-{tenant.name}")


async def test_issue_17_the_app_role_cannot_assume_the_cross_tenant_reach(
    roles: Roles, app_store: Stores
) -> None:
    a = await make_tenant(app_store)
    conn = await asyncpg.connect(Roles.dsn(roles.app_url))
    try:
        for statement in (
            f'SET ROLE "{roles.owner}"',
            f'SET SESSION AUTHORIZATION "{roles.owner}"',
            "ALTER TABLE sessions NO FORCE ROW LEVEL SECURITY",
            "ALTER POLICY tenant_wall ON sessions USING (true)",
            "CREATE POLICY mine ON sessions USING (true)",
            "ALTER FUNCTION asr_key_by_prefix(text) SECURITY INVOKER",
            "CREATE FUNCTION asr_mine() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
        # A temporary table of the caller's cannot stand in for one the function reads
        # (its search_path is pinned, pg_temp last).
        await conn.execute("CREATE TEMP TABLE api_keys (LIKE public.api_keys)")
        await conn.execute(
            "INSERT INTO pg_temp.api_keys (key_id, tenant_id, prefix, secret_hash, name,"
            " created_at) VALUES ('fake', 'forged', $1, 'fake', 'fake', now())",
            _prefix(a),
        )
        found = await conn.fetch("SELECT tenant_id FROM asr_key_by_prefix($1)", _prefix(a))
        assert [r["tenant_id"] for r in found] == [a.tenant_id]
    finally:
        await conn.close()


async def test_the_cross_tenant_functions_are_narrow_security_definers(roles: Roles) -> None:
    conn = await asyncpg.connect(Roles.dsn(roles.owner_url))
    try:
        rows = await conn.fetch(
            "SELECT p.proname, p.prosecdef, p.proconfig, pg_get_userbyid(p.proowner) AS owner,"
            " has_function_privilege($1, p.oid, 'EXECUTE') AS app_may,"
            " has_function_privilege('public', p.oid, 'EXECUTE') AS anyone_may"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'public' AND p.proname LIKE 'asr\\_%'",
            roles.app,
        )
    finally:
        await conn.close()
    definers = {function_name(source) for source in CROSS_TENANT}
    assert {r["proname"] for r in rows if r["prosecdef"]} == definers
    for row in rows:
        assert row["owner"] == roles.owner and row["app_may"], row["proname"]
        if row["proname"] in definers:
            assert row["proconfig"] == ["search_path=pg_catalog, public, pg_temp"]
            assert not row["anyone_may"], row["proname"]


async def test_issue_17_auth_and_key_revocation_span_tenants_as_the_app_role(
    app_store: Stores,
) -> None:
    a = await make_tenant(app_store)
    b = await make_tenant(app_store)
    accounts = Accounts(app_store.accounts)
    for tenant in (a, b):
        assert (await accounts.authenticate(tenant.key)).tenant_id == tenant.tenant_id
    prefixes = {_prefix(a), _prefix(b)}
    assert await app_store.accounts.list_live_key_prefixes(prefixes) == prefixes
    await accounts.revoke_key(b.key)  # `asr key revoke`: the key's tenant is looked up
    with pytest.raises(Unauthorized):
        await Accounts(app_store.accounts).authenticate(b.key)
    assert await app_store.accounts.list_live_key_prefixes(prefixes) == {_prefix(a)}
    assert not await app_store.accounts.revoke_api_key(_prefix(b))
    assert (await accounts.authenticate(a.key)).tenant_id == a.tenant_id
    # The operators' tenant lookups; a name another tenant holds is refused even though
    # the new tenant's transaction cannot see that tenant's row.
    found = await app_store.accounts.get_tenant_by_name(b.name)
    assert found is not None and found.tenant_id == b.tenant_id
    listed = await app_store.accounts.list_tenants()
    assert {a.name, b.name} <= {t.name for t in listed}  # the module's database is shared
    assert len(listed) == await app_store.accounts.count_tenants()
    with pytest.raises(TenantAlreadyExists):
        await app_store.accounts.create_tenant(a.name)


async def test_issue_17_the_sweeper_interrupts_any_tenants_expired_run_as_the_app_role(
    roles: Roles,
) -> None:
    application = create_app(Settings(database_url=roles.app_url, bootstrap_default_tenant=False))
    async with application.router.lifespan_context(application):
        store: Stores = services_of(application).stores
        b = await _tenant_with_session(store, 1)
        past = utcnow() - timedelta(seconds=1)
        run_id = await _start_run(store, b.tenant_id, "s", lease_until=past)
        assert run_id in {r.run_id for r in await store.maintenance.list_stale_runs()}
        await services_of(application).runs.sweep_once()
        run = await store.runs.get_run(b.tenant_id, run_id)
        assert run is not None and run.status == "interrupted"
        session = await store.ledger.get_session(b.tenant_id, "s")
        assert session is not None and session.active_run_id is None
        types = [e.type for e in await store.ledger.list_events(b.tenant_id, "s")]
        assert types[-2:] == ["AUTO_STOP", "RUN_FINISHED"]
        assert run_id not in {r.run_id for r in await store.maintenance.list_stale_runs()}


async def test_issue_20_the_scheduler_fires_any_tenants_due_tick_as_the_app_role(
    roles: Roles,
) -> None:
    application = create_app(
        Settings(
            database_url=roles.app_url, bootstrap_default_tenant=False, schedules_enabled=False
        )
    )
    async with application.router.lifespan_context(application):
        store: Stores = services_of(application).stores
        b = await _tenant_with_session(store, 1)
        scheduler = services_of(application).scheduler
        anchor = utcnow() - timedelta(seconds=3601)  # its first tick was a second ago
        made = await store.schedules.create_schedule(
            b.tenant_id,
            values={
                **_SCHEDULE,
                "schedule_id": f"sch-{b.name}",
                "interval_seconds": 3600,
                "anchor_at": anchor,
                "next_fire_at": anchor + timedelta(seconds=3600),
            },
        )
        assert (b.tenant_id, made.schedule_id) in await store.schedules.list_due_schedules(
            limit=10_000
        )
        assert await scheduler.fire_due_once() >= 1
        fires = await scheduler.fires(b.tenant_id, made.schedule_id, limit=10)
        assert [f.outcome for f in fires] == ["started"]
        assert (b.tenant_id, made.schedule_id) not in await store.schedules.list_due_schedules(
            limit=10_000
        )


async def test_issue_17_expired_idempotency_keys_are_swept_as_the_app_role(
    app_store: Stores,
) -> None:
    # A store whose keys expire at once writes the old ones (the sweep judges by the
    # database's clock, which has moved on by then).
    expiring = open_stores(app_store.database.engine, notify=False, idempotency_ttl_seconds=0)
    a = await _tenant_with_session(app_store, 1)
    b = await _tenant_with_session(app_store, 1)
    for tenant in (a, b):
        for store, key in ((expiring, "old"), (app_store, "new")):
            token = IdempotencyToken(key=key, request_hash="h")
            events = _items(1, key)
            await store.ledger.append_events(
                tenant.tenant_id, "s", events=events, idempotency=token
            )
    assert await app_store.maintenance.delete_expired_idempotency_keys() == 2
    for tenant in (a, b):
        async with app_store.database.read(tenant.tenant_id) as conn:
            keys = (await conn.execute(text("SELECT key FROM idempotency_keys"))).scalars().all()
        assert keys == ["new"]


async def test_issue_17_retention_spans_every_tenant_as_the_app_role(
    app_store: Stores,
) -> None:
    a = await _tenant_with_session(app_store, 2)
    b = await _tenant_with_session(app_store, 2)
    for tenant in (a, b):
        async with app_store.database.write(tenant.tenant_id) as conn:
            await conn.execute(
                update(sessions)
                .where(sessions.c.tenant_id == tenant.tenant_id)
                .values(updated_at=utcnow() - timedelta(days=40))
            )
    report = await apply_retention(
        app_store.maintenance,
        RetentionPolicy(idle_days=30, keep_snapshots=1),
        tenants=app_store.accounts,
    )
    assert sorted(report.sessions_erased) == sorted([(a.tenant_id, "s"), (b.tenant_id, "s")])
    for tenant in (a, b):
        assert await app_store.ledger.get_session(tenant.tenant_id, "s") is None


def test_issue_17_the_admin_cli_works_as_the_app_role(roles: Roles) -> None:
    name = f"cli-{uuid.uuid4().hex[:10]}"
    assert asr(roles.app_url, "tenant", "create", name).returncode == 0
    again = asr(roles.app_url, "tenant", "create", name)
    assert again.returncode == 1 and "already exists" in again.stderr
    created = asr(roles.app_url, "key", "create", "--tenant", name)
    assert created.returncode == 0, created.stderr
    raw = created.stdout.strip().splitlines()[-1]
    listing = asr(roles.app_url, "tenant", "list")
    assert listing.returncode == 0, listing.stderr
    assert name in {json.loads(line)["name"] for line in listing.stdout.splitlines()}
    revoked = asr(roles.app_url, "key", "revoke", raw)
    assert revoked.returncode == 0, revoked.stderr
    keys = asr(roles.app_url, "key", "list", "--tenant", name).stdout.splitlines()
    assert len(keys) == 1 and "'revoked_at': None" not in keys[0]
    retention = asr(roles.app_url, "retention", "run", "--idle-days", "30", "--dry-run")
    assert retention.returncode == 0, retention.stderr
    assert json.loads(retention.stdout.splitlines()[-1])["dry_run"] is True
