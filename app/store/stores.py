"""`Stores`: the stores by concern on one database, and `open_stores`, which picks the backend.

Each concern is a narrow store of its own (the ledger, the runs, the accounts, the
Idempotency-Keys, the webhooks, the schedules, the maintenance, the erasure), built on one
`Database` (the engine, its read and write transactions, the announcer). Where the backends differ a
concern has one class per backend (`app.store.sqlite`, `app.store.postgres`); where they do
not, one shared class. This module is the one place that chooses: it imports the backend
packages, which never import it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from app.runtime.observer import Observer
from app.runtime.session.redaction import Redactor
from app.store.accounts import AccountStore
from app.store.announce import NOTIFY_INTERVAL
from app.store.base import Database
from app.store.cross_tenant import CrossTenantStore
from app.store.erasure import ErasureStore
from app.store.idempotency import IdempotencyStore
from app.store.ledger import LedgerStore
from app.store.maintenance import MaintenanceStore
from app.store.payloads import Payloads
from app.store.postgres.cross_tenant import PostgresCrossTenant
from app.store.postgres.database import PostgresDatabase
from app.store.postgres.erasure import PostgresErasure
from app.store.postgres.idempotency import PostgresIdempotency
from app.store.postgres.ledger import PostgresLedger
from app.store.postgres.runs import PostgresRuns
from app.store.postgres.writes import FunctionWrites
from app.store.runs import RunStore
from app.store.schedules import ScheduleStore
from app.store.sqlite.cross_tenant import SqliteCrossTenant
from app.store.sqlite.database import SqliteDatabase
from app.store.sqlite.erasure import SqliteErasure
from app.store.sqlite.idempotency import SqliteIdempotency
from app.store.sqlite.jobs import Jobs
from app.store.sqlite.ledger import SqliteLedger
from app.store.sqlite.runs import SqliteRuns
from app.store.webhooks import WebhookStore


@dataclass(frozen=True, slots=True)
class Stores:
    """The stores by concern, all on `database`."""

    database: Database
    ledger: LedgerStore
    runs: RunStore
    accounts: AccountStore
    idempotency: IdempotencyStore
    webhooks: WebhookStore
    schedules: ScheduleStore
    maintenance: MaintenanceStore
    erasure: ErasureStore

    @property
    def dialect(self) -> str:
        """The backend's SQLAlchemy dialect name ("sqlite" or "postgresql")."""
        return self.database.dialect

    async def flush_wakeups(self) -> None:
        """Wait for the NOTIFYs of every commit so far (before the engine is disposed)."""
        await self.database.flush_wakeups()


def open_stores(
    engine: AsyncEngine,
    *,
    notify: bool = True,
    notify_interval: float = NOTIFY_INTERVAL,
    pgbouncer: bool | None = None,
    max_metadata_bytes: int = 16_384,
    max_event_bytes: int = 2_097_152,
    idempotency_ttl_seconds: int = 86_400,
    redactor: Redactor | None = None,
    observer: Observer | None = None,
) -> Stores:
    """The stores for `engine`'s database.

    Args:
        notify: PostgreSQL: announce commits to other replicas with NOTIFY.
        notify_interval: PostgreSQL: the least time between two NOTIFY sends, in seconds.
        pgbouncer: PostgreSQL: the URL is PgBouncer in transaction pooling mode (None: as
            `make_engine` marked the engine).
        max_metadata_bytes, max_event_bytes, redactor: the payload funnel (`Payloads`).
        idempotency_ttl_seconds: how long an Idempotency-Key is kept.
        observer: told about committed events (metrics).
    """
    payloads = Payloads(
        redactor=redactor, max_event_bytes=max_event_bytes, max_metadata_bytes=max_metadata_bytes
    )
    if engine.dialect.name == "postgresql":
        return _postgres(
            PostgresDatabase(
                engine,
                notify=notify,
                notify_interval=notify_interval,
                pgbouncer=pgbouncer,
                observer=observer,
            ),
            payloads,
            idempotency_ttl_seconds,
        )
    return _sqlite(SqliteDatabase(engine, observer=observer), payloads, idempotency_ttl_seconds)


def _sqlite(db: SqliteDatabase, payloads: Payloads, ttl_seconds: int) -> Stores:
    idempotency = SqliteIdempotency(db, ttl_seconds=ttl_seconds)
    jobs = Jobs(db, payloads)
    runs = SqliteRuns(db, payloads, idempotency, jobs=jobs)
    ledger = SqliteLedger(db, payloads, idempotency, jobs=jobs, runs=runs)
    return _compose(
        db, payloads, idempotency, SqliteCrossTenant(db), ledger, runs, SqliteErasure(db)
    )


def _postgres(db: PostgresDatabase, payloads: Payloads, ttl_seconds: int) -> Stores:
    idempotency = PostgresIdempotency(db, ttl_seconds=ttl_seconds)
    writes = FunctionWrites(db, payloads, idempotency)
    runs = PostgresRuns(db, payloads, idempotency, writes=writes)
    ledger = PostgresLedger(db, payloads, idempotency, writes=writes, runs=runs)
    return _compose(
        db, payloads, idempotency, PostgresCrossTenant(db), ledger, runs, PostgresErasure(db)
    )


def _compose(
    db: Database,
    payloads: Payloads,
    idempotency: IdempotencyStore,
    cross: CrossTenantStore,
    ledger: LedgerStore,
    runs: RunStore,
    erasure: ErasureStore,
) -> Stores:
    """The stores every backend shares, around its own ledger, runs and cross-tenant work."""
    return Stores(
        database=db,
        ledger=ledger,
        runs=runs,
        accounts=AccountStore(db, cross),
        idempotency=idempotency,
        webhooks=WebhookStore(db, idempotency, cross),
        schedules=ScheduleStore(db, payloads, idempotency, cross),
        maintenance=MaintenanceStore(db, cross, erasure),
        erasure=erasure,
    )
