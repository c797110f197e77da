"""`GET /v1/export/sessions`: every session of the tenant as one JSON Lines stream, for
portability, resumable by cursor.

Each session is the per-session export (`asr sessions export`, the NDJSON of
`GET /v1/sessions/{id}/events`) framed by a kind: a `session` line (the export header), its
`event` lines up to its last seq at the moment it is read, then a `cursor` line. A client
cut off mid-stream asks again with the last `cursor` it received and gets the sessions after
it; the stream ends with an `end` line, so a cut stream is never mistaken for a whole one.
Sessions go newest first, the order of `GET /v1/sessions`: one created after the export
began is not in it (export again to get it).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from app.api.http.deps import RuntimeDep, TenantDep
from app.api.http.pages import decode_cursor, encode_cursor
from app.api.http.problems import problem_responses
from app.api.http.views import rfc3339_text
from app.runtime.errors import SessionNotFound
from app.runtime.session.service import SessionRuntime
from app.runtime.session.transfer import export_ledger

router = APIRouter(prefix="/v1/export", tags=["events"])

NDJSON = "application/x-ndjson"
_PAGE = 100


def _line(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), default=str).encode() + b"\n"


@router.get(
    "/sessions",
    response_class=StreamingResponse,
    summary="Export every session of the tenant as JSON Lines (resumable)",
    responses={
        **problem_responses(401, 422),
        200: {
            "description": "One JSON object a line: per session a `session` line (the export "
            "header), its `event` lines and a `cursor` line; an `end` line last.",
            "content": {NDJSON: {"schema": {"type": "string"}}},
        },
    },
)
async def export_sessions(
    tenant: TenantDep,
    runtime: RuntimeDep,
    cursor: Annotated[
        str | None,
        Query(max_length=512, description="The last `cursor` line of a cut-off export."),
    ] = None,
    limit: Annotated[
        int | None,
        Query(ge=1, le=100_000, description="At most this many sessions (default: all)."),
    ] = None,
) -> StreamingResponse:
    """Every session of the caller's tenant with its whole ledger, as one stream of JSON
    Lines, for moving a tenant's data elsewhere. Resume a cut-off export with the last
    `cursor` line received: nothing is sent twice and nothing is skipped.
    """
    after = decode_cursor(cursor)  # 422 before the stream starts
    lines = _export(runtime, tenant.tenant_id, after=after, limit=limit)
    return StreamingResponse(lines, media_type=NDJSON)


async def _export(
    runtime: SessionRuntime, tenant_id: str, *, after: Any, limit: int | None
) -> AsyncIterator[bytes]:
    sent = 0
    while limit is None or sent < limit:
        page = _PAGE if limit is None else min(_PAGE, limit - sent)
        sessions = await runtime.list(tenant_id, limit=page, after=after)
        for record in sessions:
            try:
                async for item in export_ledger(runtime, tenant_id, record.session_id):
                    if "seq" in item:
                        item["created_at"] = rfc3339_text(item["created_at"])
                        yield _line({"kind": "event", **item})
                    else:
                        item["exported_at"] = rfc3339_text(item["exported_at"])
                        yield _line({"kind": "session", **item})
            except SessionNotFound:
                continue  # erased since the page was read
            after = (record.created_at, record.session_id)
            sent += 1
            yield _line({"kind": "cursor", "cursor": encode_cursor(*after)})
        if len(sessions) < page:
            break
    yield _line({"kind": "end", "sessions": sent})
