"""Erasure: every row a session or a tenant left, deleted in one transaction, and the receipts.

A session's content is not only in its own rows: the Idempotency-Keys of its writes keep
their rendered answers (a run's output among them), a webhook subscription or a schedule
may name it (with a filter or an input of its own). All of them go with it. A tenant's
erasure deletes every row of every tenant table, the tenant and its keys included; what it
leaves is the receipt (`erasure_receipts`), which holds counts and no content.

The rows are deleted child tables first, so neither backend relies on its foreign keys'
cascades (SQLite enforces them only when asked). The backends differ in one thing only:
how a JSON column's field is read (`_result_session`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from sqlalchemy import ColumnElement, Table, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.ports import ErasureReceipt
from app.store.base import Database, as_utc
from app.store.tables import (
    api_keys,
    erasure_receipts,
    idempotency_keys,
    retention_policies,
    runs,
    schedule_fires,
    schedules,
    session_events,
    session_snapshots,
    sessions,
    tenants,
    webhook_deliveries,
    webhook_subscriptions,
)

# A tenant's tables, children before their parents (the order of the deletes).
_TENANT_TABLES: tuple[Table, ...] = (
    webhook_deliveries,
    webhook_subscriptions,
    schedule_fires,
    schedules,
    idempotency_keys,
    runs,
    session_snapshots,
    session_events,
    sessions,
    retention_policies,
    api_keys,
    tenants,
)


class ErasureStore(ABC):
    """The erasure store (`ErasurePort`): the deletes and the receipts."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @abstractmethod
    def _result_session(self) -> ColumnElement[Any]:
        """`idempotency_keys.result`'s `session_id`, as text, in this dialect."""

    async def list_delegated_children(self, tenant_id: str, session_id: str) -> list[str]:
        """The sessions delegated by this one: its children that are not forks."""
        async with self.db.read(tenant_id) as conn:
            rows = await conn.execute(
                select(sessions.c.session_id).where(
                    sessions.c.tenant_id == tenant_id,
                    sessions.c.parent_session_id == session_id,
                    sessions.c.forked_from_seq.is_(None),
                )
            )
            return [row[0] for row in rows]

    async def erase_session(self, tenant_id: str, session_id: str) -> dict[str, int] | None:
        """Delete the session's rows and every row that names it; rows deleted per table,
        or None when there is no such session (then nothing is deleted)."""
        async with self.db.write(tenant_id) as conn:
            found = await conn.execute(
                select(sessions.c.session_id)
                .where(sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id)
                .with_for_update()
            )
            if found.first() is None:
                return None
            return await self.delete_session_rows(conn, tenant_id, session_id)

    async def delete_session_rows(
        self, conn: AsyncConnection, tenant_id: str, session_id: str
    ) -> dict[str, int]:
        """In the open write transaction `conn`, whose caller locked the session row:
        delete the session's rows and every row that names it; rows deleted per table."""
        counts: dict[str, int] = {}

        async def drop(table: Table, *where: ColumnElement[bool]) -> None:
            result = await conn.execute(delete(table).where(table.c.tenant_id == tenant_id, *where))
            counts[table.name] = counts.get(table.name, 0) + result.rowcount

        named = select(schedules.c.schedule_id).where(
            schedules.c.tenant_id == tenant_id, schedules.c.session_id == session_id
        )
        hooks = select(webhook_subscriptions.c.webhook_id).where(
            webhook_subscriptions.c.tenant_id == tenant_id,
            webhook_subscriptions.c.session_id == session_id,
        )
        await drop(webhook_deliveries, webhook_deliveries.c.session_id == session_id)
        await drop(webhook_deliveries, webhook_deliveries.c.webhook_id.in_(hooks))
        await drop(webhook_subscriptions, webhook_subscriptions.c.session_id == session_id)
        await drop(schedule_fires, schedule_fires.c.schedule_id.in_(named))
        await drop(schedules, schedules.c.session_id == session_id)
        await drop(idempotency_keys, self._result_session() == session_id)
        for table in (runs, session_snapshots, session_events, sessions):
            await drop(table, table.c.session_id == session_id)
        return counts

    async def erase_tenant(self, tenant_id: str) -> dict[str, int] | None:
        """Delete every row of the tenant in every table (the tenant and its keys too);
        rows deleted per table, or None when there is no such tenant."""
        counts: dict[str, int] = {}
        async with self.db.write(tenant_id) as conn:
            found = await conn.execute(
                select(tenants.c.tenant_id)
                .where(tenants.c.tenant_id == tenant_id)
                .with_for_update()
            )
            if found.first() is None:
                return None
            for table in _TENANT_TABLES:
                result = await conn.execute(delete(table).where(table.c.tenant_id == tenant_id))
                counts[table.name] = result.rowcount
        return counts

    async def save_receipt(self, receipt: ErasureReceipt) -> None:
        """Record that an erasure happened (in the erased tenant's scope)."""
        async with self.db.write(receipt.tenant_id) as conn:
            await conn.execute(
                insert(erasure_receipts).values(
                    tenant_id=receipt.tenant_id,
                    receipt_id=receipt.receipt_id,
                    scope=receipt.scope,
                    session_id=receipt.session_id,
                    requested_by=receipt.requested_by,
                    erased_at=receipt.erased_at,
                    counts=receipt.counts,
                )
            )

    async def list_receipts(
        self, tenant_id: str, *, limit: int = 100, before: str | None = None
    ) -> list[ErasureReceipt]:
        """A tenant's receipts, newest first; `before` is the last receipt id of the page
        before (receipt ids grow with time)."""
        query = select(erasure_receipts).where(erasure_receipts.c.tenant_id == tenant_id)
        if before is not None:
            query = query.where(erasure_receipts.c.receipt_id < before)
        query = query.order_by(erasure_receipts.c.receipt_id.desc()).limit(limit)
        async with self.db.read(tenant_id) as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [
            ErasureReceipt(
                receipt_id=row["receipt_id"],
                tenant_id=row["tenant_id"],
                scope=row["scope"],
                session_id=row["session_id"],
                requested_by=row["requested_by"],
                erased_at=as_utc(row["erased_at"]),
                counts=dict(row["counts"]),
            )
            for row in rows
        ]
