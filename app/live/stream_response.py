"""Stream resources: per-tenant slots, the shutdown signal, and the response that owns both.

A slot taken in the route must come back however the response ends: normally, on a client
disconnect, on a send timeout, or without the body ever starting (a client that resets the
connection before the first byte). Releasing is idempotent and happens in the response's
`__call__` (whatever way it exits) and, as a last resort, when the response object is
collected, so it never depends on the generator's `finally` having run.

The response is ours, on plain asyncio, rather than sse-starlette's `EventSourceResponse`
(whose frame encoding we keep): that one runs four anyio tasks per stream (the body, pings,
the exit signal, the disconnect) with a cancel scope per chunk, which cost a stream-mode run
about a third more server CPU than a wait-mode run (py-spy). Here the body is sent from the
request's own task inside one `asyncio.timeout` (the cut), and a single helper task waits
for the client's disconnect, sending a ping whenever that wait times out. A disconnect, a
blocked send, or the end of the shutdown grace moves the cut to now, which cancels the body
where it waits; the generator's cleanup then runs.

That helper starts half a second into the body (`_LISTEN_AFTER`, or the ping interval if
shorter), not with it: a stream that ends sooner (a run whose model answers at once) never
needs it, and its task, its timer and its cancellation were a measurable part of such a
stream's cost. A client that leaves in that first half second is heard when the helper starts:
uvicorn keeps its disconnect for the next `receive()`, and sends meanwhile go nowhere.

A frame's send arms no timer of its own: a send that the client's socket takes at once (all
of them, but for a client that stopped reading) would pay for a timer it never needs, and a
stream of token deltas sends many. Sends note when the oldest of those in flight began, and
one watchdog per stream, due `sse_send_timeout_seconds` after that (or after its last look,
while nothing is in flight), cuts a stream whose send has waited that long. Frames and pings
take no lock: a send hands uvicorn one whole chunk, so a ping comment can only fall between
frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
from sse_starlette import ServerSentEvent
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.runtime.errors import TooManyStreams
from app.runtime.session.subscription import Subscription
from app.settings import Settings

log = logging.getLogger("app.live.stream_response")

_HEADERS = {"Cache-Control": "no-store", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
_SEP = "\r\n"
_END: Message = {"type": "http.response.body", "body": b"", "more_body": False}
# Seconds into the body before the disconnect listener starts (see the module's docstring).
_LISTEN_AFTER = 0.5


class LastFrames(bytes):
    """The body's last bytes: sent with the end of the body, in one write where it used to
    take two. The body iterator yields nothing after it."""


class SendTimeoutError(TimeoutError):
    """A send to the client blocked `sse_send_timeout_seconds`: the stream is closed."""


def encode_frame(data: Any) -> bytes:
    """A frame of the body as bytes: bytes as they are, a `ServerSentEvent` encoded, a dict
    as a `ServerSentEvent`'s fields, anything else as the data of one."""
    if isinstance(data, bytes | memoryview):
        return bytes(data)
    if isinstance(data, ServerSentEvent):
        return data.encode()
    if isinstance(data, dict):
        return ServerSentEvent(**{**data, "sep": _SEP}).encode()
    return ServerSentEvent(str(data), sep=_SEP).encode()


class StreamSlots:
    """Open streams per tenant on this server, capped (429 beyond)."""

    def __init__(self, per_tenant: int) -> None:
        self.per_tenant = per_tenant
        self._open: dict[str, int] = {}

    def acquire(self, tenant_id: str) -> StreamSlot:
        count = self._open.get(tenant_id, 0)
        if count >= self.per_tenant:
            raise TooManyStreams(self.per_tenant)
        self._open[tenant_id] = count + 1
        return StreamSlot(self, tenant_id)

    def _release(self, tenant_id: str) -> None:
        count = self._open.get(tenant_id, 0) - 1
        if count > 0:
            self._open[tenant_id] = count
        else:
            self._open.pop(tenant_id, None)

    @property
    def total(self) -> int:
        return sum(self._open.values())

    def by_tenant(self) -> dict[str, int]:
        return dict(self._open)


class StreamSlot:
    __slots__ = ("_released", "_slots", "tenant_id")

    def __init__(self, slots: StreamSlots, tenant_id: str) -> None:
        self._slots = slots
        self.tenant_id = tenant_id
        self._released = False

    def release(self) -> None:
        """Give the slot back; a second call does nothing."""
        if not self._released:
            self._released = True
            self._slots._release(self.tenant_id)


class StreamStop:
    """A stream's stop switch: on server shutdown `set()` also closes the stream's
    subscription, so the generator sends its `shutdown` frame at once rather than at its
    next event."""

    def __init__(self) -> None:
        self._set = False
        self._watched: list[Subscription] = []

    def set(self) -> None:
        self._set = True
        for sub in self._watched:
            sub.close("shutdown")

    def watch(self, sub: Subscription) -> None:
        self._watched.append(sub)
        if self._set:
            sub.close("shutdown")


class StreamShutdown:
    """The open streams of this process (`app.state.stream_shutdown`), told at once when it
    starts to shut down (`shutdown_event`: SIGTERM, before the drain, or the lifespan's
    end): each sets its stop and gets the grace to say goodbye. One watcher task for all."""

    def __init__(self, shutdown_event: asyncio.Event) -> None:
        self.shutdown_event = shutdown_event
        self._open: set[StreamResponse] = set()
        self._watcher: asyncio.Task[None] | None = None

    def add(self, response: StreamResponse) -> None:
        if self.shutdown_event.is_set():
            response.shut_down()
            return
        self._open.add(response)
        if self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._shutdown_watcher())

    def discard(self, response: StreamResponse) -> None:
        self._open.discard(response)

    async def _shutdown_watcher(self) -> None:
        await self.shutdown_event.wait()
        for response in list(self._open):
            response.shut_down()


class StreamResponse(Response):
    """A Server-Sent Events response with the service's stream settings that owns a slot.

    Frames come from `content` (sse-starlette `ServerSentEvent`s, or bytes already encoded);
    a comment ping goes out after every `sse_ping_seconds` without a frame from the client's
    side of the wait; a send blocked `sse_send_timeout_seconds` closes the stream; HEAD gets
    the headers and no body.
    """

    def __init__(
        self,
        content: AsyncIterator[Any],
        *,
        slot: StreamSlot | None,
        stop: StreamStop,
        settings: Settings,
        cleanup: Callable[[], None] | None = None,
        media_type: str = "text/event-stream",
    ) -> None:
        self.body_iterator = content
        self.status_code = 200
        self.media_type = media_type
        self.background = None
        self.init_headers(_HEADERS)
        self.ping_seconds = settings.sse_ping_seconds
        self.send_timeout = settings.sse_send_timeout_seconds
        self.grace_seconds = settings.sse_shutdown_grace_seconds
        self._stop = stop
        self._slot = slot
        # Resources taken before the body starts (a run stream's subscription) are given
        # back however the response ends, like the slot.
        self._cleanup = cleanup
        self._cut: asyncio.Timeout | None = None
        self._in_flight = 0  # frame and ping sends not yet returned
        self._sending_since: float | None = None  # loop time the oldest of them began
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._listener: asyncio.Task[None] | None = None
        self._disconnected = False
        self._send_failed = False  # a send that did not return: send nothing more
        self._send_timed_out = False
        if slot is not None:
            weakref.finalize(self, slot.release)
        if cleanup is not None:
            weakref.finalize(self, cleanup)

    def shut_down(self) -> None:
        """The process is shutting down: the generator says goodbye (its stop closes its
        subscription) and is cut after the grace."""
        self._stop.set()
        self._cut_at(asyncio.get_running_loop().time() + self.grace_seconds)

    def _cut_at(self, when: float) -> None:
        cut = self._cut
        if cut is not None and not cut.expired():
            current = cut.when()
            if current is None or when < current:
                cut.reschedule(when)

    async def _send_frame(self, send: Send, message: Message) -> None:
        """A send of the body or a ping, watched by `_watch_sends` rather than a timer."""
        if not self._in_flight:
            assert self._loop is not None
            self._sending_since = self._loop.time()
        self._in_flight += 1
        try:
            await send(message)
        except BaseException:
            self._send_failed = True
            raise
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._sending_since = None

    def _watch_sends(self) -> None:
        """Cut the stream if a send has waited `send_timeout`; else look again when the
        send now in flight (or one that starts now) would have."""
        assert self._loop is not None
        now = self._loop.time()
        since = self._sending_since
        if since is not None and now - since >= self.send_timeout:
            self._send_failed = self._send_timed_out = True
            self._cut_at(now)
            return
        due = (now if since is None else since) + self.send_timeout
        self._watchdog = self._loop.call_at(due, self._watch_sends)

    async def _send(self, send: Send, message: Message) -> None:
        """A send outside the body (the start, the end after a cut), with a timer."""
        try:
            async with asyncio.timeout(self.send_timeout):
                await send(message)
        except TimeoutError:
            self._send_failed = self._send_timed_out = True
            raise SendTimeoutError() from None
        except BaseException:
            self._send_failed = True
            raise

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        shutdown: StreamShutdown | None = getattr(
            getattr(scope.get("app"), "state", None), "stream_shutdown", None
        )
        try:
            start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
            if scope.get("method", "GET").upper() == "HEAD":
                await self._send(send, start)
                await self._send(send, _END)
                return
            await self._stream(start, receive, send, shutdown)
        except SendTimeoutError:
            # A client that stopped reading (frozen, or its network gone): closing it is the
            # point of send_timeout, not an error of the application.
            log.info("stream closed: a send blocked for %s s", self.send_timeout)
        finally:
            if shutdown is not None:
                shutdown.discard(self)
            if self._slot is not None:
                self._slot.release()
            if self._cleanup is not None:
                with contextlib.suppress(Exception):
                    self._cleanup()
            # The generator's own cleanup (unsubscribing) must run now, not whenever the
            # garbage collector finalises it; it is a no-op if the generator already ended.
            with anyio.move_on_after(2.0, shield=True), contextlib.suppress(Exception):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]

    async def _stream(
        self, start: Message, receive: Receive, send: Send, shutdown: StreamShutdown | None
    ) -> None:
        started = complete = False
        loop = self._loop = asyncio.get_running_loop()
        listen_after = min(_LISTEN_AFTER, self.ping_seconds)
        listen = loop.call_later(listen_after, self._start_listening, receive, send, listen_after)
        try:
            async with asyncio.timeout(None) as cut:
                self._cut = cut
                if shutdown is not None:
                    shutdown.add(self)
                self._watchdog = loop.call_later(self.send_timeout, self._watch_sends)
                await self._send_frame(send, start)
                started = True
                async for data in self.body_iterator:
                    if isinstance(data, LastFrames):
                        await self._send_frame(send, _last(data))
                        break
                    await self._send_frame(send, _chunk(encode_frame(data)))
                else:
                    await self._send_frame(send, _END)
                complete = True
        except TimeoutError as exc:
            if isinstance(exc, SendTimeoutError) or not cut.expired():
                raise
            # Cut: the client left, a send blocked, or the shutdown grace ran out.
        finally:
            self._cut = None
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None
            listen.cancel()
            if self._listener is not None:
                self._listener.cancel()
        if self._send_timed_out:
            raise SendTimeoutError()
        if started and not complete and not self._disconnected and not self._send_failed:
            # Cut short by the shutdown grace: end the chunked body cleanly (best effort).
            with contextlib.suppress(OSError):
                await self._send(send, _END)

    def _start_listening(self, receive: Receive, send: Send, late: float) -> None:
        listen = self._listen(receive, send, self.ping_seconds - late)
        self._listener = asyncio.get_running_loop().create_task(listen)

    async def _listen(self, receive: Receive, send: Send, wait: float) -> None:
        """Wait for the client's disconnect; ping whenever the wait lasts `ping_seconds` (the
        first wait is shorter by how late the listener started)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    async with asyncio.timeout(wait):
                        message = await receive()
                except TimeoutError:
                    ping = ServerSentEvent(comment=f"ping - {datetime.now(UTC)}", sep=_SEP)
                    await self._send_frame(send, _chunk(ping.encode()))
                    wait = self.ping_seconds
                    continue
                if message["type"] == "http.disconnect":
                    self._disconnected = True
                    self._cut_at(loop.time())
                    return
        except Exception:
            # A ping that failed (`_send_frame` has noted it): stop the stream.
            self._cut_at(loop.time())


def _chunk(body: bytes) -> Message:
    return {"type": "http.response.body", "body": body, "more_body": True}


def _last(body: bytes) -> Message:
    return {"type": "http.response.body", "body": bytes(body), "more_body": False}
