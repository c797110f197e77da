"""Operator-side queries: retention policies, the sessions a pass deletes or prunes (each
re-checked under its row lock), old snapshots, settled deliveries.

Like everything in the store these are tenant-scoped; retention walks the tenants one by one
rather than running one query across all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, or_, select, text, tuple_, update
from sqlalchemy.exc import DBAPIError

from app.runtime.ports import RunRecord, SessionRecord, TenantRetention
from app.runtime.webhooks.records import PENDING
from app.store.base import NO_TENANT, Database, as_utc, session_from_row, utcnow
from app.store.cross_tenant import CrossTenantStore
from app.store.erasure import ErasureStore
from app.store.tables import (
    retention_policies,
    session_events,
    session_snapshots,
    sessions,
    tenants,
    webhook_deliveries,
)


class MaintenanceStore:
    """Retention support (which sessions are idle, removing what a policy allows), the
    sweeps that span tenants (stale runs, expired keys), and the database's health."""

    def __init__(self, db: Database, cross: CrossTenantStore, erasure: ErasureStore) -> None:
        self.db = db
        self._cross = cross
        self._erasure = erasure

    async def ping(self) -> None:
        """Round trip to the database (readiness)."""
        async with self.db.read(NO_TENANT) as conn:
            await conn.execute(text("SELECT 1"))

    async def get_schema_revision(self) -> str | None:
        """The Alembic revision the database is at; None when it was never migrated.

        Raises whatever the driver raises when the database is unreachable (readiness turns
        that into a reason).
        """
        async with self.db.read(NO_TENANT) as conn:
            try:
                async with conn.begin_nested():
                    result = await conn.execute(text("SELECT version_num FROM alembic_version"))
                    row = result.first()
            except DBAPIError as exc:
                if exc.connection_invalidated:
                    raise
                # No alembic_version table yet. The savepoint keeps PostgreSQL's transaction
                # usable after the error.
                return None
        return row[0] if row is not None else None

    async def list_stale_runs(self, *, limit: int = 100) -> list[RunRecord]:
        """Live runs whose lease expired, and interrupted runs still holding their session
        (every tenant's: the sweeper's housekeeping)."""
        return await self._cross.list_stale_runs(limit=limit)

    async def delete_expired_idempotency_keys(self) -> int:
        """Delete every tenant's expired Idempotency-Key rows; returns how many."""
        return await self._cross.delete_expired_idempotency_keys()

    async def delete_old_snapshots(self, tenant_id: str, *, keep: int) -> int:
        """Delete all but the `keep` newest snapshots of every session of the tenant.

        Events are never touched: whatever a removed snapshot covered is still in the ledger,
        the newest snapshot of each session always stays, and so does the one a pruned
        ledger's HISTORY_PRUNED marker stands on. Returns the rows deleted.
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
        ev = session_events.c
        # The snapshot at a pruned ledger's marker is the base its fold starts from: it stays.
        marker = (
            select(ev.seq)
            .where(
                ev.tenant_id == tenant_id,
                ev.session_id == ranked.c.session_id,
                ev.seq == ranked.c.seq,
                ev.type == "HISTORY_PRUNED",
            )
            .exists()
        )
        doomed = select(ranked.c.session_id, ranked.c.seq).where(ranked.c.rank > keep, ~marker)
        async with self.db.write(tenant_id) as conn:
            result = await conn.execute(
                delete(session_snapshots).where(
                    snap.tenant_id == tenant_id,
                    tuple_(snap.session_id, snap.seq).in_(doomed),
                )
            )
        return int(result.rowcount or 0)

    async def delete_settled_deliveries(self, tenant_id: str, *, before: datetime) -> int:
        """Drop delivered and failed deliveries created before `before` from the log
        (retention); pending ones always stay. Returns how many went."""
        stmt = delete(webhook_deliveries).where(
            webhook_deliveries.c.tenant_id == tenant_id,
            webhook_deliveries.c.status != PENDING,
            webhook_deliveries.c.created_at < before,
        )
        async with self.db.write(tenant_id) as conn:
            return int((await conn.execute(stmt)).rowcount or 0)

    # ------------------------------------------------------- policies as data

    async def get_tenant_policy(self, tenant_id: str) -> TenantRetention | None:
        """The tenant's stored policy, or None (the settings' defaults then apply)."""
        async with self.db.read(tenant_id) as conn:
            row = (
                await conn.execute(
                    select(retention_policies).where(retention_policies.c.tenant_id == tenant_id)
                )
            ).first()
        if row is None:
            return None
        m = row._mapping
        return TenantRetention(
            idle_days=m["idle_days"],
            prune=bool(m["prune"]),
            prune_min_events=int(m["prune_min_events"]),
            updated_at=as_utc(m["updated_at"]),
        )

    async def put_tenant_policy(
        self, tenant_id: str, policy: TenantRetention
    ) -> TenantRetention | None:
        """Store the tenant's policy whole (an upsert: one row per tenant); None when there
        is no such tenant."""
        now = utcnow()
        values = {
            "idle_days": policy.idle_days,
            "prune": policy.prune,
            "prune_min_events": policy.prune_min_events,
            "updated_at": now,
        }
        async with self.db.write(tenant_id) as conn:
            found = await conn.execute(
                select(tenants.c.tenant_id).where(tenants.c.tenant_id == tenant_id)
            )
            if found.first() is None:
                return None
            await conn.execute(
                self.db.insert(retention_policies)
                .values(tenant_id=tenant_id, **values)
                .on_conflict_do_update(index_elements=["tenant_id"], set_=values)
            )
        return TenantRetention(
            idle_days=policy.idle_days,
            prune=policy.prune,
            prune_min_events=policy.prune_min_events,
            updated_at=now,
        )

    async def set_session_retention(
        self, tenant_id: str, session_id: str, *, changes: dict[str, Any]
    ) -> SessionRecord | None:
        """Set the session's own `expires_at` and/or `idle_ttl_seconds` (the keys of
        `changes`; None clears one); the row as it is now, or None when there is no such
        session. `updated_at` is left alone: setting a policy is not activity."""
        allowed = {"expires_at", "idle_ttl_seconds"}
        if not changes.keys() <= allowed:
            raise ValueError(f"only {sorted(allowed)} can be set")
        key = (sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id)
        async with self.db.write(tenant_id) as conn:
            if changes:
                await conn.execute(update(sessions).where(*key).values(**changes))
            row = (await conn.execute(select(sessions).where(*key))).first()
        return session_from_row(row) if row is not None else None

    async def list_retention_candidates(
        self,
        tenant_id: str,
        *,
        now: datetime,
        idle_before: datetime | None,
        after: str | None,
        limit: int,
    ) -> list[SessionRecord]:
        """Sessions with no active run that may be due for deletion, by id: expired ones,
        those idle since before `idle_before` that have no TTL of their own, and every one
        that has a TTL of its own (the caller checks it). `after`: the last id of the page
        before."""
        s = sessions.c
        due = [s.expires_at <= now, s.idle_ttl_seconds.is_not(None)]
        if idle_before is not None:
            due.append(s.idle_ttl_seconds.is_(None) & (s.updated_at < idle_before))
        stmt = select(sessions).where(
            s.tenant_id == tenant_id, s.active_run_id.is_(None), or_(*due)
        )
        if after is not None:
            stmt = stmt.where(s.session_id > after)
        stmt = stmt.order_by(s.session_id).limit(limit)
        async with self.db.read(tenant_id) as conn:
            rows = (await conn.execute(stmt)).all()
        return [session_from_row(r) for r in rows]

    async def delete_due_session(
        self, tenant_id: str, session_id: str, *, due: Callable[[SessionRecord], bool]
    ) -> bool:
        """Erase the session if it is still `due` as its locked row says, with no active
        run: its rows and every row that names it (`ErasureStore.delete_session_rows`).

        The row is locked without waiting (FOR UPDATE SKIP LOCKED on PostgreSQL; SQLite has
        a single writer): a row another replica's pass holds is skipped, and once that pass
        committed the row is gone, so a session is deleted once. A write after the listing
        moves `updated_at` and is seen here. Returns whether this call erased it.
        """
        key = (sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id)
        async with self.db.write(tenant_id) as conn:
            row = (
                await conn.execute(select(sessions).where(*key).with_for_update(skip_locked=True))
            ).first()
            if row is None:
                return False
            record = session_from_row(row)
            if record.active_run_id is not None or not due(record):
                return False
            await self._erasure.delete_session_rows(conn, tenant_id, session_id)
        return True

    async def list_prunable_sessions(
        self, tenant_id: str, *, min_last_seq: int, after: str | None, limit: int
    ) -> list[str]:
        """Ids of sessions whose ledger is at least `min_last_seq` long, by id (`after`: the
        last id of the page before); whether one can be pruned is for the prune to say."""
        s = sessions.c
        stmt = select(s.session_id).where(s.tenant_id == tenant_id, s.last_seq >= min_last_seq)
        if after is not None:
            stmt = stmt.where(s.session_id > after)
        async with self.db.read(tenant_id) as conn:
            rows = (await conn.execute(stmt.order_by(s.session_id).limit(limit))).all()
        return [r[0] for r in rows]
