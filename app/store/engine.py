"""The async engine: one place for driver quirks (SQLite pragmas and BEGIN modes)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import aiosqlite
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import await_

from app.settings import Settings
from app.store.json_text import loads
from app.store.pg_tls import pool_options

# Execution option that marks a connection's next transaction as a write.
WRITE_OPTION = "asr_write"

# Engine execution option set by `make_engine` on SQLite: the `PRAGMA synchronous` level,
# which the store's writer connection (app/store/sqlite/writer.py) takes over too.
SQLITE_SYNCHRONOUS_OPTION = "asr_sqlite_synchronous"

# Engine execution option set by `make_engine` when the URL points at PgBouncer (transaction
# pooling): code that talks to the driver directly must then keep prepare and execute in one
# explicit transaction (see `behind_pgbouncer`).
PGBOUNCER_OPTION = "asr_pgbouncer"


def make_engine(settings: Settings) -> AsyncEngine:
    """Build the engine for `settings.database_url`.

    On SQLite, transactions are begun by us rather than by the driver: writes use
    `BEGIN IMMEDIATE`, because a deferred transaction that later upgrades to a write fails
    at once with "database is locked" and ignores busy_timeout; reads use a plain `BEGIN`.
    """
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_async_engine(
            url,
            pool_size=settings.db_pool_size,
            max_overflow=0,
            json_deserializer=loads,
            execution_options={SQLITE_SYNCHRONOUS_OPTION: settings.sqlite_synchronous},
        )
        install_sqlite_hooks(engine.sync_engine, settings.sqlite_synchronous)
        return engine
    # TLS parameters (`?ssl=require`, `?sslmode=verify-full&sslrootcert=...`) mean the same
    # here as on the LISTEN connection (see pg_tls).
    url, tls_args = pool_options(url)
    engine = create_async_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        connect_args={**tls_args, **(pgbouncer_connect_args() if settings.db_pgbouncer else {})},
        # The most recently returned connection first. First-in-first-out cycled through the
        # whole pool, so at a moderate rate (a pool sized for peaks, a worker's share of the
        # load) each connection sat idle past IDLE_PING_SECONDS between uses and most
        # checkouts paid the idle ping's three round trips; now the spare ones rest.
        pool_use_lifo=True,
        execution_options={PGBOUNCER_OPTION: True} if settings.db_pgbouncer else {},
        # JSON columns (and the rows the stored functions return) decoded by orjson where
        # exact (json_text): about a twentieth of a run's Python went to json.loads.
        json_deserializer=loads,
    )
    _install_idle_ping(engine)
    return engine


def make_read_engine(settings: Settings, url: str) -> AsyncEngine:
    """An engine for one read replica (`ASR_DATABASE_READ_URLS`): as the primary's, but
    smaller, and quick to give up, so a dead replica is skipped (and the read served by the
    primary) within `db_read_timeout_seconds` rather than after the driver's minute."""
    read_url, tls_args = pool_options(make_url(url))
    timeout = settings.db_read_timeout_seconds
    engine = create_async_engine(
        read_url,
        pool_size=max(2, settings.db_pool_size // 2),
        max_overflow=settings.db_max_overflow,
        pool_timeout=timeout,
        pool_use_lifo=True,
        connect_args={**tls_args, "timeout": timeout},
        json_deserializer=loads,
    )
    _install_idle_ping(engine)
    return engine


def behind_pgbouncer(engine: AsyncEngine) -> bool:
    """Whether `engine` was made for PgBouncer in transaction pooling mode (`make_engine`).

    Carried by the engine itself, so every store built on it knows, however it is built
    (the app, the CLI, the tests, the benchmarks).
    """
    return bool(engine.get_execution_options().get(PGBOUNCER_OPTION, False))


# A pooled connection idle for longer than this is pinged before it is handed out.
IDLE_PING_SECONDS = 1.0


def _install_idle_ping(engine: AsyncEngine) -> None:
    """`pool_pre_ping`, but only for connections that sat idle in the pool.

    asyncpg's ping is three round trips (BEGIN, an empty query, ROLLBACK); doing it on every
    checkout tripled the round trips of a one-event append. A connection returned to the pool
    less than a second ago was working then; one idle longer (a database restart, a
    firewall's idle cut) is checked as before, and a dead one is replaced transparently.
    """

    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["asr_idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("asr_idle_since")
        if since is None or time.monotonic() - since < IDLE_PING_SECONDS:
            return
        try:
            dbapi_connection.ping()
        except Exception as exc:
            # The pool discards this connection and checks out a fresh one.
            raise DisconnectionError(str(exc)) from exc


def pgbouncer_connect_args() -> dict[str, Any]:
    """asyncpg arguments for PgBouncer in transaction pooling mode.

    Consecutive transactions of one client connection may run on different server
    connections, so a statement prepared in one may be missing, or exist under the same name
    from another client, in the next. So: no statement cache in asyncpg
    (`statement_cache_size`) or in SQLAlchemy's adapter (`prepared_statement_cache_size`),
    and a unique name for every prepared statement. Every statement of ours runs inside an
    explicit transaction, where PgBouncer keeps one server connection, so prepare-then-execute
    stays on one server.
    """
    return {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": lambda: f"__asyncpg_{uuid.uuid4().hex}__",
    }


def sqlite_synchronous(engine: AsyncEngine) -> str:
    """The `PRAGMA synchronous` level `make_engine` chose for `engine` (NORMAL if none)."""
    return str(engine.get_execution_options().get(SQLITE_SYNCHRONOUS_OPTION, "NORMAL"))


def install_sqlite_hooks(engine: Engine, synchronous: str) -> None:
    """Pragmas, `asr_uuid4` and our own BEGINs on every connection of `engine` (the async
    engine's pool, or the writer's synchronous engine)."""
    if synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
        raise ValueError(f"unknown PRAGMA synchronous level {synchronous!r}")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves, below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        dbapi_connection.create_function("asr_uuid4", 0, lambda: str(uuid.uuid4()))

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        begin = "BEGIN IMMEDIATE" if write else "BEGIN"
        driver = conn.connection.driver_connection
        if isinstance(driver, aiosqlite.Connection):
            # One trip to aiosqlite's thread; through a cursor (`exec_driver_sql`) it is
            # three: open, execute, close. A wait cancelled here leaves the BEGIN to run;
            # the pool's rollback on return queues behind it and ends what it began.
            await_(driver.execute_fetchall(begin))
        else:
            conn.exec_driver_sql(begin)


def redacted_url(url: str | URL) -> str:
    """The URL with its password hidden, for logs and error messages."""
    return make_url(url).render_as_string(hide_password=True)
