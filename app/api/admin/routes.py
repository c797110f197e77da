"""Operators' routes: erase a tenant, list a tenant's erasure receipts, a tenant's
retention policy, and a retention pass on demand (or its dry run).

A tenant erases its own sessions with `DELETE /v1/sessions/{id}`; erasing a whole tenant, and
reading the receipts (which outlive the tenant), is the operator's.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from app.api.admin.schemas import (
    ErasureReceiptList,
    ErasureReceiptRead,
    RetentionPassRead,
    RetentionPolicyRead,
    RetentionPolicyWrite,
)
from app.api.http.deps import EraserDep, OperatorDep, RetentionDep
from app.api.http.problems import problem_responses
from app.api.http.views import rfc3339
from app.runtime.ports import ErasureReceipt, TenantRetention
from app.runtime.session.retention import RetentionReport

router = APIRouter(prefix="/v1/admin", tags=["admin"])

_ADMIN = problem_responses(401, 404, 422)
TenantId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


def receipt_view(receipt: ErasureReceipt) -> dict[str, Any]:
    return {
        "receipt_id": receipt.receipt_id,
        "tenant_id": receipt.tenant_id,
        "scope": receipt.scope,
        "session_id": receipt.session_id,
        "requested_by": receipt.requested_by,
        "erased_at": rfc3339(receipt.erased_at),
        "counts": receipt.counts,
    }


@router.delete(
    "/tenants/{tenant_id}",
    response_model=ErasureReceiptRead,
    summary="Erase a tenant: every session, key, subscription, schedule and file",
    responses=_ADMIN,
)
async def erase_tenant(
    tenant_id: TenantId,
    eraser: EraserDep,
    operator: OperatorDep,
    requested_by: Annotated[
        str | None,
        Query(max_length=100, description="Who asked for it (a ticket, a name); no content."),
    ] = None,
) -> dict[str, Any]:
    """Erase every row the tenant has in every table (its sessions with their events,
    snapshots, runs, Idempotency-Keys, webhook subscriptions and deliveries, schedules,
    keys, and the tenant itself), stop its processes and remove its workspace folder, and
    drop its cached state on every replica. Answers the receipt, which is all that stays.
    """
    who = f"{operator}:{requested_by}" if requested_by else operator
    return receipt_view(await eraser.erase_tenant(tenant_id, requested_by=who))


@router.get(
    "/tenants/{tenant_id}/erasures",
    response_model=ErasureReceiptList,
    summary="List a tenant's erasure receipts, newest first",
    responses=_ADMIN,
)
async def list_erasures(
    tenant_id: TenantId,
    eraser: EraserDep,
    operator: OperatorDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=100, pattern=r"^er_[0-9a-f_]+$")] = None,
) -> dict[str, Any]:
    """The receipts of every erasure of the tenant's sessions, and of the tenant itself,
    newest first: who asked, when, and how many rows and files went. They hold no content
    and are kept when the tenant is erased.
    """
    receipts = await eraser.list_receipts(tenant_id, limit=limit + 1, before=cursor)
    page = receipts[:limit]
    more = len(receipts) > limit
    return {
        "data": [receipt_view(r) for r in page],
        "next_cursor": page[-1].receipt_id if more else None,
    }


def policy_view(tenant_id: str, policy: TenantRetention, stored: bool) -> dict[str, Any]:
    return {
        "tenant_id": tenant_id,
        "idle_days": policy.idle_days,
        "prune": policy.prune,
        "prune_min_events": policy.prune_min_events,
        "stored": stored,
        "updated_at": rfc3339(policy.updated_at) if policy.updated_at else None,
    }


def pass_view(report: RetentionReport) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "sessions_deleted": [{"tenant_id": t, "session_id": s} for t, s in report.sessions_erased],
        "sessions_pruned": [
            {
                "tenant_id": t,
                "session_id": o.session_id,
                "cut_seq": o.cut_seq,
                "events_removed": o.events_removed,
                "snapshots_removed": o.snapshots_removed,
            }
            for t, o in report.sessions_pruned
        ],
        "events_pruned": report.events_pruned,
        "snapshots_deleted": report.snapshots_deleted,
        "deliveries_deleted": report.deliveries_deleted,
    }


@router.get(
    "/tenants/{tenant_id}/retention",
    response_model=RetentionPolicyRead,
    summary="Read a tenant's retention policy",
    responses=_ADMIN,
)
async def get_retention_policy(
    tenant_id: TenantId, retention: RetentionDep, operator: OperatorDep
) -> dict[str, Any]:
    """The tenant's policy: its own (`stored: true`), or the service's defaults."""
    policy, stored = await retention.policy_of(tenant_id)
    return policy_view(tenant_id, policy, stored)


@router.put(
    "/tenants/{tenant_id}/retention",
    response_model=RetentionPolicyRead,
    summary="Set a tenant's retention policy",
    responses=_ADMIN,
)
async def put_retention_policy(
    tenant_id: TenantId,
    body: RetentionPolicyWrite,
    retention: RetentionDep,
    operator: OperatorDep,
) -> dict[str, Any]:
    """Store the tenant's policy whole: delete sessions idle past `idle_days`, and/or prune
    long ledgers. Every replica's next retention pass applies it (or run one now with
    `POST /v1/admin/tenants/{tenant_id}/retention/run`)."""
    stored = await retention.set_policy(
        tenant_id,
        TenantRetention(
            idle_days=body.idle_days, prune=body.prune, prune_min_events=body.prune_min_events
        ),
    )
    return policy_view(tenant_id, stored, True)


@router.post(
    "/tenants/{tenant_id}/retention/run",
    response_model=RetentionPassRead,
    summary="Run a tenant's retention pass now, or a dry run that says what it would remove",
    responses=_ADMIN,
)
async def run_retention(
    tenant_id: TenantId,
    retention: RetentionDep,
    operator: OperatorDep,
    dry_run: Annotated[bool, Query(description="Remove nothing; list what would go.")] = True,
) -> dict[str, Any]:
    """The tenant's part of the retention pass every replica runs each
    `ASR_RETENTION_INTERVAL_SECONDS`: expired and idle sessions deleted, long ledgers
    pruned, old snapshots and settled webhook deliveries dropped. A dry run (the default)
    removes nothing and lists the sessions it would delete and prune. (`asr retention run`
    passes over every tenant.)"""
    return pass_view(await retention.run_once(dry_run=dry_run, tenant_ids=[tenant_id]))
