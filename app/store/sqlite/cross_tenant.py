"""SQLite's cross-tenant work: plain SQL in transactions that name no tenant.

SQLite, the single-tenant embedded default, has no row-level security: the application's
own filters are its only wall, so the statements that span tenants are simply the ones
without a tenant filter, kept here beside each other (PostgreSQL's are stored functions:
`app.store.postgres.cross_tenant`).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta

from sqlalchemy import delete, func, or_, select, tuple_, update

from app.runtime.ports import ApiKeyRecord, RunRecord, TenantRecord
from app.runtime.webhooks.records import ACTIVE, PENDING, Claim
from app.store.base import NO_TENANT, utcnow
from app.store.cross_tenant import CrossTenantStore, key_from_row, tenant_from_row
from app.store.runs import LIVE, run_from_row
from app.store.tables import (
    api_keys,
    idempotency_keys,
    runs,
    schedules,
    sessions,
    tenants,
    webhook_deliveries,
    webhook_subscriptions,
)


class SqliteCrossTenant(CrossTenantStore):
    """`CrossTenantStore` as plain SQL."""

    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None:
        async with self.db.read(NO_TENANT) as conn:
            row = (await conn.execute(select(api_keys).where(api_keys.c.prefix == prefix))).first()
        return key_from_row(row) if row is not None else None

    async def list_live_key_prefixes(self, prefixes: Collection[str]) -> set[str]:
        if not prefixes:
            return set()
        query = select(api_keys.c.prefix).where(
            api_keys.c.prefix.in_(sorted(prefixes)), api_keys.c.revoked_at.is_(None)
        )
        async with self.db.read(NO_TENANT) as conn:
            return {row[0] for row in (await conn.execute(query)).all()}

    async def get_tenant_by_name(self, name: str) -> TenantRecord | None:
        async with self.db.read(NO_TENANT) as conn:
            row = (await conn.execute(select(tenants).where(tenants.c.name == name))).first()
        return tenant_from_row(row) if row is not None else None

    async def list_tenants(self) -> list[TenantRecord]:
        async with self.db.read(NO_TENANT) as conn:
            rows = (await conn.execute(select(tenants).order_by(tenants.c.name))).all()
        return [tenant_from_row(r) for r in rows]

    async def count_tenants(self) -> int:
        async with self.db.read(NO_TENANT) as conn:
            return int((await conn.execute(select(func.count()).select_from(tenants))).scalar_one())

    async def list_stale_runs(self, *, limit: int = 100) -> list[RunRecord]:
        now = utcnow()
        async with self.db.read(NO_TENANT) as conn:
            expired = (
                await conn.execute(
                    select(runs)
                    .where(runs.c.status.in_(LIVE), runs.c.lease_expires_at < now)
                    .limit(limit)
                )
            ).all()
            dangling = (
                await conn.execute(
                    select(runs)
                    .join(
                        sessions,
                        (sessions.c.tenant_id == runs.c.tenant_id)
                        & (sessions.c.active_run_id == runs.c.run_id),
                    )
                    .where(runs.c.status.not_in(LIVE))
                    .limit(limit)
                )
            ).all()
        return [run_from_row(r) for r in (*expired, *dangling)]

    async def claim_webhook_deliveries(
        self, *, owner: str, limit: int, lease_seconds: int
    ) -> list[Claim]:
        """One UPDATE ... RETURNING under SQLite's single writer (nothing to skip: no other
        writer can hold a row)."""
        now = utcnow()
        d, w = webhook_deliveries.c, webhook_subscriptions.c
        earlier = webhook_deliveries.alias("earlier")
        head = ~(
            select(earlier.c.seq)
            .where(
                earlier.c.tenant_id == d.tenant_id,
                earlier.c.webhook_id == d.webhook_id,
                earlier.c.session_id == d.session_id,
                earlier.c.seq < d.seq,
                earlier.c.status == PENDING,
            )
            .exists()
        )
        due = (
            select(d.tenant_id, d.webhook_id, d.session_id, d.seq)
            .join(
                webhook_subscriptions,
                (w.tenant_id == d.tenant_id) & (w.webhook_id == d.webhook_id),
            )
            .where(
                d.status == PENDING,
                d.next_attempt_at <= now,
                w.state == ACTIVE,
                or_(d.claimed_until.is_(None), d.claimed_until < now),
                head,
            )
            .order_by(d.next_attempt_at)
            .limit(limit)
        )
        stmt = (
            update(webhook_deliveries)
            .where(tuple_(d.tenant_id, d.webhook_id, d.session_id, d.seq).in_(due))
            .values(
                claimed_by=owner,
                claimed_until=now + timedelta(seconds=lease_seconds),
                attempts=d.attempts + 1,
            )
            .returning(d.tenant_id, d.webhook_id, d.session_id, d.seq, d.attempts)
        )
        # Most polls find nothing: look first, so that an idle deliverer takes no write lock.
        async with self.db.read(NO_TENANT) as conn:
            if (await conn.execute(due.limit(1))).first() is None:
                return []
        async with self.db.write(NO_TENANT) as conn:
            rows = (await conn.execute(stmt)).all()
        return [Claim(*row) for row in rows]

    async def delete_expired_idempotency_keys(self) -> int:
        t = idempotency_keys.c
        async with self.db.write(NO_TENANT) as conn:
            result = await conn.execute(delete(idempotency_keys).where(t.expires_at <= utcnow()))
        return result.rowcount

    async def list_due_schedules(self, *, limit: int = 100) -> list[tuple[str, str]]:
        c = schedules.c
        now = utcnow()
        query = (
            select(c.tenant_id, c.schedule_id)
            .where(
                c.status == "active",
                c.next_fire_at <= now,  # a claimed tick's too: it is the tick that was due
                or_(c.claim_tick_at.is_(None), c.claim_expires_at < now),
            )
            .order_by(c.next_fire_at)
            .limit(limit)
        )
        async with self.db.read(NO_TENANT) as conn:
            return [(r[0], r[1]) for r in (await conn.execute(query)).all()]
