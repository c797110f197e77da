"""`Webhooks`: the verbs of the webhook routes, over the store's `WebhookPort`.

A subscription names a URL (checked against SSRF when it is made or changed, and again at
every attempt), the event types it wants (the event vocabulary, or `*`), and optionally one
session or a metadata filter (a session whose metadata holds each key with that value). Its
signing secret is made here and returned once, by `create`; reads never show it.
"""

from __future__ import annotations

import builtins
import re
import uuid
from datetime import datetime
from typing import Any

from app.runtime.errors import (
    DeliveryNotFound,
    InvalidWebhook,
    TooManyWebhooks,
    WebhookNotFound,
)
from app.runtime.ports import IdempotencyToken
from app.runtime.session.events import EventType
from app.runtime.webhooks.records import (
    ALL_TYPES,
    STANDARD,
    DeliveryRecord,
    NewWebhook,
    WebhookPort,
    WebhookRecord,
)
from app.runtime.webhooks.signing import new_secret
from app.runtime.webhooks.targets import TargetPolicy

EVENT_TYPES = frozenset(t.value for t in EventType)
_SCALARS = (str, int, float, bool)
# The SQLite trigger reads a key as a JSON path label: no dots, brackets or quotes in it.
_FILTER_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_event_types(event_types: list[str]) -> list[str]:
    """The filter, deduplicated in order; raises on an unknown type or an empty list."""
    if not event_types:
        raise InvalidWebhook("event_types must name at least one event type (or '*')")
    unknown = [t for t in event_types if t != ALL_TYPES and t not in EVENT_TYPES]
    if unknown:
        raise InvalidWebhook(
            f"unknown event types: {', '.join(unknown)} (GET /v1/event-types lists them)",
            unknown=unknown,
        )
    return list(dict.fromkeys(event_types))


def check_metadata_filter(metadata_filter: dict[str, Any] | None) -> dict[str, Any] | None:
    """A flat object of scalar values (the triggers compare each key's value), or None."""
    if not metadata_filter:
        return None
    for key, value in metadata_filter.items():
        if not _FILTER_KEY.fullmatch(key):
            raise InvalidWebhook(
                f"metadata_filter key {key!r}: letters, digits, '_' and '-' only (64 at most)"
            )
        if value is None or not isinstance(value, _SCALARS):
            raise InvalidWebhook(
                f"metadata_filter.{key}: only strings, numbers and booleans can be matched"
            )
    return metadata_filter


class Webhooks:
    """Create, read, change and delete subscriptions; read the delivery log; redeliver."""

    def __init__(
        self, store: WebhookPort, *, targets: TargetPolicy, max_per_tenant: int = 100
    ) -> None:
        self.store = store
        self.targets = targets
        self.max_per_tenant = max_per_tenant

    async def create(
        self,
        tenant_id: str,
        *,
        url: str,
        event_types: list[str],
        session_id: str | None = None,
        metadata_filter: dict[str, Any] | None = None,
        description: str | None = None,
        idempotency: IdempotencyToken | None = None,
        secret: str | None = None,
        format: str = STANDARD,
        format_options: dict[str, Any] | None = None,
    ) -> WebhookRecord:
        """A new active subscription with a fresh secret (the only answer that shows it), or
        with `secret` when the caller chose it (an A2A push config's token, `signing`);
        `format` and its options say how its deliveries are rendered (`delivery.Renderer`).

        Raises:
            UnsafeWebhookTarget, InvalidWebhook: 422.
            TooManyWebhooks: the tenant is at its cap.
        """
        await self.targets.resolve(url)
        webhook = NewWebhook(
            webhook_id=f"wh_{uuid.uuid4().hex}",
            url=url,
            event_types=check_event_types(event_types),
            session_id=session_id,
            metadata_filter=check_metadata_filter(metadata_filter),
            description=description,
            secret=secret or new_secret(),
            format=format,
            format_options=format_options,
        )
        if await self.store.count_webhooks(tenant_id) >= self.max_per_tenant:
            raise TooManyWebhooks(self.max_per_tenant)
        return await self.store.create_webhook(tenant_id, webhook, idempotency=idempotency)

    async def get(self, tenant_id: str, webhook_id: str) -> WebhookRecord:
        found = await self.store.get_webhook(tenant_id, webhook_id)
        if found is None:
            raise WebhookNotFound(webhook_id)
        return found

    async def list(
        self, tenant_id: str, *, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[WebhookRecord]:
        return await self.store.list_webhooks(tenant_id, limit=limit, after=after)

    async def update(
        self, tenant_id: str, webhook_id: str, changes: dict[str, Any]
    ) -> WebhookRecord:
        """Change the URL (checked again), the filters, the description or the state
        (`active` turns a disabled subscription on again and clears its failure count)."""
        if "url" in changes:
            await self.targets.resolve(changes["url"])
        if "event_types" in changes:
            changes["event_types"] = check_event_types(changes["event_types"])
        if "metadata_filter" in changes:
            changes["metadata_filter"] = check_metadata_filter(changes["metadata_filter"])
        updated = await self.store.update_webhook(tenant_id, webhook_id, changes)
        if updated is None:
            raise WebhookNotFound(webhook_id)
        return updated

    async def delete(self, tenant_id: str, webhook_id: str) -> None:
        if not await self.store.delete_webhook(tenant_id, webhook_id):
            raise WebhookNotFound(webhook_id)

    async def deliveries(
        self,
        tenant_id: str,
        webhook_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        status: str | None = None,
    ) -> builtins.list[DeliveryRecord]:
        await self.get(tenant_id, webhook_id)
        return await self.store.list_deliveries(
            tenant_id, webhook_id, limit=limit, after=after, status=status
        )

    async def delivery(self, tenant_id: str, webhook_id: str, delivery_id: str) -> DeliveryRecord:
        found = await self.store.get_delivery(tenant_id, webhook_id, delivery_id)
        if found is None:
            await self.get(tenant_id, webhook_id)
            raise DeliveryNotFound(webhook_id, delivery_id)
        return found

    async def redeliver(self, tenant_id: str, webhook_id: str, delivery_id: str) -> DeliveryRecord:
        """Send the delivery again: pending, due now, with a fresh round of retries."""
        found = await self.store.redeliver(tenant_id, webhook_id, delivery_id)
        if found is None:
            await self.get(tenant_id, webhook_id)
            raise DeliveryNotFound(webhook_id, delivery_id)
        return found
