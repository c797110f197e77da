"""Operators' routes: erase a tenant, list a tenant's erasure receipts.

A tenant erases its own sessions with `DELETE /v1/sessions/{id}`; erasing a whole tenant, and
reading the receipts (which outlive the tenant), is the operator's.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from app.api.admin.schemas import ErasureReceiptList, ErasureReceiptRead
from app.api.http.deps import EraserDep, OperatorDep
from app.api.http.problems import problem_responses
from app.api.http.views import rfc3339
from app.runtime.ports import ErasureReceipt

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
