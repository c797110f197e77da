"""Live timelines over Server-Sent Events, and the stream tokens browsers use to open them.

Everything that can fail with a status (auth, 404, a bad cursor, the tenant's stream cap)
is checked before the response starts; after that, a failure is one `ERROR` frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request, Response

from app.api.http.deps import (
    BusDep,
    RuntimeDep,
    SettingsDep,
    StreamGrantDep,
    StreamSlotsDep,
    StreamTokensDep,
    TenantDep,
)
from app.api.http.inputs import split_types
from app.api.http.problems import problem_responses
from app.api.http.views import rfc3339
from app.api.streams.frames import session_cursor, session_frames, tenant_cursor, tenant_frames
from app.api.streams.schemas import StreamTokenCreate, StreamTokenRead
from app.live.stream_response import StreamResponse, StreamStop
from app.live.timeline import replay_then_live, tenant_timeline
from app.runtime.access.stream_tokens import StreamGrant
from app.runtime.errors import CursorOutOfRange, SessionNotFound, Unauthorized
from app.runtime.ports import TenantCursor, TenantPage
from app.runtime.session.events import Event
from app.runtime.session.subscription import Subscription

router = APIRouter(tags=["streams"])

_SSE_DOC = {
    "description": "Server-Sent Events. Committed events: `id` (session stream: the seq; "
    "tenant stream: an opaque cursor), `event` = type, `data` = event JSON. Control frames "
    "(`overflow`, `shutdown`, `ERROR`, deltas, pings) carry no id.",
    "content": {"text/event-stream": {"schema": {"type": "object"}}},
}
LastEventId = Annotated[
    str | None,
    Header(alias="Last-Event-ID", max_length=64, description="Resume after this event id."),
]
Types = Annotated[
    list[str] | None, Query(max_length=64, description="Only these event types (repeat or comma).")
]


@router.get(
    "/v1/sessions/{session_id}/events/stream",
    summary="Live timeline of a session (SSE): replay after a cursor, then follow",
    response_class=Response,
    responses={200: _SSE_DOC, **problem_responses(401, 404, 422, 429)},
)
async def stream_session_events(
    session_id: str,
    request: Request,
    grant: StreamGrantDep,
    runtime: RuntimeDep,
    settings: SettingsDep,
    bus: BusDep,
    slots: StreamSlotsDep,
    last_event_id: LastEventId = None,
    after_seq: Annotated[int | None, Query(ge=0, description="Start after this seq.")] = None,
    types: Types = None,
    include: Annotated[
        list[Literal["deltas"]] | None,
        Query(
            description="`deltas`: also send the session's token deltas, whichever replica "
            "runs the model (no id; opened mid-turn, the first is the text so far, "
            "`catch_up: true`)."
        ),
    ] = None,
) -> Response:
    """The session's live timeline over Server-Sent Events: every event after the cursor
    (`Last-Event-ID`, else `after_seq`), then new events as they are committed, with no gap and
    no duplicate. Frames: `id` = seq, `event` = the event type, `data` = the event JSON; with
    `include=deltas` also the runs' delta frames (no id; see the streams reference: `offset`,
    and the `catch_up` frame a stream opened mid-turn starts with). The stream may end with an
    `overflow` or `shutdown` frame: reconnect with `Last-Event-ID`. Browsers authenticate with a
    stream token in `?token=` (EventSource cannot send headers).
    """
    tenant_id = grant.tenant_id
    if grant.session_id not in (None, session_id):
        raise SessionNotFound(session_id)  # a token for another session sees nothing here
    record = await runtime.get(tenant_id, session_id)
    cursor = session_cursor(last_event_id, after_seq)
    if cursor > record.last_seq:
        raise CursorOutOfRange(cursor, record.last_seq)
    wanted = split_types(types)
    batch = settings.sse_replay_batch
    stop = StreamStop()
    slot = slots.acquire(tenant_id)

    @contextmanager
    def subscribe() -> Iterator[Subscription]:
        # `record.last_seq` was read before subscribing: a fresh topic may start there.
        with bus.subscribe(
            tenant_id, session_id, head=record.last_seq, deltas=bool(include)
        ) as sub:
            stop.watch(sub)
            yield sub

    async def read_after(seq: int) -> list[Event]:
        return await runtime.list_events(
            tenant_id, session_id, after_seq=seq, types=wanted, limit=batch
        )

    items = replay_then_live(
        subscribe,
        read_after,
        after_seq=cursor,
        types=frozenset(wanted) if wanted else None,
        batch=batch,
        handoff_delay=settings.sse_handoff_delay_ms / 1000,
    )
    frames = session_frames(items, retry_ms=settings.sse_retry_ms, instance=request.url.path)
    return StreamResponse(frames, slot=slot, stop=stop, settings=settings)


@router.get(
    "/v1/events/stream",
    summary="Live timeline of every session of the tenant (SSE), resumable by its cursor",
    response_class=Response,
    responses={200: _SSE_DOC, **problem_responses(401, 422, 429)},
)
async def stream_tenant_events(
    request: Request,
    grant: StreamGrantDep,
    runtime: RuntimeDep,
    settings: SettingsDep,
    bus: BusDep,
    slots: StreamSlotsDep,
    last_event_id: LastEventId = None,
    after: Annotated[
        str | None, Query(max_length=64, description="Start after this cursor (an event id).")
    ] = None,
    types: Types = None,
) -> Response:
    """Every session of the tenant over Server-Sent Events, for consumers such as indexers:
    frames like the session stream's, with an opaque cursor as `id` to resume from.
    """
    if grant.session_id is not None:
        raise Unauthorized()  # a token scoped to one session does not open the tenant's stream
    tenant_id = grant.tenant_id
    cursor = tenant_cursor(last_event_id, after)
    wanted = split_types(types)
    stop = StreamStop()
    slot = slots.acquire(tenant_id)

    @contextmanager
    def subscribe() -> Iterator[Subscription]:
        with bus.subscribe_tenant(tenant_id) as sub:
            stop.watch(sub)
            yield sub

    async def read_page(after_cursor: TenantCursor) -> TenantPage:
        return await runtime.list_tenant_events(
            tenant_id, after=after_cursor, types=wanted, limit=settings.sse_replay_batch
        )

    items = tenant_timeline(subscribe, read_page, after=cursor)
    frames = tenant_frames(items, retry_ms=settings.sse_retry_ms, instance=request.url.path)
    return StreamResponse(frames, slot=slot, stop=stop, settings=settings)


@router.post(
    "/v1/stream-tokens",
    status_code=201,
    response_model=StreamTokenRead,
    summary="A short-lived token for `?token=` on the stream routes (for EventSource)",
    responses=problem_responses(401, 404, 422),
)
async def create_stream_token(
    body: StreamTokenCreate, tenant: TenantDep, runtime: RuntimeDep, tokens: StreamTokensDep
) -> dict:
    """A short-lived token for `?token=` on the stream routes, for browsers' EventSource
    (which cannot send an Authorization header). Scope it to one session with `session_id`; the
    API key itself never goes in a URL.
    """
    if body.session_id is not None:
        await runtime.get(tenant.tenant_id, body.session_id)
    grant = StreamGrant(
        tenant_id=tenant.tenant_id, session_id=body.session_id, key_prefix=tenant.key_prefix
    )
    token, expires = tokens.issue(grant, ttl_seconds=body.ttl_seconds)
    return {
        "token": token,
        "expires_at": rfc3339(datetime.fromtimestamp(expires, UTC)),
        "session_id": body.session_id,
    }
