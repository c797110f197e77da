"""Operator-side queries: idle sessions, conditional erasure, snapshot pruning.

Like everything in the store these are tenant-scoped; retention walks the tenants one by one
rather than running one query across all of them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select, tuple_

from app.runtime.ports import SessionRecord
from app.store.base import StoreBase, session_from_row
from app.store.tables import session_events, session_snapshots, sessions


class MaintenanceStore(StoreBase):
    """Retention support: which sessions are idle, and removing what a policy allows."""

    async def list_idle_sessions(
        self, tenant_id: str, *, updated_before: datetime, limit: int
    ) -> list[SessionRecord]:
        """Sessions not updated since `updated_before` and with no active run, oldest first."""
        stmt = (
            select(sessions)
            .where(
                sessions.c.tenant_id == tenant_id,
                sessions.c.updated_at < updated_before,
                sessions.c.active_run_id.is_(None),
            )
            .order_by(sessions.c.updated_at, sessions.c.session_id)
            .limit(limit)
        )
        async with self.read(tenant_id) as conn:
            rows = (await conn.execute(stmt)).all()
        return [session_from_row(r) for r in rows]

    async def delete_idle_session(
        self, tenant_id: str, session_id: str, *, updated_before: datetime
    ) -> bool:
        """Erase the session, its events and snapshots, only if it is still idle.

        The row is locked first (FOR UPDATE on PostgreSQL; SQLite has a single writer), so a
        session that a request touched after it was listed is left alone: a write moves
        `updated_at` and is seen here. Returns whether the session was erased.
        """
        key = (sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id)
        async with self.write(tenant_id) as conn:
            still_idle = (
                await conn.execute(
                    select(sessions.c.session_id)
                    .where(
                        *key,
                        sessions.c.updated_at < updated_before,
                        sessions.c.active_run_id.is_(None),
                    )
                    .with_for_update()
                )
            ).first()
            if still_idle is None:
                return False
            for table in (session_events, session_snapshots):
                await conn.execute(
                    delete(table).where(
                        table.c.tenant_id == tenant_id, table.c.session_id == session_id
                    )
                )
            await conn.execute(delete(sessions).where(*key))
        return True

    async def delete_old_snapshots(self, tenant_id: str, *, keep: int) -> int:
        """Delete all but the `keep` newest snapshots of every session of the tenant.

        Events are never touched: whatever a removed snapshot covered is still in the ledger,
        and the newest snapshot of each session always stays. Returns the rows deleted.
        """
        if keep < 1:
            raise ValueError("keep must be at least 1: the newest snapshot always stays")
        snap = session_snapshots.c
        ranked = (
            select(
                snap.session_id,
                snap.seq,
                func.row_number()
                .over(partition_by=snap.session_id, order_by=snap.seq.desc())
                .label("rank"),
            )
            .where(snap.tenant_id == tenant_id)
            .subquery()
        )
        doomed = select(ranked.c.session_id, ranked.c.seq).where(ranked.c.rank > keep)
        async with self.write(tenant_id) as conn:
            result = await conn.execute(
                delete(session_snapshots).where(
                    snap.tenant_id == tenant_id,
                    tuple_(snap.session_id, snap.seq).in_(doomed),
                )
            )
        return int(result.rowcount or 0)
