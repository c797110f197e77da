"""Shared state routes: read, patch (JSON Patch, RFC 6902) and replace the JSON object a
session shares with its frontend (and its model, through the `update_state` tool).

The resource is the object itself: `GET` returns it bare, `PATCH` takes a JSON Patch of it
(`application/json-patch+json`, or plain `application/json`) and `PUT` replaces it. Its ETag
is the session version, for `If-Match` like the other session writes. Each change is one
ledger event (STATE_SET, STATE_PATCHED), so it is in the timeline, forks and exports.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse

from app.api.http.deps import IdempotencyKey, IfMatch, RuntimeDep, TenantDep
from app.api.http.idempotency import idempotent
from app.api.http.problems import problem_responses
from app.api.rest.schemas import JsonPatchOperation
from app.api.rest.sessions import _etag, _if_match
from app.runtime.ports import IdempotencyToken
from app.runtime.session.service import Loaded

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

_STATE_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The shared state (a JSON object); ETag = the session version.",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}
_PATCH_MEDIA = "application/json-patch+json"
PatchBody = Annotated[
    list[JsonPatchOperation],
    Body(description="A JSON Patch (RFC 6902): operations applied in order, all or none."),
]
StateBody = Annotated[dict[str, Any], Body(description="The new shared state, whole.")]


def _state(loaded: Loaded) -> Response:
    return JSONResponse(loaded.state.shared_state, headers={"ETag": _etag(loaded.session.version)})


@router.get(
    "/{session_id}/shared-state",
    summary="The session's shared state (the object AG-UI calls `state`)",
    response_class=Response,
    responses={**_STATE_DOC, **problem_responses(401, 404, 422)},
)
async def get_shared_state(session_id: str, tenant: TenantDep, runtime: RuntimeDep) -> Response:
    """The JSON object the session shares with its frontend: what an AG-UI run's
    STATE_SNAPSHOT and STATE_DELTAs build on the client, and what the model sees and edits
    with `update_state`. `{}` until something sets it.
    """
    return _state(await runtime.load(tenant.tenant_id, session_id))


@router.patch(
    "/{session_id}/shared-state",
    summary="Change the shared state by a JSON Patch (RFC 6902)",
    response_class=Response,
    responses={**_STATE_DOC, **problem_responses(401, 404, 412, 413, 422)},
    openapi_extra={
        "requestBody": {
            "content": {
                _PATCH_MEDIA: {
                    "schema": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/JsonPatchOperation"},
                    }
                }
            }
        }
    },
)
async def patch_shared_state(
    session_id: str,
    body: PatchBody,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    if_match: IfMatch = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Apply a JSON Patch to the shared state (one STATE_PATCHED event) and return the new
    state. The patch is decided on the state as it is when written, so concurrent patches
    all apply, in some order; a patch that does not apply (a failing `test`, a missing path)
    is 422 `invalid_patch` and changes nothing. A state over `ASR_MAX_STATE_BYTES` is 413.
    With `If-Match`, only at that session version (else 412).
    """
    patch = [op.to_json() for op in body]

    async def produce(token: IdempotencyToken | None) -> Response:
        loaded = await runtime.patch_shared_state(
            tenant.tenant_id, session_id, patch, if_match=_if_match(if_match), idempotency=token
        )
        return _state(loaded)

    async def replay(result: dict) -> Response:
        return _state(await runtime.as_committed(tenant.tenant_id, result))

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


@router.put(
    "/{session_id}/shared-state",
    summary="Replace the shared state whole",
    response_class=Response,
    responses={**_STATE_DOC, **problem_responses(401, 404, 412, 413, 422)},
)
async def put_shared_state(
    session_id: str,
    body: StateBody,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    if_match: IfMatch = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Replace the shared state (one STATE_SET event; none when it already is that object)
    and return it. A state over `ASR_MAX_STATE_BYTES` is 413. With `If-Match`, only at that
    session version (else 412).
    """

    async def produce(token: IdempotencyToken | None) -> Response:
        loaded = await runtime.set_shared_state(
            tenant.tenant_id, session_id, body, if_match=_if_match(if_match), idempotency=token
        )
        return _state(loaded)

    async def replay(result: dict) -> Response:
        return _state(await runtime.as_committed(tenant.tenant_id, result))

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)
