"""Frames written directly (`event_frame`, `ephemeral_frame`) are byte for byte what
sse-starlette's ServerSentEvent makes of the standard library's compact JSON, including
where orjson refuses the value and the standard library writes it (integers beyond 64 bits,
keys that are not strings)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Any

import pytest
from sse_starlette import ServerSentEvent

from app.api.http.views import event_json
from app.api.streams.frames import ephemeral_frame, event_frame, session_frames
from app.live.stream_response import LastFrames
from app.live.timeline import Batch, LastBatch, StreamEnd
from app.runtime.session.events import EventType, NewEvent
from app.runtime.session.subscription import Delivery, Ephemeral

PAYLOADS: list[dict[str, Any]] = [
    {"items": [{"type": "message", "role": "user", "content": 'héllo 👋 "quoted"\nline'}]},
    {"big": 2**70, "negative": -(2**64), "nested": {"list": [1, 2.5, None, True]}},
    {"keys": {1: "an integer key"}},
    {},
]


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_event_frame_is_server_sent_event_of_compact_json(payload: dict[str, Any]) -> None:
    event = NewEvent(EventType.MEMORY_ITEMS_APPENDED, payload, run_id="run_1").stored(
        "00000000-0000-0000-0000-000000000001", "s", 7, payload, datetime.now(UTC), 42
    )
    expected = ServerSentEvent(id="7", event=event.type, data=_compact(event_json(event))).encode()
    assert event_frame(Delivery(event)) == expected


@pytest.mark.parametrize("payload", PAYLOADS)
def test_ephemeral_frame_is_server_sent_event_of_compact_json(payload: dict[str, Any]) -> None:
    frame = {"type": "delta", "text": "é", **payload}
    expected = ServerSentEvent(event="delta", data=_compact(frame)).encode()
    assert ephemeral_frame(Ephemeral(frame)) == expected


async def test_a_runs_last_batch_ends_the_frames_with_last_frames() -> None:
    """`run_timeline` ends a run's items with a `LastBatch`: its last chunk is `LastFrames`
    (sent with the body's end), and nothing follows it, not even what the items would say
    next."""
    now = datetime.now(UTC)

    def delivery(seq: int, kind: EventType) -> Delivery:
        return Delivery(
            NewEvent(kind, {}, run_id="run_1").stored(f"e{seq}", "s", seq, {}, now, seq)
        )

    async def items() -> AsyncGenerator[Batch | StreamEnd, None]:
        yield [delivery(1, EventType.RUN_STARTED)]
        yield LastBatch(
            [Ephemeral({"type": "delta", "text": "x"}), delivery(2, EventType.RUN_FINISHED)]
        )
        yield StreamEnd("shutdown", "2")

    frames = [f async for f in session_frames(items(), retry_ms=2000, instance="/x")]
    assert [type(f) for f in frames] == [bytes, bytes, LastFrames]
    assert frames[0].startswith(b"retry: 2000")
    assert frames[2].endswith(event_frame(delivery(2, EventType.RUN_FINISHED)))
    assert b"event: delta" in frames[2]
