"""Alembic environment (async), from Alembic's async template.

The URL comes from the `sqlalchemy.url` option when the caller set one (`asr migrate`,
the tests), else from `Settings().database_url`. `app.store.tables` is imported here only so
that autogenerate and `alembic check` can compare; revisions themselves never import `app`.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from alembic.operations import ops
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.settings import Settings
from app.store.engine import pgbouncer_connect_args
from app.store.pg_tls import pool_options
from app.store.tables import metadata

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings().database_url


def _skip_empty(context_: object, revision: object, directives: list) -> None:
    """`alembic revision --autogenerate` writes no empty revision files (`check` is untouched)."""
    if not getattr(config.cmd_opts, "autogenerate", False):
        return
    script = directives[0]
    if isinstance(script, ops.MigrationScript) and script.upgrade_ops.is_empty():
        directives[:] = []


def _configure(connection: Connection | None = None, url: str | None = None) -> None:
    is_sqlite = (url or "").startswith("sqlite") or (
        connection is not None and connection.dialect.name == "sqlite"
    )
    context.configure(
        connection=connection,
        url=url,
        target_metadata=metadata,
        render_as_batch=is_sqlite,
        compare_type=True,
        process_revision_directives=_skip_empty,
        literal_binds=connection is None,
    )


def run_migrations_offline() -> None:
    _configure(url=_url())
    with context.begin_transaction():
        context.run_migrations()


def _run_sync(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


async def run_migrations_online() -> None:
    # Migrations should use ASR_DATABASE_DIRECT_URL; if they do go through PgBouncer in
    # transaction mode, they need the same statement settings as the app.
    pgbouncer = _url().startswith("postgresql") and Settings().db_pgbouncer
    url, connect_args = pool_options(_url()) if _url().startswith("postgresql") else (_url(), {})
    if pgbouncer:
        connect_args = {**connect_args, **pgbouncer_connect_args()}
    engine = create_async_engine(url, connect_args=connect_args)
    async with engine.connect() as connection:
        await connection.run_sync(_run_sync)
        await connection.commit()
    await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_sync(connection)
    else:
        asyncio.run(run_migrations_online())
