"""Server-Sent Events: the frames of the timelines (`app.live.timeline`), and the cursors.

Every frame is built by sse-starlette. Committed events carry an id (the seq on a session
stream, an opaque cursor on the tenant stream); control frames (`retry`, pings, `overflow`,
`shutdown`, `ERROR`) never do, because an id on them would move the client's Last-Event-ID
past real events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

from sse_starlette import ServerSentEvent

from app.api.http.problems import problem_body
from app.api.http.views import event_json, event_json_bytes, json_bytes
from app.live.stream_response import LastFrames
from app.live.timeline import Batch, LastBatch, StreamEnd
from app.runtime.errors import InvalidCursor
from app.runtime.ports import TenantCursor
from app.runtime.session.events import Event
from app.runtime.session.subscription import Delivery, Ephemeral

_CHUNK_BYTES = 65_536


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _frame(name: str, data: bytes, *, seq: int | None = None) -> bytes:
    """The frame sse-starlette's ServerSentEvent makes of an id, a name without line breaks
    and one line of data, written directly: every live event and delta of every stream is
    encoded here."""
    head = b"id: %d\r\n" % seq if seq is not None else b""
    return head + b"event: %s\r\ndata: %s\r\n\r\n" % (name.encode(), data)


def event_frame(delivery: Delivery) -> bytes:
    """`id: <seq>`, `event: <TYPE>`, `data: <event JSON>`, encoded once per delivery."""
    if delivery.frame is None:
        event = delivery.event
        delivery.frame = _frame(str(event.type), event_json_bytes(event), seq=event.seq)
    return delivery.frame


def tenant_event_frame(event: Event, cursor: TenantCursor) -> ServerSentEvent:
    return ServerSentEvent(id=cursor.encode(), event=event.type, data=_json(event_json(event)))


def ephemeral_frame(item: Ephemeral) -> bytes:
    """`event: <type>`, `data: <frame JSON>`, encoded once per item (shared by streams)."""
    if item.encoded is None:
        name = str(item.frame.get("type") or "delta")
        if "\n" in name or "\r" in name:  # not ours: ServerSentEvent strips the breaks
            item.encoded = ServerSentEvent(event=name, data=_json(item.frame)).encode()
        else:
            item.encoded = _frame(name, json_bytes(item.frame))
    return item.encoded


def end_frame(end: StreamEnd) -> ServerSentEvent:
    """`overflow` or `shutdown`: reconnect after `resume_after`. A `shutdown` frame also says
    so the way a run's stream always did (`reason`, `reconnect`, `last_seq` on a session's
    or run's stream, whose cursor is a seq); one frame for every stream."""
    detail = {
        "overflow": "this client fell too far behind; reconnect with Last-Event-ID",
        "shutdown": "the server is shutting down; reconnect with Last-Event-ID",
    }.get(end.reason, end.reason)
    body: dict[str, Any] = {"resume_after": end.resume_after, "detail": detail}
    if end.reason == "shutdown":
        body.update(reason="server_shutdown", reconnect=True)
        if end.resume_after.isdigit():
            body["last_seq"] = int(end.resume_after)
    return ServerSentEvent(event=end.reason, data=_json(body))


def error_frame(exc: BaseException, instance: str) -> ServerSentEvent:
    """A failure inside a started stream: one ERROR frame with the problem body."""
    return ServerSentEvent(event="ERROR", data=_json(problem_body(exc, instance)))


def batch_chunks(batch: Batch) -> Iterator[bytes]:
    """The batch's frames, joined into writes of up to about 64 KiB."""
    chunk: list[bytes] = []
    size = 0
    for item in batch:
        frame = event_frame(item) if isinstance(item, Delivery) else ephemeral_frame(item)
        if chunk and size + len(frame) > _CHUNK_BYTES:
            yield b"".join(chunk)
            chunk, size = [], 0
        chunk.append(frame)
        size += len(frame)
    if chunk:
        yield b"".join(chunk)


async def session_frames(
    items: AsyncGenerator[Batch | StreamEnd, None],
    *,
    retry_ms: int,
    instance: str,
    first_ready: bool = False,
) -> AsyncIterator[ServerSentEvent | bytes]:
    """`retry:` once, then the merge's batches as frames; a failure ends it with ERROR.

    `first_ready`: the first batch comes at once (a run's start, sent from memory), so
    `retry:` goes out in the same write as it rather than in a write of its own. A run's
    `LastBatch` ends the frames: its last chunk is `LastFrames`."""
    retry = ServerSentEvent(retry=retry_ms).encode()
    if not first_ready:
        yield retry
        retry = b""
    try:
        async for item in items:
            if isinstance(item, StreamEnd):
                yield retry + end_frame(item).encode()
                retry = b""
                continue
            # One chunk held back, so that a LastBatch's last can go out as LastFrames; the
            # chunks are built as they are sent, never all of a batch at once.
            held = b""
            for chunk in batch_chunks(item):
                if held:
                    yield held
                held, retry = retry + chunk, b""
            if isinstance(item, LastBatch):
                yield LastFrames(held or retry)
                return
            if held:
                yield held
    except Exception as exc:
        yield retry + error_frame(exc, instance).encode()
        retry = b""
    finally:
        await items.aclose()
    if retry:
        yield retry


async def tenant_frames(
    items: AsyncGenerator[tuple[Event, TenantCursor] | StreamEnd, None],
    *,
    retry_ms: int,
    instance: str,
) -> AsyncIterator[ServerSentEvent]:
    yield ServerSentEvent(retry=retry_ms)
    try:
        async for item in items:
            if isinstance(item, StreamEnd):
                yield end_frame(item)
            else:
                yield tenant_event_frame(*item)
    except Exception as exc:
        yield error_frame(exc, instance)
    finally:
        await items.aclose()


# ---------------------------------------------------------------------- cursors


def session_cursor(last_event_id: str | None, after_seq: int | None) -> int:
    """Where a session stream resumes. Last-Event-ID wins: a reconnecting browser sends it,
    while its URL still carries the first `after_seq`."""
    raw = (last_event_id or "").strip()
    if not raw:
        return after_seq or 0
    if not raw.isdigit() or len(raw) > 18:
        raise InvalidCursor(f"Last-Event-ID {raw[:40]!r} is not a seq of this session")
    return int(raw)


def tenant_cursor(last_event_id: str | None, after: str | None) -> TenantCursor:
    raw = (last_event_id or "").strip() or (after or "").strip()
    if not raw:
        return TenantCursor()
    cursor = TenantCursor.parse(raw)
    if cursor is None:
        raise InvalidCursor(f"{raw[:40]!r} is not a cursor of the tenant stream")
    return cursor
