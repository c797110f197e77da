"""Per-request plumbing: the request id, the log context, the access log line and the HTTP
metrics, in one pure ASGI middleware (one timing, one route lookup).

It also keeps `asr_sse_streams_active`: a response that starts as `text/event-stream` counts
as an open stream until the application's call returns, which it does however the stream
ends (its last frame, a client disconnect or reset, a send timeout, shutdown). Counting here
rather than in each route covers every stream (session, tenant and run streams) the same way.

`X-Request-ID` is accepted from the client when it is short and plain (so a proxy's id
follows the request through), generated otherwise, and returned on every response. The
route label is the matched route's template (`/v1/sessions/{session_id}`), found after the
router ran, or by matching the routes ourselves when a middleware answered first (a 413);
a path no route matches is `unmatched`, so no raw path ever becomes a label.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.logs import log_context
from app.metrics import UNMATCHED_ROUTE, Metrics
from app.runtime.observer import sse_stream

log = logging.getLogger("app.access")

REQUEST_ID_HEADER = "X-Request-ID"
_CLEAN_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def request_id_from(scope: Scope) -> str:
    """The client's X-Request-ID when it is safe to echo and log, else a new one."""
    for name, value in scope.get("headers") or []:
        if name == b"x-request-id":
            candidate = value.decode("latin-1")
            if _CLEAN_ID.match(candidate):
                return candidate
            break
    return uuid.uuid4().hex


def route_template(scope: Scope, routes: Sequence[BaseRoute] = ()) -> str:
    """The template of the route that handled (or would have handled) this request.

    The router leaves the matched route in the scope. When a middleware answered before
    routing (the body limit's 413), `routes` are matched here instead.
    """
    route = scope.get("route")
    if route is not None and hasattr(route, "path"):
        return str(route.path)
    for candidate in routes:
        match, _ = candidate.matches(scope)
        if match == Match.FULL and hasattr(candidate, "path"):
            return str(candidate.path)
    return UNMATCHED_ROUTE


def is_event_stream(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether a response's headers start a Server-Sent Events stream."""
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.lower().startswith(b"text/event-stream")
    return False


class AccessMiddleware:
    def __init__(
        self, app: ASGIApp, *, metrics: Metrics | None, routes: Sequence[BaseRoute] = ()
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = tuple(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500
        started = time.perf_counter()

        open_stream = ExitStack()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers") or [])
                if self.metrics is not None and is_event_stream(headers):
                    open_stream.enter_context(sse_stream(self.metrics))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        with log_context(request_id=request_id) as context, open_stream:
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                self._record(scope, status, time.perf_counter() - started, context)

    def _record(self, scope: Scope, status: int, seconds: float, context: dict[str, Any]) -> None:
        route = route_template(scope, self.routes)
        method = scope.get("method", "")
        if self.metrics is not None and route != "/metrics":
            self.metrics.observe_http(method=method, route=route, status=status, seconds=seconds)
        session_id = (scope.get("path_params") or {}).get("session_id")
        if session_id is not None:
            context.setdefault("session_id", str(session_id))
        # No query string and no body: they may carry user content.
        log.info(
            "request",
            extra={
                "method": method,
                "route": route,
                "path": scope.get("path", ""),
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
            },
        )
