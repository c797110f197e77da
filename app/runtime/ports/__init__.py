"""What the runtime needs from persistence and the live path: records, and one narrow port
per concern.

The runtime depends on these protocols, never on SQLAlchemy. `app.store.stores.Stores`
holds their implementations on SQLite and PostgreSQL: `LedgerPort` is the ledger store,
`RunPort` the run store, `IdempotencyPort` the Idempotency-Key store and `MaintenancePort`
(part of) the maintenance store. The accounts, schedules, webhooks and retention keep their
ports beside the services that use them (`AccountStorePort`, `ScheduleStorePort`,
`WebhookStore`, `RetentionStore`).

  records.py  the rows and the values written (frozen dataclasses)
  stores.py   the store ports
  live.py     the live path's ports (`app.live` implements them)
"""

from __future__ import annotations

from app.runtime.ports.live import (
    LiveBus,
    LiveDelivery,
    LiveFrames,
    LocalControl,
    NoLiveFrames,
    RunControl,
    RunSignal,
    Wakeup,
)
from app.runtime.ports.records import (
    ApiKeyRecord,
    AppendResult,
    FireRecord,
    IdempotencyRecord,
    IdempotencyToken,
    NewRun,
    NewSession,
    RunFinish,
    RunRecord,
    ScheduleRecord,
    SessionLoad,
    SessionRecord,
    SnapshotRecord,
    TenantCursor,
    TenantPage,
    TenantRecord,
)
from app.runtime.ports.stores import (
    HeldSession,
    IdempotencyPort,
    LedgerPort,
    MaintenancePort,
    RunPort,
    SessionWriter,
)

__all__ = [
    "ApiKeyRecord",
    "AppendResult",
    "FireRecord",
    "HeldSession",
    "IdempotencyPort",
    "IdempotencyRecord",
    "IdempotencyToken",
    "LedgerPort",
    "LiveBus",
    "LiveDelivery",
    "LiveFrames",
    "LocalControl",
    "MaintenancePort",
    "NewRun",
    "NewSession",
    "NoLiveFrames",
    "RunControl",
    "RunFinish",
    "RunPort",
    "RunRecord",
    "RunSignal",
    "ScheduleRecord",
    "SessionLoad",
    "SessionRecord",
    "SessionWriter",
    "SnapshotRecord",
    "TenantCursor",
    "TenantPage",
    "TenantRecord",
    "Wakeup",
]
