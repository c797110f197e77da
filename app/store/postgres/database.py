"""`PostgresDatabase`: PostgreSQL's transactions, scoped to their tenant (row-level
security), with commits announced to other replicas by NOTIFY."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.runtime.observer import Observer
from app.store.announce import NOTIFY_INTERVAL, Notifier
from app.store.base import Database
from app.store.engine import behind_pgbouncer

# `SET LOCAL`, as a function so the tenant can be a bind parameter: it ends with the
# transaction, so a pooled connection never carries one request's tenant into the next.
_SET_TENANT = text("SELECT set_config('app.tenant_id', :tenant, true)")


class PostgresDatabase(Database):
    """Transactions scoped to their tenant; commits announced by NOTIFY."""

    dialect: ClassVar[str] = "postgresql"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        notify: bool = True,
        notify_interval: float = NOTIFY_INTERVAL,
        pgbouncer: bool | None = None,
        observer: Observer | None = None,
    ) -> None:
        # Behind PgBouncer in transaction pooling mode (None: as `make_engine` marked the
        # engine), statements sent with the bare driver must run in an explicit transaction.
        self.pgbouncer = behind_pgbouncer(engine) if pgbouncer is None else pgbouncer
        notifier = (
            Notifier(engine, in_transaction=self.pgbouncer, min_interval=notify_interval)
            if notify
            else None
        )
        super().__init__(engine, notifier=notifier, observer=observer)

    def insert(self, table: Any) -> Any:
        return postgresql.insert(table)

    async def _scope(self, conn: AsyncConnection, tenant_id: str) -> None:
        await conn.execute(_SET_TENANT, {"tenant": tenant_id})
