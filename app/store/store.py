"""`AgentSessionStore`: the runtime's `SessionStore`, and `store_for`, which picks the backend.

`AgentSessionStore` is what both backends share (reads, accounts, maintenance, leases);
each backend's class implements the writes that insert events, one way each:
`app.store.sqlite.SqliteStore` with SQLAlchemy statements, `app.store.postgres.PostgresStore`
with one stored-function call per write. `store_for` is the one place that chooses.
"""

from __future__ import annotations

from abc import abstractmethod
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.runtime.observer import NullObserver, Observer
from app.runtime.ports import (
    AppendResult,
    HeldSession,
    IdempotencyToken,
    NewSession,
    RunFinish,
    RunRecord,
    TenantCursor,
    TenantPage,
)
from app.runtime.session.events import NewEvent
from app.runtime.session.redaction import Redactor
from app.store.accounts import AccountStore
from app.store.announce import NOTIFY_INTERVAL, Notifier
from app.store.base import NO_TENANT
from app.store.maintenance import MaintenanceStore
from app.store.runs import RunStore
from app.store.schedules import ScheduleStore
from app.store.webhooks import WebhookTables


class AgentSessionStore(RunStore, WebhookTables, ScheduleStore, AccountStore, MaintenanceStore):
    """Tenant-scoped persistence of sessions, events, snapshots, runs, webhooks, schedules,
    keys and idempotency rows."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_metadata_bytes: int = 16_384,
        idempotency_ttl_seconds: int = 86_400,
        observer: Observer | None = None,
        max_event_bytes: int = 2_097_152,
        redactor: Redactor | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        super().__init__(engine, notifier=notifier)
        self.observer = observer or NullObserver()
        self.max_metadata_bytes = max_metadata_bytes
        self.max_event_bytes = max_event_bytes
        self.redactor = redactor or Redactor()
        self.idempotency_ttl = timedelta(seconds=idempotency_ttl_seconds)

    async def ping(self) -> None:
        """Round trip to the database (readiness)."""
        async with self.read(NO_TENANT) as conn:
            await conn.execute(text("SELECT 1"))

    async def get_schema_revision(self) -> str | None:
        """The Alembic revision the database is at; None when it was never migrated.

        Raises whatever the driver raises when the database is unreachable (readiness turns
        that into a reason).
        """
        async with self.read(NO_TENANT) as conn:
            try:
                async with conn.begin_nested():
                    result = await conn.execute(text("SELECT version_num FROM alembic_version"))
                    row = result.first()
            except DBAPIError as exc:
                if exc.connection_invalidated:
                    raise
                # No alembic_version table yet. The savepoint keeps PostgreSQL's transaction
                # usable after the error.
                return None
        return row[0] if row is not None else None

    # The writes that insert events, the hold, and the tenant timeline: each backend's own
    # (`SqliteStore`, `PostgresStore`). Declared here so that this class is all of the
    # runtime's `RuntimeStore`, which `store_for`'s callers hand to `SessionRuntime`.

    @abstractmethod
    def hold(self, tenant_id: str, session_id: str) -> AbstractAsyncContextManager[HeldSession]:
        ...

    @abstractmethod
    async def create_session(
        self,
        tenant_id: str,
        *,
        session: NewSession,
        events: list[NewEvent],
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult: ...

    @abstractmethod
    async def fork_session(
        self,
        tenant_id: str,
        source_session_id: str,
        *,
        at_seq: int,
        session: NewSession,
        events: list[NewEvent],
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult: ...

    @abstractmethod
    async def append_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        events: list[NewEvent],
        expected_seq: int | None = None,
        expected_version: int | None = None,
        metadata_patch: dict[str, Any] | None = None,
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult: ...

    @abstractmethod
    async def list_tenant_events(
        self,
        tenant_id: str,
        *,
        after: TenantCursor,
        types: list[str] | None = None,
        limit: int = 500,
    ) -> TenantPage: ...

    @abstractmethod
    async def start_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        values: dict[str, Any],
        start_events: list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> tuple[RunRecord, AppendResult]: ...

    @abstractmethod
    async def claim_run(
        self,
        tenant_id: str,
        run_id: str,
        *,
        owner: str,
        lease_until: datetime,
        events: list[NewEvent],
        oldest_only: bool = False,
    ) -> tuple[RunRecord, AppendResult]: ...

    @abstractmethod
    async def append_run_events(
        self,
        tenant_id: str,
        run_id: str,
        *,
        session_id: str,
        epoch: int,
        events: list[NewEvent],
        lease_until: datetime,
        progress: dict[str, Any] | None = None,
        finish: RunFinish | None = None,
    ) -> AppendResult: ...

    @abstractmethod
    async def close_fenced_run(
        self, tenant_id: str, run_id: str, *, events: list[NewEvent]
    ) -> AppendResult | None: ...


def store_for(
    engine: AsyncEngine,
    *,
    notify: bool = True,
    notify_interval: float = NOTIFY_INTERVAL,
    pgbouncer: bool | None = None,
    **options: Any,
) -> AgentSessionStore:
    """The store for `engine`'s database.

    Args:
        notify: PostgreSQL: announce commits to other replicas with NOTIFY.
        notify_interval: PostgreSQL: the least time between two NOTIFY sends, in seconds.
        pgbouncer: PostgreSQL: the URL is PgBouncer in transaction pooling mode (None: as
            `make_engine` marked the engine).
        options: `AgentSessionStore`'s limits, observer and redactor.
    """
    if engine.dialect.name == "postgresql":
        from app.store.postgres.store import PostgresStore

        return PostgresStore(
            engine, notify=notify, notify_interval=notify_interval, pgbouncer=pgbouncer, **options
        )
    from app.store.sqlite.store import SqliteStore

    return SqliteStore(engine, **options)
