"""Event listing: JSON pages, or the whole ledger as NDJSON with `Accept: application/x-ndjson`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from app.api.http.deps import RuntimeDep, SettingsDep, TenantDep
from app.api.http.inputs import MAX_SEQ, split_types
from app.api.http.problems import problem_responses
from app.api.http.views import event_json
from app.api.rest.schemas import EventList

router = APIRouter(prefix="/v1/sessions", tags=["events"])

NDJSON = "application/x-ndjson"
_EXPORT_BATCH = 1000


@router.get(
    "/{session_id}/events",
    response_model=EventList,
    summary="Events of a session (JSON page, or NDJSON export)",
    responses={
        **problem_responses(401, 404, 422),
        200: {
            "description": "A page of events, or with Accept: application/x-ndjson every "
            "matching event, one JSON object a line.",
            "content": {NDJSON: {"schema": {"type": "string"}}},
        },
    },
)
async def list_events(
    session_id: str,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    settings: SettingsDep,
    after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    types: Annotated[list[str] | None, Query(max_length=64)] = None,
    run_id: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 100,
) -> Response:
    """The session's ledger: a page of events after `after_seq`, filtered by `types` and
    `run_id`. With `Accept: application/x-ndjson`, every matching event, one JSON object a line.
    Each event's `payload` is typed by its `type` (see `GET /v1/event-types`).
    """
    wanted = split_types(types)
    if NDJSON in request.headers.get("accept", ""):
        await runtime.get(tenant.tenant_id, session_id)  # 404 before the stream starts

        async def lines() -> AsyncIterator[bytes]:
            cursor = after_seq
            while True:
                batch = await runtime.list_events(
                    tenant.tenant_id,
                    session_id,
                    after_seq=cursor,
                    types=wanted,
                    run_id=run_id,
                    limit=_EXPORT_BATCH,
                )
                for event in batch:
                    yield json.dumps(event_json(event), separators=(",", ":")).encode() + b"\n"
                if len(batch) < _EXPORT_BATCH:
                    return
                cursor = batch[-1].seq

        return StreamingResponse(lines(), media_type=NDJSON)
    page = min(limit, settings.page_limit_max)
    events = await runtime.list_events(
        tenant.tenant_id,
        session_id,
        after_seq=after_seq,
        types=wanted,
        run_id=run_id,
        limit=page,
    )
    # A JSON response, not a dict: the stored payloads go out as written, never re-validated
    # (and so never reshaped) by the typed event models that document them.
    return JSONResponse(
        {
            "data": [event_json(e) for e in events],
            "next_after_seq": events[-1].seq if len(events) == page else None,
        }
    )
