"""Stream resources: per-tenant slots, the shutdown signal, and the response that owns both.

A slot taken in the route must come back however the response ends: normally, on a client
disconnect, on a send timeout, or without the body ever starting (a client that resets the
connection before the first byte). Releasing is idempotent and happens in the response's
`__call__` (whatever way it exits) and, as a last resort, when the response object is
collected, so it never depends on the generator's `finally` having run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

import anyio
from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message, Receive, Scope, Send

from app.runtime.errors import TooManyStreams
from app.runtime.session.subscription import Subscription
from app.settings import Settings

log = logging.getLogger("app.api.sse")

_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


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
    """sse-starlette's `shutdown_event`: on server shutdown it calls `set()`, which here also
    closes the stream's subscription, so the generator sends its `shutdown` frame at once
    rather than at its next event (a plain anyio.Event could not wake it)."""

    def __init__(self) -> None:
        self._set = False
        self._watched: list[Subscription] = []

    def set(self) -> None:
        self._set = True
        for sub in self._watched:
            sub.close("shutdown")

    def is_set(self) -> bool:
        return self._set

    def watch(self, sub: Subscription) -> None:
        self._watched.append(sub)
        if self._set:
            sub.close("shutdown")


class StreamResponse(EventSourceResponse):
    """An EventSourceResponse with the service's stream settings that owns a slot."""

    def __init__(
        self,
        content: Any,
        *,
        slot: StreamSlot | None,
        stop: StreamStop,
        settings: Settings,
        cleanup: Callable[[], None] | None = None,
        media_type: str = "text/event-stream",
    ) -> None:
        super().__init__(
            content,
            headers=_HEADERS,
            media_type=media_type,
            ping=settings.sse_ping_seconds,
            send_timeout=settings.sse_send_timeout_seconds,
            shutdown_event=stop,  # type: ignore[arg-type]  # duck-typed, see StreamStop
            shutdown_grace_period=settings.sse_shutdown_grace_seconds,
        )
        self._slot = slot
        # Resources taken before the body starts (a run stream's subscription) are given
        # back however the response ends, like the slot.
        self._cleanup = cleanup
        if slot is not None:
            weakref.finalize(self, slot.release)
        if cleanup is not None:
            weakref.finalize(self, cleanup)

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        """sse-starlette's, timed by asyncio's own `timeout` rather than an anyio cancel scope:
        this runs once per chunk, and the scope (with the loop lookup anyio makes for it) was
        a visible share of a stream-mode run's CPU. asyncio's timeout tells its own expiry
        from a cancellation of the task group's (it counts the task's cancel requests)."""
        try:
            async with asyncio.timeout(self.send_timeout):
                await send(message)
        except TimeoutError:
            self._send_interrupted = True
            raise SendTimeoutError() from None
        except BaseException:
            self._send_interrupted = True
            raise

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            # A client that stopped reading (frozen, or its network gone): closing it is the
            # point of send_timeout, not an error of the application.
            log.info("stream closed: a send blocked for %s s", self.send_timeout)
        finally:
            if self._slot is not None:
                self._slot.release()
            if self._cleanup is not None:
                with contextlib.suppress(Exception):
                    self._cleanup()
            # The generator's own cleanup (unsubscribing) must run now, not whenever the
            # garbage collector finalises it; it is a no-op if the generator already ended.
            with anyio.move_on_after(2.0, shield=True), contextlib.suppress(Exception):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
