"""Server-Sent Events: the replay-then-live merge, the tenant timeline, and their frames.

Every frame is built by sse-starlette. Committed events carry an id (the seq on a session
stream, an opaque cursor on the tenant stream); control frames (`retry`, pings, `overflow`,
`shutdown`, `ERROR`) never do, because an id on them would move the client's Last-Event-ID
past real events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import orjson
from sse_starlette import ServerSentEvent

from app.api.problems import problem_body
from app.api.views import event_json
from app.runtime.errors import InvalidCursor
from app.runtime.ports import TenantCursor, TenantPage
from app.runtime.session.events import Event, EventType
from app.runtime.session.subscription import Delivery, Ephemeral, Subscription

Subscribe = Callable[[], AbstractContextManager[Subscription]]
ReadAfter = Callable[[int], Awaitable[list[Event]]]
ReadPage = Callable[[TenantCursor], Awaitable[TenantPage]]

T = TypeVar("T")

_READ_DEADLINE = 30.0
_CHUNK_BYTES = 65_536
_PENDING_FIRST_WAIT = 0.05
_PENDING_MAX_WAIT = 1.0


async def read_whole(read: Awaitable[T]) -> T:
    """Await one short table read without letting a disconnect cancel it half-way.

    A cancelled read leaves SQLAlchemy a connection in an unknown state, which it must
    throw away (with aiosqlite, leaking a task each time); shielded, the read finishes and
    returns its connection to the pool, and the cancellation lands right after. The
    deadline keeps a hung database from pinning the stream.
    """
    with anyio.fail_after(_READ_DEADLINE, shield=True):
        return await read


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The stream stops on its own (`overflow`, `shutdown`); resume after `resume_after`."""

    reason: str
    resume_after: str


Batch = list[Delivery | Ephemeral]


async def replay_then_live(
    subscribe: Subscribe,
    read_after: ReadAfter,
    *,
    after_seq: int,
    types: frozenset[str] | None,
    batch: int,
    handoff_delay: float = 0.0,
    known: Sequence[Event] = (),
) -> AsyncGenerator[Batch | StreamEnd, None]:
    """A session's events after `after_seq`, then live, with no gap and no duplicate.

    DESIGN section 7, in this order: (1) subscribe, so that nothing committed from now on
    can be missed; (2) replay the table after the cursor, in short transactions; (3) pass
    live events only above the last seq handed on. `read_after(seq)` returns up to `batch`
    events after seq (already filtered by `types`). `handoff_delay` is the R9 fault point.

    `known`: the committed events from after `after_seq` up to the head the subscription
    was taken at (a run's start, for a stream opened with it), which replace the replay.

    Yields batches in order: whatever was ready together, so that a stream under load
    sends several frames per write instead of one.
    """
    last = after_seq
    with subscribe() as sub:
        if handoff_delay:
            await asyncio.sleep(handoff_delay)
        if known:
            last = known[-1].seq
            first: Batch = [
                Delivery(e)
                for e in known
                if e.seq > after_seq and (types is None or e.type in types)
            ]
            if first:
                yield first
        while not known:  # the replay, unless the events after the cursor are in hand
            if sub.overflowed:  # dropped live items are all in the table: read them again
                sub.reset()
            events = await read_whole(read_after(last))
            frames = sub.take_ephemeral() if sub.deltas else []
            if events:
                last = events[-1].seq
            if events or frames:
                yield interleave(events, frames)
            if sub.closed is not None:
                yield StreamEnd(sub.closed, str(last))
                return
            if len(events) < batch and not sub.overflowed:
                break
        while True:
            items = await sub.take()
            if sub.closed is not None or sub.overflowed:
                yield StreamEnd(sub.closed or "overflow", str(last))
                return
            out: Batch = []
            for item in items:
                if isinstance(item, Ephemeral):
                    out.append(item)
                elif item.event.seq > last:
                    last = item.event.seq
                    if types is None or item.event.type in types:
                        out.append(item)
            if out:
                yield out


def interleave(events: list[Event], frames: list[Ephemeral]) -> Batch:
    """Replayed events with the delta frames that arrived meanwhile, each frame just before
    its turn's MODEL_RESPONSE when the batch holds it (so text comes before the response
    that makes it final), else after the batch (its turn is still being written)."""
    out: Batch = [Delivery(event) for event in events]
    if not frames:
        return out
    ends: dict[str | None, int] = {
        e.turn_id: i
        for i, e in reversed(list(enumerate(events)))
        if e.type == EventType.MODEL_RESPONSE and e.turn_id is not None
    }
    before: dict[int, list[Ephemeral]] = {}
    after: list[Ephemeral] = []
    for frame in frames:
        at = ends.get(frame.frame.get("turn_id"))
        (after if at is None else before.setdefault(at, [])).append(frame)
    merged: Batch = []
    for i, item in enumerate(out):
        merged.extend(before.get(i, ()))
        merged.append(item)
    return merged + after


async def run_timeline(
    items: AsyncGenerator[Batch | StreamEnd, None], *, run_id: str
) -> AsyncGenerator[Batch | StreamEnd, None]:
    """A session's timeline (`replay_then_live`) narrowed to one run: the run's events and
    its delta frames, ending right after its RUN_FINISHED (or at an `overflow`/`shutdown`).

    The timeline's reads are expected to hold only the run's events already; live items are
    filtered here (another run's late deltas, events of the session outside the run).
    """
    try:
        async for item in items:
            if isinstance(item, StreamEnd):
                yield item
                return
            out: Batch = []
            finished = False
            for entry in item:
                if isinstance(entry, Ephemeral):
                    if entry.frame.get("run_id") in (None, run_id):
                        out.append(entry)
                elif entry.event.run_id == run_id:
                    out.append(entry)
                    if entry.event.type == EventType.RUN_FINISHED:
                        finished = True
                        break
            if out:
                yield out
            if finished:
                return
    finally:
        await items.aclose()


async def tenant_timeline(
    subscribe: Subscribe, read_page: ReadPage, *, after: TenantCursor
) -> AsyncGenerator[tuple[Event, TenantCursor] | StreamEnd, None]:
    """Every event of a tenant after `after`, then live, each exactly once.

    Wake-ups only prompt a read; the read itself decides what is safe to pass (see
    `TenantCursor`). While committed rows wait behind an older open transaction, the read is
    retried with a short backoff, since that transaction may commit without a wake-up.
    """
    cursor = after
    wait = _PENDING_FIRST_WAIT
    with subscribe() as sub:
        while True:
            page = await read_whole(read_page(cursor))
            for event, position in page.entries:
                cursor = position
                yield event, position
            if sub.closed is not None:
                yield StreamEnd(sub.closed, cursor.encode())
                return
            if page.more:
                continue
            if page.pending:
                await sub.take(max_wait=wait)
                wait = min(wait * 2, _PENDING_MAX_WAIT)
            else:
                wait = _PENDING_FIRST_WAIT
                await sub.take()


# ----------------------------------------------------------------------- frames


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON, as `_json` writes it: by orjson, several times faster, unless it
    refuses the value (an integer beyond 64 bits, a key that is not a string), which the
    standard library then writes exactly. Compact JSON holds no line break, so it is one
    `data:` line as it stands."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        return _json(value).encode()


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
        data = _json_bytes(event_json(event))
        delivery.frame = _frame(str(event.type), data, seq=event.seq)
    return delivery.frame


def tenant_event_frame(event: Event, cursor: TenantCursor) -> ServerSentEvent:
    return ServerSentEvent(id=cursor.encode(), event=event.type, data=_json(event_json(event)))


def ephemeral_frame(item: Ephemeral) -> bytes:
    name = str(item.frame.get("type") or "delta")
    if "\n" in name or "\r" in name:  # not one of ours: ServerSentEvent strips the breaks
        return ServerSentEvent(event=name, data=_json(item.frame)).encode()
    return _frame(name, _json_bytes(item.frame))


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
    `retry:` goes out in the same write as it rather than in a write of its own."""
    retry = ServerSentEvent(retry=retry_ms).encode()
    if not first_ready:
        yield retry
        retry = b""
    try:
        async for item in items:
            for chunk in (
                [end_frame(item).encode()] if isinstance(item, StreamEnd) else batch_chunks(item)
            ):
                yield retry + chunk
                retry = b""
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
