"""Retention: erase sessions idle for too long, and prune old snapshots.

The policy is numbers from settings (`ASR_RETENTION_IDLE_DAYS`,
`ASR_RETENTION_KEEP_SNAPSHOTS`, `ASR_RETENTION_WEBHOOK_LOG_DAYS`: settled webhook deliveries,
delivered or failed, are dropped from the delivery log after that many days, so the outbox
does not grow forever); `asr retention run` applies it once (run it from cron or a
Kubernetes CronJob). What it never does: remove an event on its own. Events go only with
their whole session, so every remaining snapshot, the newest above all, still has every
event after it, and a session's state can always be rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from app.runtime.ports import RetentionPort, TenantList

_PAGE = 500


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    idle_days: int | None
    keep_snapshots: int
    webhook_log_days: int | None = None

    def __post_init__(self) -> None:
        if self.idle_days is not None and self.idle_days < 1:
            raise ValueError("idle_days must be at least 1")
        if self.keep_snapshots < 1:
            raise ValueError("keep_snapshots must be at least 1")


@dataclass(slots=True)
class RetentionReport:
    """What one pass erased (or, in a dry run, would erase)."""

    sessions_erased: list[tuple[str, str]] = field(default_factory=list)  # (tenant, session)
    snapshots_deleted: int = 0
    deliveries_deleted: int = 0
    dry_run: bool = False


async def apply_retention(
    store: RetentionPort,
    policy: RetentionPolicy,
    *,
    tenants: TenantList,
    now: datetime | None = None,
    dry_run: bool = False,
    tenant_ids: list[str] | None = None,
) -> RetentionReport:
    """One retention pass over every tenant (or only `tenant_ids`).

    In a dry run nothing is deleted; `sessions_erased` lists what would be, and snapshots
    are not counted.
    """
    report = RetentionReport(dry_run=dry_run)
    cutoff = None
    if policy.idle_days is not None:
        cutoff = (now or datetime.now(UTC)) - timedelta(days=policy.idle_days)
    if tenant_ids is None:
        tenant_ids = [t.tenant_id for t in await tenants.list_tenants()]
    for tenant_id in tenant_ids:
        if cutoff is not None:
            await _erase_idle(store, tenant_id, cutoff, report)
        if not dry_run:
            report.snapshots_deleted += await store.delete_old_snapshots(
                tenant_id, keep=policy.keep_snapshots
            )
        if not dry_run and policy.webhook_log_days is not None:
            before = (now or datetime.now(UTC)) - timedelta(days=policy.webhook_log_days)
            report.deliveries_deleted += await store.delete_settled_deliveries(
                tenant_id, before=before
            )
    return report


async def _erase_idle(
    store: RetentionPort, tenant_id: str, cutoff: datetime, report: RetentionReport
) -> None:
    seen: set[str] = set()
    while True:
        page = await store.list_idle_sessions(tenant_id, updated_before=cutoff, limit=_PAGE)
        fresh = [s for s in page if s.session_id not in seen]
        if not fresh:
            return
        for session in fresh:
            seen.add(session.session_id)
            if report.dry_run or await store.delete_idle_session(
                tenant_id, session.session_id, updated_before=cutoff
            ):
                report.sessions_erased.append((tenant_id, session.session_id))
        if len(page) < _PAGE:
            return
