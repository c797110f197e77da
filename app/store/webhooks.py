"""Webhook subscriptions and the delivery log, shared by both backends.

The outbox rows are not written here: the database writes them in the transaction of the
events (PostgreSQL: `asr_insert_events`, the one function that inserts events, migration
0015; SQLite: a trigger on `session_events`, migration 0010), so no writer can forget. What
is here runs in the tenant's own transactions: managing subscriptions, reading the log,
redelivering, and the deliverer's read and settle of an attempt it claimed. The claim itself
spans tenants and is each backend's `CrossTenantStore.claim_webhook_deliveries`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, null, select, tuple_, update
from sqlalchemy.exc import StatementError

from app.runtime.ports import IdempotencyToken
from app.runtime.webhooks.records import (
    ACTIVE,
    DELIVERED,
    DISABLED,
    DROPPED,
    PENDING,
    Claim,
    ClaimedWork,
    DeliveryRecord,
    NewWebhook,
    Outcome,
    WebhookRecord,
)
from app.store.base import Database, as_utc, event_from_row, utcnow
from app.store.cross_tenant import CrossTenantStore
from app.store.idempotency import IdempotencyStore
from app.store.tables import session_events, webhook_deliveries, webhook_subscriptions

_W = webhook_subscriptions.c
_D = webhook_deliveries.c
# What PATCH may change; everything else is the store's or the deliverer's.
_MUTABLE = frozenset(
    {"url", "event_types", "session_id", "metadata_filter", "description", "state"}
    | {"format_options"}  # not PATCH's: an A2A push config naming its task
)


def _utc(value: datetime | None) -> datetime | None:
    return as_utc(value) if value is not None else None


def webhook_from_row(row: Any) -> WebhookRecord:
    m = row._mapping
    return WebhookRecord(
        tenant_id=m["tenant_id"],
        webhook_id=m["webhook_id"],
        url=m["url"],
        event_types=list(m["event_types"] or []),
        session_id=m["session_id"],
        metadata_filter=m["metadata_filter"],
        description=m["description"],
        secret=m["secret"],
        state=m["state"],
        disabled_reason=m["disabled_reason"],
        consecutive_failures=m["consecutive_failures"],
        last_success_at=_utc(m["last_success_at"]),
        last_failure_at=_utc(m["last_failure_at"]),
        created_at=as_utc(m["created_at"]),
        updated_at=as_utc(m["updated_at"]),
        format=m["format"],
        format_options=m["format_options"],
    )


def delivery_from_row(row: Any) -> DeliveryRecord:
    m = row._mapping
    return DeliveryRecord(
        tenant_id=m["tenant_id"],
        webhook_id=m["webhook_id"],
        session_id=m["session_id"],
        seq=m["seq"],
        event_id=m["event_id"],
        event_type=m["event_type"],
        status=m["status"],
        attempts=m["attempts"],
        next_attempt_at=as_utc(m["next_attempt_at"]),
        retry_started_at=_utc(m["retry_started_at"]),
        last_attempt_at=_utc(m["last_attempt_at"]),
        last_error=m["last_error"],
        response_code=m["response_code"],
        delivered_at=_utc(m["delivered_at"]),
        created_at=as_utc(m["created_at"]),
    )


def _sql_null(value: dict[str, Any] | None) -> Any:
    """SQL NULL for no filter: a JSON column would store None as JSON `null`, which the
    triggers' `IS NULL` tests would not see."""
    return null() if value is None else value


@contextmanager
def _parameters_hidden() -> Iterator[None]:
    """A failed statement's error names no bound values: the insert binds the signing
    secret, and an error's text may reach a log."""
    try:
        yield
    except StatementError as exc:
        exc.hide_parameters = True
        raise


def _claim_key(claim: Claim) -> tuple[Any, ...]:
    return (
        _D.tenant_id == claim.tenant_id,
        _D.webhook_id == claim.webhook_id,
        _D.session_id == claim.session_id,
        _D.seq == claim.seq,
    )


class WebhookStore:
    """Subscriptions, the delivery log, and the deliverer's claims, per-tenant read and
    settle."""

    def __init__(
        self, db: Database, idempotency: IdempotencyStore, cross: CrossTenantStore
    ) -> None:
        self.db = db
        self.idempotency = idempotency
        self._cross = cross

    async def claim_webhook_deliveries(
        self, *, owner: str, limit: int, lease_seconds: int
    ) -> list[Claim]:
        """Claim due deliveries of every tenant (`CrossTenantStore.claim_webhook_deliveries`)."""
        return await self._cross.claim_webhook_deliveries(
            owner=owner, limit=limit, lease_seconds=lease_seconds
        )

    async def create_webhook(
        self, tenant_id: str, webhook: NewWebhook, *, idempotency: IdempotencyToken | None = None
    ) -> WebhookRecord:
        """Insert the subscription (active), with its Idempotency-Key in the same transaction.

        Raises:
            IdempotentReplay: the key was recorded by a duplicate that committed first.
        """
        now = utcnow()
        values = {
            "tenant_id": tenant_id,
            "webhook_id": webhook.webhook_id,
            "url": webhook.url,
            "event_types": webhook.event_types,
            "session_id": webhook.session_id,
            "metadata_filter": _sql_null(webhook.metadata_filter),
            "description": webhook.description,
            "secret": webhook.secret,
            "format": webhook.format,
            "format_options": _sql_null(webhook.format_options),
            "state": ACTIVE,
            "disabled_reason": None,
            "consecutive_failures": 0,
            "created_at": now,
            "updated_at": now,
        }
        with _parameters_hidden():
            async with self.db.write(tenant_id) as conn:
                row = (
                    await conn.execute(
                        webhook_subscriptions.insert()
                        .values(**values)
                        .returning(webhook_subscriptions)
                    )
                ).one()
                await self.idempotency.seal(
                    conn, tenant_id, idempotency, {"webhook_id": webhook.webhook_id}
                )
        return webhook_from_row(row)

    async def get_webhook(self, tenant_id: str, webhook_id: str) -> WebhookRecord | None:
        """The subscription, or None (another tenant's is None too)."""
        stmt = select(webhook_subscriptions).where(
            _W.tenant_id == tenant_id, _W.webhook_id == webhook_id
        )
        async with self.db.read(tenant_id) as conn:
            row = (await conn.execute(stmt)).first()
        return webhook_from_row(row) if row is not None else None

    async def list_webhooks(
        self, tenant_id: str, *, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[WebhookRecord]:
        """Newest first, keyset-paginated on (created_at, webhook_id)."""
        stmt = select(webhook_subscriptions).where(_W.tenant_id == tenant_id)
        if after is not None:
            stmt = stmt.where(tuple_(_W.created_at, _W.webhook_id) < tuple_(*after))
        stmt = stmt.order_by(_W.created_at.desc(), _W.webhook_id.desc()).limit(limit)
        async with self.db.read(tenant_id) as conn:
            rows = (await conn.execute(stmt)).all()
        return [webhook_from_row(r) for r in rows]

    async def count_webhooks(self, tenant_id: str) -> int:
        stmt = select(func.count()).select_from(webhook_subscriptions)
        async with self.db.read(tenant_id) as conn:
            return int((await conn.execute(stmt.where(_W.tenant_id == tenant_id))).scalar_one())

    async def update_webhook(
        self, tenant_id: str, webhook_id: str, changes: dict[str, Any]
    ) -> WebhookRecord | None:
        """Apply `changes` (PATCH's fields); turning a subscription on again clears why it
        was off and its failure count. None when there is no such subscription."""
        unknown = set(changes) - _MUTABLE
        if unknown:
            raise ValueError(f"not changeable: {sorted(unknown)}")
        values: dict[str, Any] = {**changes, "updated_at": utcnow()}
        for nullable in ("metadata_filter", "format_options"):
            if nullable in changes:
                values[nullable] = _sql_null(changes[nullable])
        if changes.get("state") == ACTIVE:
            values.update(disabled_reason=None, consecutive_failures=0)
        elif changes.get("state") == DISABLED:
            values["disabled_reason"] = "disabled_by_tenant"
        stmt = (
            update(webhook_subscriptions)
            .where(_W.tenant_id == tenant_id, _W.webhook_id == webhook_id)
            .values(**values)
            .returning(webhook_subscriptions)
        )
        with _parameters_hidden():  # `format_options` may bind a client's token
            async with self.db.write(tenant_id) as conn:
                row = (await conn.execute(stmt)).first()
                if row is not None and changes.get("state") == ACTIVE:
                    # Turned on again: what waited gets a fresh round of retries, due now.
                    await conn.execute(
                        update(webhook_deliveries)
                        .where(
                            _D.tenant_id == tenant_id,
                            _D.webhook_id == webhook_id,
                            _D.status == PENDING,
                        )
                        .values(retry_started_at=None, next_attempt_at=values["updated_at"])
                    )
        return webhook_from_row(row) if row is not None else None

    async def delete_webhook(self, tenant_id: str, webhook_id: str) -> bool:
        """Delete the subscription and its delivery log; False if there was none."""
        async with self.db.write(tenant_id) as conn:
            await conn.execute(
                delete(webhook_deliveries).where(
                    _D.tenant_id == tenant_id, _D.webhook_id == webhook_id
                )
            )
            result = await conn.execute(
                delete(webhook_subscriptions).where(
                    _W.tenant_id == tenant_id, _W.webhook_id == webhook_id
                )
            )
        return bool(result.rowcount)

    async def list_deliveries(
        self,
        tenant_id: str,
        webhook_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        status: str | None = None,
    ) -> list[DeliveryRecord]:
        """The subscription's delivery log, newest first, keyset-paginated on
        (created_at, event_id)."""
        stmt = select(webhook_deliveries).where(
            _D.tenant_id == tenant_id, _D.webhook_id == webhook_id
        )
        if after is not None:
            stmt = stmt.where(tuple_(_D.created_at, _D.event_id) < tuple_(*after))
        if status is not None:
            stmt = stmt.where(_D.status == status)
        stmt = stmt.order_by(_D.created_at.desc(), _D.event_id.desc()).limit(limit)
        async with self.db.read(tenant_id) as conn:
            rows = (await conn.execute(stmt)).all()
        return [delivery_from_row(r) for r in rows]

    async def get_delivery(
        self, tenant_id: str, webhook_id: str, event_id: str
    ) -> DeliveryRecord | None:
        stmt = select(webhook_deliveries).where(
            _D.tenant_id == tenant_id, _D.webhook_id == webhook_id, _D.event_id == event_id
        )
        async with self.db.read(tenant_id) as conn:
            row = (await conn.execute(stmt)).first()
        return delivery_from_row(row) if row is not None else None

    async def redeliver(
        self, tenant_id: str, webhook_id: str, event_id: str
    ) -> DeliveryRecord | None:
        """Make the delivery pending and due now, with a fresh round of retries. A claim in
        flight keeps going (at least once: the event may arrive twice)."""
        stmt = (
            update(webhook_deliveries)
            .where(_D.tenant_id == tenant_id, _D.webhook_id == webhook_id, _D.event_id == event_id)
            .values(status=PENDING, next_attempt_at=utcnow(), retry_started_at=None)
            .returning(webhook_deliveries)
        )
        async with self.db.write(tenant_id) as conn:
            row = (await conn.execute(stmt)).first()
        return delivery_from_row(row) if row is not None else None

    async def load_claimed(self, claim: Claim) -> ClaimedWork | None:
        """The subscription, the delivery and its event, read in the tenant's transaction;
        None when the subscription or the delivery is gone."""
        async with self.db.read(claim.tenant_id) as conn:
            hook = (
                await conn.execute(
                    select(webhook_subscriptions).where(
                        _W.tenant_id == claim.tenant_id, _W.webhook_id == claim.webhook_id
                    )
                )
            ).first()
            row = (await conn.execute(select(webhook_deliveries).where(*_claim_key(claim)))).first()
            if hook is None or row is None:
                return None
            e = session_events.c
            event = (
                await conn.execute(
                    select(session_events).where(
                        e.tenant_id == claim.tenant_id,
                        e.session_id == claim.session_id,
                        e.seq == claim.seq,
                    )
                )
            ).first()
        return ClaimedWork(
            webhook=webhook_from_row(hook),
            delivery=delivery_from_row(row),
            event=event_from_row(event) if event is not None else None,
        )

    async def settle_delivery(self, claim: Claim, *, owner: str, outcome: Outcome) -> bool:
        """Record an attempt's outcome, if the claim is still ours (owner and attempt number:
        a claim that lapsed and was taken again settles nothing); the subscription's health
        with it. Returns whether it was settled.

        A `dropped` outcome deletes the delivery instead (fenced the same way): the format's
        renderer found it none of the subscription's news, so nothing was sent, and the
        subscription's health is untouched."""
        if outcome.status == DROPPED:
            async with self.db.write(claim.tenant_id) as conn:
                dropped = await conn.execute(
                    delete(webhook_deliveries).where(
                        *_claim_key(claim), _D.claimed_by == owner, _D.attempts == claim.attempts
                    )
                )
            return bool(dropped.rowcount)
        values: dict[str, Any] = {
            "status": outcome.status,
            "last_attempt_at": outcome.attempted_at,
            "response_code": outcome.response_code,
            "last_error": outcome.error[:512] if outcome.error else None,
            "claimed_by": None,
            "claimed_until": None,
            "retry_started_at": func.coalesce(_D.retry_started_at, outcome.attempted_at),
        }
        if outcome.status == DELIVERED:
            values["delivered_at"] = outcome.attempted_at
        if outcome.next_attempt_at is not None:
            values["next_attempt_at"] = outcome.next_attempt_at
        ok = outcome.status == DELIVERED
        health: dict[str, Any] = (
            {"consecutive_failures": 0, "last_success_at": outcome.attempted_at}
            if ok
            else {
                "consecutive_failures": _W.consecutive_failures + 1,
                "last_failure_at": outcome.attempted_at,
            }
        )
        if outcome.disable is not None:
            health.update(state=DISABLED, disabled_reason=outcome.disable)
        async with self.db.write(claim.tenant_id) as conn:
            settled = await conn.execute(
                update(webhook_deliveries)
                .where(*_claim_key(claim), _D.claimed_by == owner, _D.attempts == claim.attempts)
                .values(**values)
            )
            if not settled.rowcount:
                return False
            await conn.execute(
                update(webhook_subscriptions)
                .where(_W.tenant_id == claim.tenant_id, _W.webhook_id == claim.webhook_id)
                .values(**health, updated_at=utcnow())
            )
        return True
