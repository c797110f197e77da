"""Retention: delete sessions that expired or sat idle too long, prune long ledgers, and
drop old snapshots and settled webhook deliveries.

What a pass applies, per tenant:
- the tenant's policy as data (`TenantRetention`, `retention_policies`, set through the
  operators' API or `asr retention set`): delete sessions idle for more than `idle_days`,
  and prune ledgers (`app.runtime.session.pruning`) when `prune` is on. A tenant with no
  stored policy gets the settings' `ASR_RETENTION_IDLE_DAYS` and no pruning.
- each session's own overrides: `expires_at` (deleted at that time, whatever the tenant
  says) and `idle_ttl_seconds` (its idle TTL instead of the tenant's `idle_days`).
- the settings' numbers for the rest: keep `ASR_RETENTION_KEEP_SNAPSHOTS` newest snapshots
  per session (the one a pruned ledger's marker stands on always stays), drop settled
  webhook deliveries after `ASR_RETENTION_WEBHOOK_LOG_DAYS`.

Every replica runs a pass every `ASR_RETENTION_INTERVAL_SECONDS` (`Retention`), and
`asr retention run` runs one on demand. Passes on several replicas at once are safe: a
session is deleted or pruned under its row's lock, taken without waiting, after the
condition is checked again on the locked row, so each session is deleted once and pruned
once (a second prune at the same point finds nothing to do), and metrics count only what
this replica did. A session with an active run is never deleted, and a prune never
reaches what an active run or a pending call needs.

A dry run deletes and prunes nothing and lists what would go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from app.runtime.errors import InvalidRequest, SessionNotFound, TenantNotFound
from app.runtime.observer import NullObserver, Observer
from app.runtime.ports import (
    PruneOutcome,
    RetentionPort,
    SessionRecord,
    TenantList,
    TenantRetention,
)

log = logging.getLogger("app.retention")

_PAGE = 500


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """The settings' numbers: the defaults of tenants with no policy of their own, and the
    snapshot and delivery-log housekeeping every pass does."""

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
    """What one pass erased and pruned (or, in a dry run, would)."""

    sessions_erased: list[tuple[str, str]] = field(default_factory=list)  # (tenant, session)
    sessions_pruned: list[tuple[str, PruneOutcome]] = field(default_factory=list)
    events_pruned: int = 0
    snapshots_deleted: int = 0
    deliveries_deleted: int = 0
    dry_run: bool = False


class Pruner(Protocol):
    """What a pass prunes with (`SessionRuntime.prune`)."""

    async def prune(
        self, tenant_id: str, session_id: str, *, min_events: int = 1, dry_run: bool = False
    ) -> PruneOutcome: ...


def is_due(record: SessionRecord, *, now: datetime, idle_days: int | None) -> bool:
    """Whether the session is to be deleted now: expired, or idle past its own TTL (or,
    without one, past the tenant's `idle_days`)."""
    if record.expires_at is not None and record.expires_at <= now:
        return True
    ttl = record.idle_ttl_seconds
    if ttl is None and idle_days is not None:
        ttl = idle_days * 86_400
    return ttl is not None and record.updated_at < now - timedelta(seconds=ttl)


async def effective_policy(
    store: RetentionPort, tenant_id: str, defaults: RetentionPolicy
) -> TenantRetention:
    """The tenant's stored policy, or the settings' idle days without pruning."""
    stored = await store.get_tenant_policy(tenant_id)
    return stored if stored is not None else TenantRetention(idle_days=defaults.idle_days)


async def apply_retention(
    store: RetentionPort,
    policy: RetentionPolicy,
    *,
    tenants: TenantList,
    now: datetime | None = None,
    dry_run: bool = False,
    tenant_ids: list[str] | None = None,
    pruner: Pruner | None = None,
    observer: Observer | None = None,
) -> RetentionReport:
    """One retention pass over every tenant (or only `tenant_ids`); prunes only with a
    `pruner`. In a dry run nothing is deleted; `sessions_erased` and `sessions_pruned` say
    what would be, and snapshots and deliveries are not counted."""
    report = RetentionReport(dry_run=dry_run)
    moment = now or datetime.now(UTC)
    if tenant_ids is None:
        tenant_ids = [t.tenant_id for t in await tenants.list_tenants()]
    for tenant_id in tenant_ids:
        tenant_policy = await effective_policy(store, tenant_id, policy)
        await _erase_due(store, tenant_id, moment, tenant_policy.idle_days, report)
        if pruner is not None and tenant_policy.prune:
            await _prune(store, pruner, tenant_id, tenant_policy.prune_min_events, report)
        if not dry_run:
            report.snapshots_deleted += await store.delete_old_snapshots(
                tenant_id, keep=policy.keep_snapshots
            )
        if not dry_run and policy.webhook_log_days is not None:
            before = moment - timedelta(days=policy.webhook_log_days)
            report.deliveries_deleted += await store.delete_settled_deliveries(
                tenant_id, before=before
            )
    if not dry_run:
        (observer or NullObserver()).retention_applied(
            sessions_deleted=len(report.sessions_erased),
            sessions_pruned=len(report.sessions_pruned),
            events_pruned=report.events_pruned,
        )
    return report


async def _erase_due(
    store: RetentionPort,
    tenant_id: str,
    now: datetime,
    idle_days: int | None,
    report: RetentionReport,
) -> None:
    idle_before = now - timedelta(days=idle_days) if idle_days is not None else None

    def due(record: SessionRecord) -> bool:
        return is_due(record, now=now, idle_days=idle_days)

    after: str | None = None
    while True:
        page = await store.list_retention_candidates(
            tenant_id, now=now, idle_before=idle_before, after=after, limit=_PAGE
        )
        for session in page:
            if not due(session):
                continue
            if report.dry_run or await store.delete_due_session(
                tenant_id, session.session_id, due=due
            ):
                report.sessions_erased.append((tenant_id, session.session_id))
        if len(page) < _PAGE:
            return
        after = page[-1].session_id


async def _prune(
    store: RetentionPort,
    pruner: Pruner,
    tenant_id: str,
    min_events: int,
    report: RetentionReport,
) -> None:
    erased = {sid for tenant, sid in report.sessions_erased if tenant == tenant_id}
    after: str | None = None
    while True:
        page = await store.list_prunable_sessions(
            tenant_id, min_last_seq=min_events + 1, after=after, limit=_PAGE
        )
        for session_id in page:
            if session_id in erased:
                continue
            outcome = await pruner.prune(
                tenant_id, session_id, min_events=min_events, dry_run=report.dry_run
            )
            if outcome.cut_seq is not None:
                report.sessions_pruned.append((tenant_id, outcome))
                report.events_pruned += outcome.events_removed
        if len(page) < _PAGE:
            return
        after = page[-1]


class Retention:
    """The retention verbs: tenants' policies and sessions' overrides as data, a pass on
    demand (`run_once`, dry or not), and a pass every `interval` seconds on this replica
    once started (the first after one interval, with a little jitter so replicas started
    together do not pass in step)."""

    def __init__(
        self,
        store: RetentionPort,
        policy: RetentionPolicy,
        *,
        tenants: TenantList,
        pruner: Pruner,
        interval: float,
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.tenants = tenants
        self.pruner = pruner
        self.interval = interval
        self.observer = observer or NullObserver()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="retention")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run_once(
        self, *, dry_run: bool = False, tenant_ids: list[str] | None = None
    ) -> RetentionReport:
        """One pass now (what the loop does each interval), over every tenant or some."""
        return await apply_retention(
            self.store,
            self.policy,
            tenants=self.tenants,
            dry_run=dry_run,
            tenant_ids=tenant_ids,
            pruner=self.pruner,
            observer=self.observer,
        )

    async def policy_of(self, tenant_id: str) -> tuple[TenantRetention, bool]:
        """(the tenant's effective policy, whether it is stored rather than the defaults)."""
        stored = await self.store.get_tenant_policy(tenant_id)
        if stored is not None:
            return stored, True
        return TenantRetention(idle_days=self.policy.idle_days), False

    async def set_policy(self, tenant_id: str, policy: TenantRetention) -> TenantRetention:
        """Store the tenant's policy whole.

        Raises:
            TenantNotFound.
        """
        if policy.idle_days is not None and policy.idle_days < 1:
            raise InvalidRequest("idle_days must be at least 1")
        if policy.prune_min_events < 1:
            raise InvalidRequest("prune_min_events must be at least 1")
        stored = await self.store.put_tenant_policy(tenant_id, policy)
        if stored is None:
            raise TenantNotFound(tenant_id)
        return stored

    async def set_session_retention(
        self, tenant_id: str, session_id: str, changes: dict[str, Any]
    ) -> SessionRecord:
        """Set the session's own `expires_at` and/or `idle_ttl_seconds` (the keys given;
        None clears one).

        Raises:
            SessionNotFound.
        """
        record = await self.store.set_session_retention(tenant_id, session_id, changes=changes)
        if record is None:
            raise SessionNotFound(session_id)
        return record

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval * random.uniform(0.9, 1.1))
            try:
                report = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("retention pass failed; the next one retries")
                continue
            if report.sessions_erased or report.sessions_pruned:
                log.info(
                    "retention pass: %d sessions deleted, %d pruned (%d events)",
                    len(report.sessions_erased),
                    len(report.sessions_pruned),
                    report.events_pruned,
                )
