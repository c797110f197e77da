"""The streaming response: its own frame encoding (`encode_frame`), which replaced a helper of
sse-starlette's internals (every kind of body item becomes the bytes sse-starlette's public
`ServerSentEvent` makes of it), and how a body's end is sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.types import Message

from app.live.stream_response import (
    LastFrames,
    SendTimeoutError,
    StreamResponse,
    StreamStop,
    encode_frame,
)
from app.settings import Settings


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


async def _messages(body: AsyncIterator[Any]) -> list[Message]:
    """What the response sends for `body`, to a client that never disconnects."""
    sent: list[Message] = []

    async def receive() -> Message:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET"}
    await StreamResponse(body, slot=None, stop=StreamStop(), settings=Settings())(
        scope, receive, send
    )
    return sent


async def test_the_last_frames_and_the_end_of_the_body_are_one_send() -> None:
    """A run's stream ends on its last batch: the body's end goes with it, one write less."""
    closed: list[bool] = []

    async def body() -> AsyncIterator[bytes]:
        try:
            yield b"data: 1\r\n\r\n"
            yield LastFrames(b"data: 2\r\n\r\n")
            yield b"never sent"
        finally:
            closed.append(True)

    sent = await _messages(body())
    assert [m["type"] for m in sent] == [
        "http.response.start",
        "http.response.body",
        "http.response.body",
    ]
    assert (sent[1]["body"], sent[1]["more_body"]) == (b"data: 1\r\n\r\n", True)
    assert (sent[2]["body"], sent[2]["more_body"]) == (b"data: 2\r\n\r\n", False)
    assert type(sent[2]["body"]) is bytes
    assert closed == [True]  # the body's cleanup ran


async def test_a_body_without_last_frames_ends_with_an_empty_send() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"data: 1\r\n\r\n"

    sent = await _messages(body())
    assert [(m.get("body"), m.get("more_body")) for m in sent[1:]] == [
        (b"data: 1\r\n\r\n", True),
        (b"", False),
    ]
