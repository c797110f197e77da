"""Frames written directly (`event_frame`, `ephemeral_frame`) are byte for byte what
sse-starlette's ServerSentEvent makes of the standard library's compact JSON, including
where orjson refuses the value and the standard library writes it (integers beyond 64 bits,
keys that are not strings)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sse_starlette import ServerSentEvent

from app.api.http.views import event_json
from app.api.streams.frames import ephemeral_frame, event_frame
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
