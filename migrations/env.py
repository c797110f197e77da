"""Alembic environment (async), from Alembic's async template.

The URL comes from the `sqlalchemy.url` option when the caller set one (`asr migrate`,
the tests), else from `Settings().database_url`. `app.store.tables` is imported here only so
that autogenerate and `alembic check` can compare; revisions themselves never import `app`.

After the migrations, in their transaction, comes the repeatable step of
`app.store.postgres.install` (PostgreSQL): every upgrade that ends at head, whoever runs it
(`alembic upgrade head`, `asr migrate`, the tests), installs the stored functions' current
sources whose checksum differs from the one recorded; any migration step that ran first
clears that record. Its table, `asr_repeatable`, is left out of `alembic check`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from logging.config import fileConfig
from typing import Any

from alembic import context
from alembic.operations import ops
from alembic.runtime.migration import MigrationContext, MigrationInfo
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.settings import Settings
from app.store.engine import pgbouncer_connect_args
from app.store.pg_tls import pool_options
from app.store.postgres.install import REPEATABLE_TABLE, repeatable_sql, repeatable_step
from app.store.tables import metadata

config = context.config
log = logging.getLogger("alembic.env")
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


def _include_object(
    object_: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """The repeatable step's record (migration 0016) is bookkeeping, no model of ours."""
    return not (type_ == "table" and name == REPEATABLE_TABLE)


# The migration steps this run applied (up or down), from `on_version_apply`.
_applied: list[MigrationInfo] = []


def _note_step(
    ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]
) -> None:
    _applied.append(step)


def _upgrading_to(revision: object) -> bool:
    """This run is `alembic upgrade` (not a check, stamp or downgrade) and `revision` is the
    head: the command's step function is the `upgrade` of `alembic.command`."""
    step_function = context.get_context().opts.get("fn")
    upgrading = getattr(step_function, "__name__", None) == "upgrade"
    return upgrading and revision == context.get_head_revision()


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
        include_object=_include_object,
        on_version_apply=_note_step,
        literal_binds=connection is None,
    )


def run_migrations_offline() -> None:
    _configure(url=_url())
    with context.begin_transaction():
        context.run_migrations()
        if _url().startswith("postgresql") and _upgrading_to(context.get_revision_argument()):
            for statement in repeatable_sql():
                context.execute(statement.rstrip().removesuffix(";"))  # Alembic adds its own


def _run_sync(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()
        (current,) = context.get_context().get_current_heads() or (None,)
        installed = repeatable_step(
            connection, migrated=bool(_applied), at_head=_upgrading_to(current)
        )
        if installed:
            log.info("Installed the current sources of %s", ", ".join(installed))


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
