"""`create_app(settings)`: the FastAPI application, assembled in its lifespan.

Nothing reads the environment or opens a connection at import time; run it with
`asr serve`, or `uvicorn --factory app.main:create_app`.
"""

from __future__ import annotations

import logging
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import debug, events, memory, ops, runs, sessions, streams
from app.api.limits import BodyLimitMiddleware
from app.api.problems import install_problem_handlers
from app.api.sse_response import StreamSlots
from app.runtime.accounts import Accounts
from app.runtime.models.openai_compat import OpenAICompatibleModel
from app.runtime.models.scripted import ScriptedModel
from app.runtime.redaction import Redactor
from app.runtime.runs import RunManager
from app.runtime.service import Limits, SessionRuntime
from app.runtime.stream_tokens import StreamTokens
from app.runtime.tools import ToolRegistry
from app.settings import Settings, get_settings
from app.store.bus import make_bus
from app.store.engine import make_engine
from app.store.store import AgentSessionStore

log = logging.getLogger("app")

DESCRIPTION = """
Hosts long-running LLM-agent sessions: each session is a durable container with a stable id,
its own memory, an append-only event ledger and snapshots. Authenticate with
`Authorization: Bearer <api key>`; errors are RFC 9457 `application/problem+json`.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings)
        redactor = Redactor(settings.redact_patterns)
        store = AgentSessionStore(
            engine,
            max_metadata_bytes=settings.max_metadata_bytes,
            idempotency_ttl_seconds=settings.idempotency_ttl_seconds,
            idempotency_lock_seconds=settings.idempotency_lock_seconds,
            notify=settings.sse_notify,
            max_event_bytes=settings.max_event_bytes,
            redactor=redactor,
        )
        app.state.store = store
        bus = make_bus(settings, store)
        await bus.start()
        app.state.bus = bus
        app.state.accounts = Accounts(store)
        runtime = SessionRuntime(
            store,
            limits=Limits(
                max_items_per_request=settings.max_items_per_request,
                max_inline_bytes=settings.max_inline_bytes,
                max_metadata_bytes=settings.max_metadata_bytes,
                snapshot_every=settings.snapshot_every,
                max_sessions_per_tenant=settings.max_sessions_per_tenant,
            ),
            live=bus,
        )
        app.state.runtime = runtime
        runs = RunManager(
            runtime,
            store,
            models={
                "scripted": ScriptedModel(),
                "openai": OpenAICompatibleModel(
                    base_url=settings.openai_base_url,
                    api_key=settings.openai_api_key.get_secret_value(),
                    default_model=settings.openai_model,
                    timeout=settings.openai_timeout_seconds,
                ),
            },
            tools=ToolRegistry(),
            lease_seconds=settings.run_lease_seconds,
            sweep_seconds=settings.run_sweep_seconds,
            redactor=redactor,
            max_live_runs_per_tenant=settings.max_live_runs_per_tenant,
            max_runs_per_minute=settings.max_runs_per_minute,
        )
        app.state.runs = runs
        if settings.bootstrap_default_tenant:
            key = await app.state.accounts.bootstrap()
            if key is not None:
                # Printed once to the console, never logged: it is the only copy.
                print("Created tenant 'default'. Its API key (shown once):", flush=True)
                print(key, flush=True)
        runs.start_sweeper()
        try:
            yield
        finally:
            await runs.shutdown(grace_seconds=5.0)
            await bus.stop()
            await engine.dispose()

    app = FastAPI(
        title="Agent Session Runtime",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.stream_slots = StreamSlots(settings.sse_max_streams_per_tenant)
    app.state.stream_tokens = _stream_tokens(settings)
    install_problem_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.include_router(sessions.router)
    app.include_router(memory.router)
    app.include_router(runs.router)
    app.include_router(runs.oneshot)
    app.include_router(events.router)
    app.include_router(streams.router)
    app.include_router(ops.router)
    if settings.debug_endpoints:
        app.include_router(debug.router)
    return app


def _stream_tokens(settings: Settings) -> StreamTokens:
    secret = settings.stream_token_secret
    if secret is None:
        if not settings.is_sqlite:
            # Each replica would sign with its own random key and refuse the others' tokens.
            log.warning("ASR_STREAM_TOKEN_SECRET is unset: stream tokens work on this replica only")
        return StreamTokens(secrets.token_bytes(32), ttl_seconds=settings.stream_token_ttl_seconds)
    raw = secret.get_secret_value().encode()
    return StreamTokens(raw, ttl_seconds=settings.stream_token_ttl_seconds)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
