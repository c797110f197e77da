"""The store's only work that spans tenants, each a narrow method of its own.

Every other transaction names its tenant, and on PostgreSQL the row-level policies admit
only that tenant's rows: there is no tenant value that means "all of them", so neither a
query that forgets its filter nor SQL injected into the app role's connection can reach
across tenants. What must reach across is listed here, one method per need: finding an API
key by its prefix before the tenant is known (authentication, revocation, stream checks),
the run sweeper's stale runs, the webhook deliverers' claims, the schedulers' due schedules,
the expired Idempotency-Keys,
and the operators' tenant lookups (the CLI, retention, the bootstrap tenant).

Each backend implements them its own way: `app.store.sqlite` with plain SQL (SQLite, the
single-tenant embedded default, has no row-level security), `app.store.postgres` by calling
one SECURITY DEFINER function per method (`sql/*.sql`, migration 0009), which the app role
may execute but whose owner's reach it cannot otherwise assume.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from typing import Any

from app.runtime.ports import ApiKeyRecord, RunRecord, TenantRecord
from app.runtime.webhooks.records import Claim
from app.store.base import Database, as_utc


def tenant_from_row(row: Any) -> TenantRecord:
    m = row._mapping
    return TenantRecord(
        tenant_id=m["tenant_id"], name=m["name"], created_at=as_utc(m["created_at"])
    )


def key_from_row(row: Any) -> ApiKeyRecord:
    m = row._mapping
    revoked = m["revoked_at"]
    return ApiKeyRecord(
        key_id=m["key_id"],
        tenant_id=m["tenant_id"],
        prefix=m["prefix"],
        secret_hash=m["secret_hash"],
        name=m["name"],
        created_at=as_utc(m["created_at"]),
        revoked_at=as_utc(revoked) if revoked is not None else None,
    )


class CrossTenantStore(ABC):
    """What spans tenants; each backend's class implements every method. The stores by
    concern hand its methods on (`AccountStore.get_api_key`, `RunStore.list_stale_runs`,
    ...): this class is no port of its own."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @abstractmethod
    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None:
        """The key with this public prefix, revoked or not, whichever its tenant."""

    @abstractmethod
    async def list_live_key_prefixes(self, prefixes: Collection[str]) -> set[str]:
        """Those of `prefixes` whose key exists and is not revoked (one query for all of
        them: open streams re-check their keys with it, every few seconds)."""

    @abstractmethod
    async def get_tenant_by_name(self, name: str) -> TenantRecord | None:
        """The tenant with this name (operators name tenants; the store keys by id)."""

    @abstractmethod
    async def list_tenants(self) -> list[TenantRecord]:
        """Every tenant, by name (operators' listing, retention)."""

    @abstractmethod
    async def count_tenants(self) -> int:
        """How many tenants there are (the bootstrap tenant is made only when none is)."""

    @abstractmethod
    async def list_stale_runs(self, *, limit: int = 100) -> list[RunRecord]:
        """Live runs whose lease expired, and interrupted runs still holding their session.

        The sweeper of every replica reads this (across tenants: it is the system's own
        housekeeping, never a request); it then fences and closes each run in its tenant's
        own transaction.
        """

    @abstractmethod
    async def claim_webhook_deliveries(
        self, *, owner: str, limit: int, lease_seconds: int
    ) -> list[Claim]:
        """Claim up to `limit` due webhook deliveries for `owner` until `lease_seconds` from
        now, whichever their tenant; each is the oldest pending delivery of its
        (subscription, session), of an active subscription, and not claimed by a live claim.

        The deliverer of every replica calls this; it then reads each claimed delivery and
        settles its attempt in the tenant's own transaction (`WebhookStore`).
        """

    @abstractmethod
    async def delete_expired_idempotency_keys(self) -> int:
        """Delete every tenant's expired Idempotency-Key rows; returns how many."""

    @abstractmethod
    async def list_due_schedules(self, *, limit: int = 100) -> list[tuple[str, str]]:
        """(tenant_id, schedule_id) of active schedules whose next tick is due, or whose
        claimed tick's claim expired, earliest first.

        Every replica's scheduler reads this (the system's own work, never a request); it
        then claims each tick in the tenant's own transaction, conditionally on the row's
        version, so exactly one replica fires it.
        """
