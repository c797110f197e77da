"""`Idempotency-Key` on mutating requests: the work runs at most once, its answer is replayed.

The key is recorded by the write it guards, in that write's transaction (see
`app/store/idempotency.py`), so a retry after any fault either finds the key committed with
the work, or finds neither. Here:

1. a key already recorded is answered from the record: its stored response byte for byte,
   or, when the first attempt never got to store one (it died or lost its reply after the
   commit), a response rendered again from what the write committed (`replay`), which is
   then stored so that every later replay is the same;
2. otherwise the work runs with the key (`produce(token)`); a duplicate that committed in the
   meantime makes the write roll back (`IdempotentReplay`) or refuse (say, `run_in_progress`
   because the first attempt's run holds the session), and the request is answered as a
   replay of the duplicate instead.

The same key with another request (method, path, query, body) is 422. Every replay carries
`Idempotent-Replayed: true`. Keys are scoped to the tenant.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request, Response

from app.runtime.access.accounts import Principal
from app.runtime.errors import AgentSessionError, IdempotentReplay
from app.runtime.ports import IdempotencyRecord, IdempotencyToken
from app.runtime.session.service import SessionRuntime

log = logging.getLogger("app.idempotency")

_KEPT_HEADERS = ("content-type", "location", "etag")
REPLAYED = "Idempotent-Replayed"

Produce = Callable[[IdempotencyToken | None], Awaitable[Response]]
Replay = Callable[[dict[str, Any]], Awaitable[Response]]


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
    produce: Produce,
    replay: Replay,
) -> Response:
    """Answer with `produce(token)` at most once per (tenant, key); with `replay(result)` of
    the recorded write afterwards (see the module docstring)."""
    if key is None:
        return await produce(None)
    token = IdempotencyToken(key=key, request_hash=await request_fingerprint(request))
    found = await runtime.find_idempotent(tenant.tenant_id, token)
    if found is None:
        try:
            response = await produce(token)
        except IdempotentReplay:
            found = await runtime.find_idempotent(tenant.tenant_id, token)
            if found is None:  # expired in between: vanishingly rare, and safe to refuse
                raise
        except AgentSessionError:
            # Refused (e.g. run_in_progress): by a duplicate that committed meanwhile?
            found = await runtime.find_idempotent(tenant.tenant_id, token)
            if found is None:
                raise
        else:
            await _keep(runtime, tenant.tenant_id, token, response)
            return response
    return await _replayed(runtime, tenant.tenant_id, token, found, replay)


async def _replayed(
    runtime: SessionRuntime,
    tenant_id: str,
    token: IdempotencyToken,
    found: IdempotencyRecord,
    replay: Replay,
) -> Response:
    if found.response is not None:
        headers = dict(found.headers or {})
        headers[REPLAYED] = "true"
        return Response(
            content=found.response, status_code=found.status_code or 200, headers=headers
        )
    response = await replay(found.result)
    await _keep(runtime, tenant_id, token, response)
    response.headers[REPLAYED] = "true"
    return response


def provisional(response: Response) -> Response:
    """Mark an answer that is not the request's final one (a wait that ended before its run
    did): it is sent, but not stored for replays, which render the answer again."""
    response.asr_provisional = True  # type: ignore[attr-defined]
    return response


async def _keep(
    runtime: SessionRuntime, tenant_id: str, token: IdempotencyToken, response: Response
) -> None:
    """Store a rendered answer beside its key, when it is one that can be stored (a stream
    cannot: its replay streams the run again). Best effort: the key and the work are already
    committed, so a failure here only means the next replay renders the answer again."""
    body = getattr(response, "body", None)
    if not isinstance(body, bytes) or response.status_code >= 500:
        return
    if getattr(response, "asr_provisional", False):
        return
    kept = {k: v for k, v in response.headers.items() if k.lower() in _KEPT_HEADERS}
    try:
        await runtime.keep_idempotent_response(
            tenant_id, token, status_code=response.status_code, response=body, headers=kept
        )
    except Exception as exc:
        log.warning("could not store the response of an idempotent request: %s", exc)
