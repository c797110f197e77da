"""What the runtime needs from persistence and the live path: records, and one narrow port
per concern.

The runtime depends on these protocols, never on SQLAlchemy. `app.store.stores.Stores`
holds their implementations on SQLite and PostgreSQL: `LedgerPort` is the ledger store,
`RunPort` the run store, `IdempotencyPort` the Idempotency-Key store and `MaintenancePort`
(part of) the maintenance store, `AccountPort`, `SchedulePort`, `RetentionPort` and
`TenantList` the account, schedule and maintenance stores as their services see them,
`ErasurePort` the erasure store. The webhooks' port is beside its records
(`app.runtime.webhooks.records.WebhookPort`).

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
    ErasureReceipt,
    FireRecord,
    IdempotencyRecord,
    IdempotencyToken,
    NewRun,
    NewSession,
    PruneFacts,
    PruneOutcome,
    RunFinish,
    RunRecord,
    ScheduleRecord,
    SessionLoad,
    SessionRecord,
    SnapshotRecord,
    TenantCursor,
    TenantPage,
    TenantRecord,
    TenantRetention,
)
from app.runtime.ports.stores import (
    AccountPort,
    ErasurePort,
    HeldSession,
    IdempotencyPort,
    LedgerPort,
    MaintenancePort,
    RetentionPort,
    RunPort,
    SchedulePort,
    SessionWriter,
    TenantList,
)

__all__ = [
    "AccountPort",
    "ApiKeyRecord",
    "AppendResult",
    "ErasurePort",
    "ErasureReceipt",
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
    "PruneFacts",
    "PruneOutcome",
    "RetentionPort",
    "RunControl",
    "RunFinish",
    "RunPort",
    "RunRecord",
    "RunSignal",
    "SchedulePort",
    "ScheduleRecord",
    "SessionLoad",
    "SessionRecord",
    "SessionWriter",
    "SnapshotRecord",
    "TenantCursor",
    "TenantList",
    "TenantPage",
    "TenantRecord",
    "TenantRetention",
    "Wakeup",
]
