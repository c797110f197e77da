"""Webhook routes: subscriptions (create, list, get, patch, delete), the delivery log, and
redeliver. The delivering itself is `app.runtime.webhooks.delivery.Deliverer`'s, on every
replica; see docs/how-to/webhooks.md for receivers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from app.api.http.deps import IdempotencyKey, RuntimeDep, SettingsDep, TenantDep, WebhooksDep
from app.api.http.idempotency import idempotent, provisional
from app.api.http.pages import cut, decode_cursor
from app.api.http.problems import problem_responses
from app.api.rest.webhook_schemas import (
    DeliveryList,
    DeliveryRead,
    WebhookCreate,
    WebhookCreated,
    WebhookList,
    WebhookPatch,
    WebhookRead,
)
from app.runtime.errors import InvalidWebhook
from app.runtime.ports import IdempotencyToken
from app.runtime.webhooks.records import PENDING, DeliveryRecord, WebhookRecord

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

_COMMON = problem_responses(401, 404)
_REQUIRED_IF_SENT = ("url", "event_types", "state")


def webhook_json(hook: WebhookRecord, *, with_secret: bool = False) -> dict[str, Any]:
    """A subscription as the API shows it; the secret only in the creating answer."""
    body = {
        "webhook_id": hook.webhook_id,
        "url": hook.url,
        "event_types": hook.event_types,
        "session_id": hook.session_id,
        "metadata_filter": hook.metadata_filter,
        "description": hook.description,
        "state": hook.state,
        "disabled_reason": hook.disabled_reason,
        "consecutive_failures": hook.consecutive_failures,
        "last_success_at": _iso(hook.last_success_at),
        "last_failure_at": _iso(hook.last_failure_at),
        "created_at": _iso(hook.created_at),
        "updated_at": _iso(hook.updated_at),
    }
    if with_secret:
        body["secret"] = hook.secret
    return body


def delivery_json(d: DeliveryRecord) -> dict[str, Any]:
    return {
        "delivery_id": d.event_id,
        "webhook_id": d.webhook_id,
        "session_id": d.session_id,
        "seq": d.seq,
        "event_type": d.event_type,
        "status": d.status,
        "attempts": d.attempts,
        "next_attempt_at": _iso(d.next_attempt_at) if d.status == PENDING else None,
        "last_attempt_at": _iso(d.last_attempt_at),
        "last_error": d.last_error,
        "response_code": d.response_code,
        "delivered_at": _iso(d.delivered_at),
        "created_at": _iso(d.created_at),
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@router.post(
    "",
    status_code=201,
    response_model=WebhookCreated,
    summary="Subscribe a URL to event types (the answer shows the signing secret, once)",
    responses=problem_responses(401, 409, 422),
)
async def create_webhook(
    body: WebhookCreate,
    request: Request,
    tenant: TenantDep,
    webhooks: WebhooksDep,
    runtime: RuntimeDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Create an active subscription. Deliveries are signed the Standard Webhooks way with
    the `secret` in this answer, which no other answer shows: keep it. A retry with the same
    `Idempotency-Key` answers with the same subscription (and secret).
    """

    async def produce(token: IdempotencyToken | None) -> Response:
        hook = await webhooks.create(
            tenant.tenant_id,
            url=body.url,
            event_types=body.event_types,
            session_id=body.session_id,
            metadata_filter=body.metadata_filter,
            description=body.description,
            idempotency=token,
        )
        return _created(hook)

    async def replay(result: dict[str, Any]) -> Response:
        return _created(await webhooks.get(tenant.tenant_id, result["webhook_id"]))

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


def _created(hook: WebhookRecord) -> Response:
    response = JSONResponse(
        webhook_json(hook, with_secret=True),
        status_code=201,
        headers={"Location": f"/v1/webhooks/{hook.webhook_id}"},
    )
    # Not stored beside the Idempotency-Key: the secret stays in one table only, and a
    # replay renders the answer again from the subscription.
    return provisional(response)


@router.get(
    "",
    response_model=WebhookList,
    summary="List webhook subscriptions (newest first, keyset-paginated)",
    responses=problem_responses(401, 422),
)
async def list_webhooks(
    tenant: TenantDep,
    webhooks: WebhooksDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> dict:
    """The tenant's subscriptions with their state; pass `next_cursor` back as `cursor`."""
    page = min(limit, settings.page_limit_max)
    after = decode_cursor(cursor)
    rows = await webhooks.list(tenant.tenant_id, limit=page + 1, after=after)
    rows, next_cursor = cut(rows, page, lambda r: (r.created_at, r.webhook_id))
    return {"data": [webhook_json(r) for r in rows], "next_cursor": next_cursor}


@router.get(
    "/{webhook_id}",
    response_model=WebhookRead,
    summary="A webhook subscription and its state",
    responses=_COMMON,
)
async def get_webhook(webhook_id: str, tenant: TenantDep, webhooks: WebhooksDep) -> dict:
    """The subscription: filters, state (`disabled_reason` says why it is off) and health."""
    return webhook_json(await webhooks.get(tenant.tenant_id, webhook_id))


@router.patch(
    "/{webhook_id}",
    response_model=WebhookRead,
    summary="Change a subscription's URL, filters or state (disable, enable again)",
    responses=problem_responses(401, 404, 422),
)
async def patch_webhook(
    webhook_id: str, body: WebhookPatch, tenant: TenantDep, webhooks: WebhooksDep
) -> dict:
    """Change what is sent; `null` clears `session_id`, `metadata_filter` or `description`.
    `state: active` turns a disabled subscription on again; pending deliveries then resume.
    """
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    for name in _REQUIRED_IF_SENT:
        if name in changes and changes[name] is None:
            raise InvalidWebhook(f"{name} cannot be null")
    return webhook_json(await webhooks.update(tenant.tenant_id, webhook_id, changes))


@router.delete(
    "/{webhook_id}",
    status_code=204,
    summary="Delete a subscription and its delivery log",
    responses=_COMMON,
)
async def delete_webhook(webhook_id: str, tenant: TenantDep, webhooks: WebhooksDep) -> Response:
    """Delete the subscription and its delivery log; its pending deliveries are dropped."""
    await webhooks.delete(tenant.tenant_id, webhook_id)
    return Response(status_code=204)


@router.get(
    "/{webhook_id}/deliveries",
    response_model=DeliveryList,
    summary="The subscription's delivery log (newest first, keyset-paginated)",
    responses=problem_responses(401, 404, 422),
)
async def list_webhook_deliveries(
    webhook_id: str,
    tenant: TenantDep,
    webhooks: WebhooksDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    status: Annotated[str | None, Query(pattern="^(pending|delivered|failed)$")] = None,
) -> dict:
    """One row per matching event: status, attempts, last error and response code."""
    page = min(limit, settings.page_limit_max)
    after = decode_cursor(cursor)
    rows = await webhooks.deliveries(
        tenant.tenant_id, webhook_id, limit=page + 1, after=after, status=status
    )
    rows, next_cursor = cut(rows, page, lambda d: (d.created_at, d.event_id))
    return {"data": [delivery_json(r) for r in rows], "next_cursor": next_cursor}


@router.get(
    "/{webhook_id}/deliveries/{delivery_id}",
    response_model=DeliveryRead,
    summary="One delivery: status, attempts, last error, response code",
    responses=_COMMON,
)
async def get_webhook_delivery(
    webhook_id: str, delivery_id: str, tenant: TenantDep, webhooks: WebhooksDep
) -> dict:
    """One delivery (its id is the event's, and the `webhook-id` header): status, attempts,
    when it is next due, the last error and response code."""
    return delivery_json(await webhooks.delivery(tenant.tenant_id, webhook_id, delivery_id))


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=DeliveryRead,
    summary="Send a delivery again (pending, due now, a fresh round of retries)",
    responses=_COMMON,
)
async def redeliver_webhook_delivery(
    webhook_id: str, delivery_id: str, tenant: TenantDep, webhooks: WebhooksDep
) -> Response:
    """Queue the delivery again; it keeps its place in its session's order and its
    `webhook-id`, so a receiver that deduplicates should drop its id before asking."""
    found = await webhooks.redeliver(tenant.tenant_id, webhook_id, delivery_id)
    return JSONResponse(delivery_json(found), status_code=202)
