"""The webhook records and what the webhook verbs need from the store.

The outbox rows themselves are written in the database (PostgreSQL: `asr_insert_events`,
migration 0015; SQLite: a trigger, migration 0010), not by the runtime: the store's part
here is managing subscriptions, reading the delivery log, and the deliverer's claim, read
and settle.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from app.runtime.ports import IdempotencyToken
from app.runtime.session.events import Event

ACTIVE = "active"
DISABLED = "disabled"
PENDING = "pending"
DELIVERED = "delivered"
FAILED = "failed"
DROPPED = "dropped"  # an outcome only: the delivery row is deleted, never stored so
ALL_TYPES = "*"
# Delivery formats: how a delivery's body is rendered (`delivery.Renderer`).
STANDARD = "standard"


@dataclass(frozen=True, slots=True)
class WebhookRecord:
    tenant_id: str
    webhook_id: str
    url: str
    event_types: list[str]
    session_id: str | None
    metadata_filter: dict[str, Any] | None
    description: str | None
    secret: str
    state: str
    disabled_reason: str | None
    consecutive_failures: int
    last_success_at: datetime | None
    last_failure_at: datetime | None
    created_at: datetime
    updated_at: datetime
    # How its deliveries are rendered, and what that format needs (never shown by reads:
    # an `a2a` config's options hold the client's token and credentials).
    format: str = STANDARD
    format_options: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class NewWebhook:
    webhook_id: str
    url: str
    event_types: list[str]
    session_id: str | None
    metadata_filter: dict[str, Any] | None
    description: str | None
    secret: str
    format: str = STANDARD
    format_options: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    tenant_id: str
    webhook_id: str
    session_id: str
    seq: int
    event_id: str
    event_type: str
    status: str
    attempts: int
    next_attempt_at: datetime
    retry_started_at: datetime | None
    last_attempt_at: datetime | None
    last_error: str | None
    response_code: int | None
    delivered_at: datetime | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Claim:
    """A delivery a deliverer claimed: its key, and the attempt number that fences it."""

    tenant_id: str
    webhook_id: str
    session_id: str
    seq: int
    attempts: int


@dataclass(frozen=True, slots=True)
class ClaimedWork:
    """What one claimed attempt sends: the subscription (URL, secret) and the event.

    `event` is None when the event is gone (its session was erased meanwhile)."""

    webhook: WebhookRecord
    delivery: DeliveryRecord
    event: Event | None


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one attempt ended, as the deliverer settles it.

    `status`: delivered, pending (retry at `next_attempt_at`), failed (given up), or dropped
    (the format's renderer found the event is none of the subscription's news, e.g. another
    task's end for an A2A push config: the row goes, nothing was sent); `disable` names why
    the subscription is switched off with it, if it is."""

    status: str
    attempted_at: datetime
    next_attempt_at: datetime | None = None
    response_code: int | None = None
    error: str | None = None
    disable: str | None = None


class WebhookPort(Protocol):
    """Subscriptions and deliveries (the webhook store); the claims span tenants."""

    async def create_webhook(
        self, tenant_id: str, webhook: NewWebhook, *, idempotency: IdempotencyToken | None = None
    ) -> WebhookRecord: ...

    async def get_webhook(self, tenant_id: str, webhook_id: str) -> WebhookRecord | None: ...

    async def list_webhooks(
        self, tenant_id: str, *, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[WebhookRecord]: ...

    async def count_webhooks(self, tenant_id: str) -> int: ...

    async def update_webhook(
        self, tenant_id: str, webhook_id: str, changes: dict[str, Any]
    ) -> WebhookRecord | None: ...

    async def delete_webhook(self, tenant_id: str, webhook_id: str) -> bool: ...

    async def list_deliveries(
        self,
        tenant_id: str,
        webhook_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        status: str | None = None,
    ) -> list[DeliveryRecord]: ...

    async def get_delivery(
        self, tenant_id: str, webhook_id: str, event_id: str
    ) -> DeliveryRecord | None: ...

    async def redeliver(
        self, tenant_id: str, webhook_id: str, event_id: str
    ) -> DeliveryRecord | None: ...

    async def claim_webhook_deliveries(
        self, *, owner: str, limit: int, lease_seconds: int
    ) -> list[Claim]: ...

    async def load_claimed(self, claim: Claim) -> ClaimedWork | None: ...

    async def settle_delivery(self, claim: Claim, *, owner: str, outcome: Outcome) -> bool: ...
