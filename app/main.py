"""`create_app(settings)`: the FastAPI application; its lifespan enters the `Services`.

Nothing reads the environment or opens a connection at import time; run it with
`asr serve`, or `uvicorn --factory app.main:create_app`.

`app.state` holds the `Services` (`app.state.services`, read through `app.services.services_of`
and the `Annotated` dependencies of `app/api/http/deps.py`) once the lifespan has entered them, and,
from construction on, what must exist before that:
- `shutdown_event`: an `asyncio.Event` set as soon as the process starts to shut down. Under
  `asr serve` that is the moment SIGTERM/SIGINT arrives (before uvicorn's graceful drain, so
  long-lived responses such as SSE streams can end with a final frame instead of holding the
  drain open until its timeout), which may come while the services still start; under any
  other server it is set when the lifespan exits. It is also `Services.shutdown_event`;
- `stream_shutdown`: the `StreamShutdown` every `StreamResponse` registers with (it finds it
  on the scope's app), telling open streams at once when the event is set.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api.a2a.push import renderers as push_renderers
from app.api.http.access import AccessMiddleware
from app.api.http.cors import install_cors
from app.api.http.limits import BodyLimitMiddleware
from app.api.http.problems import install_problem_handlers
from app.api.http.query import SingleValuedQuery
from app.api.mcp.endpoint import McpEndpoint
from app.api.openapi.document import install_openapi, operation_id
from app.api.ops.metrics_token import MetricsTokenMiddleware
from app.api.routes import documented_paths, include_routers
from app.api.streams.revocation import StreamRevocationMiddleware
from app.assembly import open_services
from app.live.stream_response import StreamShutdown
from app.metrics import Metrics
from app.settings import Settings, get_settings, split_origins
from app.store.outage import OUTAGES
from app.tracing import configure_tracing

__all__ = ["begin_shutdown", "create_app"]

log = logging.getLogger("app")

DESCRIPTION = """
Hosts long-running LLM-agent sessions: each session is a durable container with a stable id,
its own memory, an append-only event ledger and snapshots. Authenticate with
`Authorization: Bearer <api key>`; errors are RFC 9457 `application/problem+json`.

The agents are also MCP tools: `/mcp` is a Model Context Protocol server (Streamable HTTP,
JSON-RPC, the same bearer keys), one tool per agent blueprint. It is not an operation of
this document; see the how-to "Agents as MCP tools" (docs/how-to/mcp-server.md).
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    """The application: services entered by its lifespan, middleware, routes, handlers."""
    settings = settings or get_settings()
    metrics = Metrics() if settings.metrics_enabled else None
    shutdown_event = asyncio.Event()
    mcp = McpEndpoint()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        opened = open_services(
            settings, metrics=metrics, shutdown_event=shutdown_event, renderers=push_renderers
        )
        async with opened as services:
            app.state.services = services
            # The MCP transport's task group: stopped before the services it calls.
            async with mcp.run():
                yield

    app = FastAPI(
        title="Agent Session Runtime",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        # Served by app.api.openapi.docs with their assets from this process (no CDN).
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    # Before the lifespan (module docstring): a signal may come while the services start.
    app.state.shutdown_event = shutdown_event
    app.state.stream_shutdown = StreamShutdown(shutdown_event)
    install_problem_handlers(app, outages=OUTAGES)
    if settings.otel_enabled:
        configure_tracing(settings, app)
    routes = include_routers(app, mcp=mcp, debug_endpoints=settings.debug_endpoints)
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=settings.max_body_bytes, query=SingleValuedQuery(routes)
    )
    app.add_middleware(StreamRevocationMiddleware)
    if settings.metrics_token is not None and settings.metrics_token.get_secret_value():
        app.add_middleware(MetricsTokenMiddleware, token=settings.metrics_token.get_secret_value())
    # Outside the body limit: a 413 from it still gets a request id and a label.
    app.add_middleware(AccessMiddleware, metrics=metrics, routes=routes)
    # Outermost: every answer the app gives (a 401, a 413 from the body limit) carries the
    # CORS headers, or a browser could not read the problem document.
    install_cors(
        app,
        split_origins(settings.cors_origins),
        headers=split_origins(settings.cors_allow_headers),
    )
    install_openapi(app, documented_paths())
    return app


def begin_shutdown(app: FastAPI) -> None:
    """Set `app.state.shutdown_event`; safe to call from a signal handler.

    The event is set through the running loop (`call_soon_threadsafe`), which also wakes the
    loop, and the log line is written there too: logging inside a signal handler could
    deadlock on the handler's lock.
    """
    event: asyncio.Event = app.state.shutdown_event

    def announce() -> None:
        if not event.is_set():
            event.set()
            log.info("shutdown requested: draining")

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        event.set()
        return
    loop.call_soon_threadsafe(announce)
