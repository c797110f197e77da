"""The streaming response's own frame encoding (`encode_frame`), which replaced a helper of
sse-starlette's internals: every kind of body item becomes the bytes sse-starlette's public
`ServerSentEvent` makes of it."""

from __future__ import annotations

from sse_starlette import ServerSentEvent

from app.live.stream_response import SendTimeoutError, encode_frame


def test_bytes_go_out_as_they_are() -> None:
    assert (
        encode_frame(b"id: 1\r\nevent: X\r\ndata: {}\r\n\r\n")
        == b"id: 1\r\nevent: X\r\ndata: {}\r\n\r\n"
    )
    assert encode_frame(memoryview(b"data: x\r\n\r\n")) == b"data: x\r\n\r\n"


def test_events_dicts_and_text_are_encoded_by_server_sent_event() -> None:
    event = ServerSentEvent(id="3", event="RUN_STARTED", data='{"a":1}')
    assert encode_frame(event) == event.encode()
    expected = ServerSentEvent(event="ping", data="x", sep="\r\n").encode()
    assert encode_frame({"event": "ping", "data": "x"}) == expected
    assert encode_frame("two\nlines") == ServerSentEvent("two\nlines", sep="\r\n").encode()


def test_a_send_timeout_is_a_timeout() -> None:
    """`asyncio.timeout` users and the response's own handlers both recognise it."""
    assert issubclass(SendTimeoutError, TimeoutError)
