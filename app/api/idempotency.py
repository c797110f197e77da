"""`Idempotency-Key` on mutating POSTs: claim, run once, store, replay.

The same key and body return the stored status and body byte for byte, with
`Idempotent-Replayed: true`; the same key with another body is 422; a duplicate that arrives
while the first is still running is 409. Keys are scoped to the tenant.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable

from fastapi import Request, Response

from app.runtime.accounts import Principal
from app.runtime.service import SessionRuntime

_KEPT_HEADERS = ("content-type", "location", "etag")


async def request_fingerprint(request: Request) -> str:
    body = await request.body()
    digest = hashlib.sha256()
    for part in (request.method.encode(), request.url.path.encode(), request.url.query.encode()):
        digest.update(part + b"\0")
    digest.update(body)
    return digest.hexdigest()


async def idempotent(
    request: Request,
    runtime: SessionRuntime,
    tenant: Principal,
    key: str | None,
    produce: Callable[[], Awaitable[Response]],
) -> Response:
    """Run `produce` at most once per (tenant, key) and replay its response afterwards."""
    if key is None:
        return await produce()
    fingerprint = await request_fingerprint(request)
    claim = await runtime.claim_idempotency(tenant.tenant_id, key, request_hash=fingerprint)
    if not claim.claimed:
        headers = dict(claim.headers or {})
        headers["Idempotent-Replayed"] = "true"
        return Response(
            content=claim.response or b"", status_code=claim.status_code or 200, headers=headers
        )
    try:
        response = await produce()
    except BaseException:
        # The work failed atomically (one transaction): nothing to replay, so let a retry run.
        await runtime.release_idempotency(tenant.tenant_id, key)
        raise
    kept = {k: v for k, v in response.headers.items() if k.lower() in _KEPT_HEADERS}
    await runtime.complete_idempotency(
        tenant.tenant_id,
        key,
        status_code=response.status_code,
        response=bytes(response.body),
        headers=kept,
    )
    return response
