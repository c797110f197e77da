"""`create_app(settings)`: the FastAPI application, assembled in its lifespan.

Nothing reads the environment or opens a connection at import time; run it with
`asr serve`, or `uvicorn --factory app.main:create_app`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from fastapi import FastAPI

from app.api import delegation as delegation_api
from app.api import events, memory, ops, runs, sessions
from app.api import processes as processes_api
from app.api import tools as tools_api
from app.api.limits import BodyLimitMiddleware
from app.api.problems import install_problem_handlers
from app.runtime.accounts import Accounts
from app.runtime.delegation import Delegator, delegate_tool
from app.runtime.models.openai_compat import OpenAICompatibleModel
from app.runtime.models.scripted import ScriptedModel
from app.runtime.processes import ProcessManager
from app.runtime.redaction import Redactor
from app.runtime.runs import RunManager
from app.runtime.service import Limits, SessionRuntime
from app.runtime.shell import shell_tool
from app.runtime.tools import ToolRegistry
from app.runtime.workspace import ProcessPolicy, split_names
from app.settings import Settings, get_settings
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
            max_event_bytes=settings.max_event_bytes,
            redactor=redactor,
        )
        app.state.store = store
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
        )
        app.state.runtime = runtime
        tools = ToolRegistry()
        processes = build_processes(settings, runtime)
        if processes is not None:
            tools.register(shell_tool(processes))
        delegator = Delegator(
            runtime,
            max_depth=settings.delegation_max_depth,
            wait_seconds=settings.delegation_timeout_seconds,
        )
        tools.register(
            delegate_tool(delegator, timeout_seconds=settings.delegation_timeout_seconds + 5)
        )
        app.state.tools = tools
        app.state.processes = processes
        app.state.delegator = delegator
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
            tools=tools,
            lease_seconds=settings.run_lease_seconds,
            sweep_seconds=settings.run_sweep_seconds,
            redactor=redactor,
            max_live_runs_per_tenant=settings.max_live_runs_per_tenant,
            max_runs_per_minute=settings.max_runs_per_minute,
        )
        app.state.runs = runs
        delegator.attach(runs)
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
            if processes is not None:
                await processes.shutdown()  # records each one before the store closes
            await engine.dispose()

    app = FastAPI(
        title="Agent Session Runtime",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_problem_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.include_router(sessions.router)
    app.include_router(memory.router)
    app.include_router(runs.router)
    app.include_router(runs.oneshot)
    app.include_router(processes_api.router)
    app.include_router(delegation_api.router)
    app.include_router(tools_api.router)
    app.include_router(events.router)
    app.include_router(ops.router)
    return app


def build_processes(settings: Settings, runtime: SessionRuntime) -> ProcessManager | None:
    """The process plane, or None when it is off (then the shell tool does not exist)."""
    if not settings.processes_enabled:
        return None
    secrets = (
        settings.openai_api_key.get_secret_value(),
        urlsplit(settings.database_url).password or "",
    )
    policy = ProcessPolicy(
        root=settings.workspace_root,
        allowlist=split_names(settings.process_allowlist),
        denylist=split_names(settings.process_denylist),
        max_runtime_seconds=settings.process_max_runtime_seconds,
        max_output_bytes=settings.process_max_output_bytes,
        max_live_per_tenant=settings.process_max_live_per_tenant,
        persisted_output_bytes=settings.process_persisted_output_bytes,
        path=settings.process_path,
        secrets=tuple(s for s in secrets if len(s) >= 4),
    )
    return ProcessManager(runtime, policy)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
