"""Appends through asr_append_events: one statement, one transaction id, NOTIFY only on
commit, a dead connection replaced, and the explicit transaction behind PgBouncer."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.runtime.errors import SeqConflict, SessionNotFound
from app.runtime.ports import Wakeup
from app.settings import Settings
from app.store.announce import CHANNEL, MAX_PAYLOAD_BYTES
from app.store.engine import make_engine
from app.store.stores import Stores, open_stores
from app.store.tables import session_events
from tests import pgbouncer
from tests.conftest import TenantKey
from tests.pgroles import Roles
from tests.store.test_append_path import Recorder, new, own_store, step

__all__ = ["Recorder", "own_store"]


@pytest.fixture
def pg_direct() -> None:
    """LISTEN and backend pids need a direct connection, not PgBouncer's pooled ones."""
    if os.environ.get("ASR_DB_PGBOUNCER") == "true":
        pytest.skip("needs a direct connection to PostgreSQL (the direct tier runs it)")


def _count_statements(engine: AsyncEngine) -> list[str]:
    seen: list[str] = []

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _seen(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    return seen


async def test_an_append_is_one_statement_with_one_transaction_id(
    own_store: Stores, tenant: TenantKey
) -> None:
    t = tenant.tenant_id
    await own_store.ledger.create_session(t, session=new("s"), events=[step(0)])
    through_sqlalchemy = _count_statements(own_store.database.engine)
    result = await own_store.ledger.append_events(t, "s", events=[step(1), step(2), step(3)])
    assert through_sqlalchemy == []  # the whole append went through the function
    async with own_store.database.read(t) as conn:
        rows = (
            await conn.execute(
                select(session_events.c.seq, session_events.c.xact_id)
                .where(session_events.c.tenant_id == t, session_events.c.session_id == "s")
                .order_by(session_events.c.seq)
            )
        ).all()
    xacts = {x for seq, x in rows if seq > 1}
    assert len(xacts) == 1 and None not in xacts
    assert xacts != {rows[0].xact_id}  # its own transaction, not the create's
    assert [e.seq for e in result.events] == [2, 3, 4]


async def _listener(url: str) -> tuple[asyncpg.Connection, asyncio.Queue[str]]:
    conn = await asyncpg.connect(Roles.dsn(url))
    heard: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[3]))
    return conn, heard


async def test_notify_only_when_the_append_commits(
    pg_direct: None, own_store: Stores, tenant: TenantKey, database_url: str
) -> None:
    t = tenant.tenant_id
    # 100 characters (the column's limit is 128) but 200 bytes: the limit counts bytes.
    long_id = "é" * (MAX_PAYLOAD_BYTES // 2)
    await own_store.ledger.create_session(t, session=new("s"), events=[step(0)])
    await own_store.ledger.create_session(t, session=new(long_id), events=[step(0)])
    # The creates' wake-ups are sent first: one coalesced behind the other could otherwise
    # reach the listener below (it did, once, in CI).
    notifier = own_store.database.announcer.notifier
    assert notifier is not None
    await notifier.flush()
    conn, heard = await _listener(database_url)
    try:
        with pytest.raises(SeqConflict):
            await own_store.ledger.append_events(t, "s", events=[step(1)], expected_seq=5)
        with pytest.raises(SessionNotFound):
            await own_store.ledger.append_events(t, "nope", events=[step(1)])
        await own_store.ledger.append_events(t, "s", events=[step(1), step(2)])
        await own_store.ledger.append_events(t, long_id, events=[step(1)])
        got = [await asyncio.wait_for(heard.get(), 5) for _ in range(2)]
        # The refused appends sent nothing; the long id falls back to the tenant alone.
        assert got == [f"{t}:s:3", f"{t}:"]
        await asyncio.sleep(0.2)
        assert heard.empty()
    finally:
        await conn.close()


async def test_a_store_built_with_notify_off_sends_none(
    pg_direct: None, settings: Settings, tenant: TenantKey, database_url: str
) -> None:
    engine = make_engine(settings)
    store = open_stores(engine, notify=False)
    conn, heard = await _listener(database_url)
    try:
        await store.ledger.create_session(tenant.tenant_id, session=new("quiet"), events=[])
        await store.ledger.append_events(tenant.tenant_id, "quiet", events=[step(1)])
        await asyncio.sleep(0.3)
        assert heard.empty()
    finally:
        await conn.close()
        await engine.dispose()


async def test_wake_ups_under_load_are_coalesced_and_spaced_by_the_interval(
    pg_direct: None, settings: Settings, tenant: TenantKey, database_url: str
) -> None:
    """The first wake-up after a quiet spell goes at once; those posted while it is sent
    wait for the interval and go out together, one per session at its highest seq."""
    engine = make_engine(settings)
    t = tenant.tenant_id
    conn, heard = await _listener(database_url)
    try:
        store = open_stores(engine, notify_interval=0.2)
        notifier = store.database.announcer.notifier
        assert notifier is not None
        notifier.post([Wakeup(t, "a", 1)])
        await asyncio.sleep(0)  # one step of the send's task: it has taken its batch
        assert not notifier._pending
        notifier.post([Wakeup(t, "a", 2), Wakeup(t, "b", 7), Wakeup(t, "a", 3)])
        first = await asyncio.wait_for(heard.get(), 5)
        rest = sorted([await asyncio.wait_for(heard.get(), 5) for _ in range(2)])
        assert [first, *rest] == [f"{t}:a:1", f"{t}:a:3", f"{t}:b:7"]
        await notifier.flush()
        assert heard.empty()

        # With an interval far longer than the test, what follows a send stays pending.
        slow = open_stores(engine, notify_interval=600).database.announcer.notifier
        assert slow is not None
        slow.post([Wakeup(t, "x", 1)])
        await asyncio.sleep(0)
        slow.post([Wakeup(t, "x", 2)])
        assert await asyncio.wait_for(heard.get(), 5) == f"{t}:x:1"
        await asyncio.sleep(0.3)
        assert heard.empty() and slow._pending == {(t, "x"): 2}
        assert slow._task is not None
        slow._task.cancel()
    finally:
        await conn.close()
        await engine.dispose()


async def test_a_dead_connection_surfaces_as_dbapi_error_and_is_replaced(
    pg_direct: None, own_store: Stores, tenant: TenantKey, database_url: str
) -> None:
    t = tenant.tenant_id
    await own_store.ledger.create_session(t, session=new("s"), events=[step(0)])
    async with own_store.database.engine.connect() as c:
        pid = (await c.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one()
    killer = await asyncpg.connect(Roles.dsn(database_url))
    try:
        assert await killer.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)
    finally:
        await killer.close()
    # The pool's idle ping only checks connections idle for a second: this one is handed out
    # as is, and the append is what finds it dead.
    with pytest.raises(DBAPIError) as failed:
        await own_store.ledger.append_events(t, "s", events=[step(1)])
    assert failed.value.connection_invalidated
    result = await own_store.ledger.append_events(t, "s", events=[step(1)])
    assert result.session.last_seq == 2  # the failed append wrote nothing; a new connection


@pytest.fixture
def bouncer_url(database_url: str) -> Iterator[str]:
    """This run's database through a PgBouncer of our own, in transaction pooling mode."""
    if pgbouncer.binary() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("pgbouncer must be installed under CI=true (.ci/run installs it)")
        pytest.skip("pgbouncer not installed (Debian package `pgbouncer`)")
    url = make_url(database_url)
    if os.environ.get("ASR_DB_PGBOUNCER") == "true":
        yield database_url  # the PgBouncer tier: the run's URL is PgBouncer already
        return
    root = Path(tempfile.mkdtemp(prefix="asr-pgbouncer-"))
    try:
        users = tuple({"postgres", url.username or "postgres"})
        port = pgbouncer.start(root, upstream_port=url.port or 5432, users=users)
        yield url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    finally:
        pgbouncer.stop(root)
        shutil.rmtree(root, ignore_errors=True)


async def test_appends_through_pgbouncer_run_in_an_explicit_transaction(
    bouncer_url: str, tenant: TenantKey
) -> None:
    """Transaction pooling hands each transaction to any server connection: the store that
    `make_engine` built for PgBouncer keeps the call's prepare and execute in one."""
    engine = make_engine(
        Settings(database_url=bouncer_url, db_pgbouncer=True, bootstrap_default_tenant=False)
    )
    store = open_stores(engine)
    assert store.database.pgbouncer
    t = tenant.tenant_id
    try:
        for k in range(4):
            await store.ledger.create_session(t, session=new(f"b{k}"), events=[step(0)])

        async def writer(k: int) -> None:
            for i in range(15):
                await store.ledger.append_events(t, f"b{k % 4}", events=[step(i), step(i)])

        await asyncio.gather(*(writer(k) for k in range(12)))
        with pytest.raises(SeqConflict):
            await store.ledger.append_events(t, "b0", events=[step(0)], expected_seq=1)
        for k in range(4):
            events = await store.ledger.list_events(t, f"b{k}")
            assert [e.seq for e in events] == list(range(1, 1 + 1 + 3 * 15 * 2))
    finally:
        await engine.dispose()
