"""Streams end when their key is revoked: the ASGI side of `app.runtime.access.revocation`.

Every Server-Sent Events response -- a session or tenant timeline, a run in stream mode --
is registered with the replica's `RevocationWatch` (`Services.revocations`) under the key
it was opened with (the auth dependencies leave its prefix in the request state). When the
watch finds the key revoked, or gone with its tenant, this middleware ends the stream
itself: it sends one `ERROR` frame carrying the 401 problem (as any failure inside a
started stream does), completes the response, and cancels the application's handler,
whose cleanup (unsubscribe, free the tenant's stream slot) then runs as after a client
disconnect. Doing it here covers every kind of stream the same way, without each route
knowing about revocation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.http.access import is_event_stream
from app.api.streams.frames import error_frame
from app.runtime.errors import Unauthorized
from app.services import services_of

log = logging.getLogger("app.api.sse")

# How long ending a stream may wait for a send already in progress (a slow client's) before
# the handler is cancelled regardless.
_END_WAIT_SECONDS = 5.0


class StreamRevocationMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stream = _WatchedResponse(scope, send)
        with anyio.CancelScope() as cancel:
            stream.cancel_scope = cancel
            try:
                await self.app(scope, receive, stream.send)
            finally:
                stream.stop_watching()


class _WatchedResponse:
    """One response's sends; an end for revocation falls between frames, never inside one,
    and after it whatever the handler still sends is dropped.

    Every frame of every stream passes here, so a send takes no lock (a lock per send was a
    measurable part of a 500-stream fan-out's CPU): it counts itself in flight, and only an
    end for revocation, which is rare, waits for the sends in flight to finish before it
    writes its frame and completes the response.
    """

    def __init__(self, scope: Scope, send: Send) -> None:
        self.scope = scope
        self.cancel_scope: anyio.CancelScope | None = None
        self._send = send
        self._complete = False  # the response's last message was (or is being) sent
        self._ended = False  # revoked: the handler's sends are dropped from now on
        self._in_flight = 0
        self._idle: asyncio.Event | None = None  # set when the last send in flight is done
        self._unwatch: Callable[[], None] | None = None
        self._ending: asyncio.Task[None] | None = None

    async def send(self, message: Message) -> None:
        if self._complete or self._ended:
            return
        if message["type"] == "http.response.start":
            self._watch_if_stream(message)
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            self._complete = True
        self._in_flight += 1
        try:
            await self._send(message)
        finally:
            self._in_flight -= 1
            if not self._in_flight and self._idle is not None:
                self._idle.set()

    def stop_watching(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _watch_if_stream(self, start: Message) -> None:
        if start.get("status") != 200 or not is_event_stream(start.get("headers") or []):
            return
        key_prefix = (self.scope.get("state") or {}).get("key_prefix")
        if key_prefix is not None:  # a stream opened by a key (every route's is)
            watch = services_of(self.scope["app"]).revocations
            self._unwatch = watch.watch(key_prefix, self._revoked)

    def _revoked(self) -> None:
        self._unwatch = None  # the watch has dropped this stream already
        self._ending = asyncio.get_running_loop().create_task(self._end())

    async def _end(self) -> None:
        try:
            with anyio.move_on_after(_END_WAIT_SECONDS):
                self._ended = True
                while self._in_flight:
                    self._idle = asyncio.Event()
                    await self._idle.wait()
                if self._complete:
                    return
                self._complete = True
                frame = error_frame(Unauthorized(), self.scope.get("path", "")).encode()
                with contextlib.suppress(Exception):  # the client may be gone already
                    await self._send(
                        {"type": "http.response.body", "body": frame, "more_body": True}
                    )
                    await self._send(
                        {"type": "http.response.body", "body": b"", "more_body": False}
                    )
            log.info("stream ended: its key was revoked")
        finally:
            if self.cancel_scope is not None:
                self.cancel_scope.cancel()
