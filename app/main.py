"""`create_app(settings)`: the FastAPI application, assembled in its lifespan.

Nothing reads the environment or opens a connection at import time; run it with
`asr serve`, or `uvicorn --factory app.main:create_app`.

`app.state` holds, besides the store and runtime:
- `metrics`: the `Metrics` (Prometheus registry and `Observer`), or None when disabled;
- `shutdown_event`: an `asyncio.Event` set as soon as the process starts to shut down. Under
  `asr serve` that is the moment SIGTERM/SIGINT arrives (before uvicorn's graceful drain, so
  long-lived responses such as SSE streams can end with a final frame instead of holding the
  drain open until its timeout); under any other server it is set when the lifespan exits.
  Code that streams or loops waits on it; `/readyz` answers 503 once it is set.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import FastAPI

from app.api import (
    ag_ui,
    agents,
    debug,
    docs,
    event_types,
    events,
    memory,
    ops,
    runs,
    schedules,
    sessions,
    streams,
)
from app.api import delegation as delegation_api
from app.api import models as models_api
from app.api import processes as processes_api
from app.api import tools as tools_api
from app.api import webhooks as webhooks_api
from app.api.access import AccessMiddleware
from app.api.cors import install_cors
from app.api.limits import BodyLimitMiddleware
from app.api.metrics import Metrics
from app.api.openapi import install_openapi, operation_id
from app.api.problems import install_problem_handlers
from app.api.revocation import StreamRevocationMiddleware
from app.live.listener import make_bus
from app.live.run_follow import RunStreams
from app.live.stream_response import StreamShutdown, StreamSlots
from app.logs import configure_logging
from app.runtime.access.accounts import Accounts
from app.runtime.access.revocation import RevocationWatch
from app.runtime.access.stream_tokens import StreamTokens
from app.runtime.models.file import ModelsFile, read_models_file
from app.runtime.models.profiles import build_profiles
from app.runtime.models.registry import ModelRegistry
from app.runtime.runs.blueprints import load_blueprints
from app.runtime.runs.delegation import DELEGATE, Delegator, delegate_tool
from app.runtime.runs.manager import RunManager
from app.runtime.schedules.service import Scheduler, SchedulerTiming
from app.runtime.session.redaction import Redactor
from app.runtime.session.service import Limits, SessionRuntime
from app.runtime.tools.mcp.catalog import McpCatalog
from app.runtime.tools.mcp.config import parse_servers
from app.runtime.tools.processes import ProcessManager
from app.runtime.tools.registry import ToolContext, ToolRegistry
from app.runtime.tools.shell import SHELL, shell_tool
from app.runtime.tools.workspace import ProcessPolicy, split_names, workspace_dir, workspace_name
from app.runtime.webhooks.delivery import Deliverer, DeliveryPolicy
from app.runtime.webhooks.service import Webhooks
from app.runtime.webhooks.targets import TargetPolicy, parse_networks
from app.settings import Settings, get_settings, split_origins
from app.store.engine import make_engine
from app.store.migrations import script_revisions
from app.store.outage import OUTAGES
from app.store.store import AgentSessionStore, store_for
from app.tracing import configure_tracing
from app.ui import router as ui_router

__all__ = [
    "begin_shutdown",
    "build_models",
    "configure_logging",
    "create_app",
    "known_tool_names",
]

log = logging.getLogger("app")

DESCRIPTION = """
Hosts long-running LLM-agent sessions: each session is a durable container with a stable id,
its own memory, an append-only event ledger and snapshots. Authenticate with
`Authorization: Bearer <api key>`; errors are RFC 9457 `application/problem+json`.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    metrics = Metrics() if settings.metrics_enabled else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.schema_revisions = script_revisions()
        known = known_tool_names(settings)
        models_file = read_models_file(settings.models_file)
        models = build_models(settings, models_file)
        app.state.models = models
        mcp_servers = parse_servers({**models_file.mcp_servers, **settings.mcp_servers})
        known = [*known, *(f"{name}__*" for name in mcp_servers)]
        app.state.blueprints = load_blueprints(
            settings.agents_file, known_tools=known, known_profiles=models.names()
        )
        engine = make_engine(settings)
        redactor = Redactor(settings.redact_patterns)
        store = store_for(
            engine,
            max_metadata_bytes=settings.max_metadata_bytes,
            idempotency_ttl_seconds=settings.idempotency_ttl_seconds,
            observer=metrics,
            max_event_bytes=settings.max_event_bytes,
            redactor=redactor,
            notify=settings.sse_notify,
            notify_interval=settings.sse_notify_interval_ms / 1000,
            pgbouncer=settings.db_pgbouncer,
        )
        app.state.store = store
        bus = make_bus(settings, store)
        await bus.start()
        app.state.bus = bus
        app.state.accounts = Accounts(store)
        revocations = RevocationWatch(app.state.accounts, interval=settings.sse_key_check_seconds)
        revocations.start()
        app.state.revocations = revocations
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
            observer=metrics,
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
        catalog = McpCatalog(
            mcp_servers,
            tools,
            workspace_of=_workspace_of(settings, runtime),
            discovery_cwd=_discovery_dir(settings) if mcp_servers else None,
        )
        app.state.mcp = catalog
        await catalog.start()
        app.state.processes = processes
        app.state.delegator = delegator
        runs = RunManager(
            runtime,
            models=models,
            tools=tools,
            lease_seconds=settings.run_lease_seconds,
            sweep_seconds=settings.run_sweep_seconds,
            shutdown_event=app.state.shutdown_event,
            redactor=redactor,
            max_live_runs_per_tenant=settings.max_live_runs_per_tenant,
            max_runs_per_minute=settings.max_runs_per_minute,
            control=bus,
        )
        app.state.runs = runs
        app.state.run_streams = RunStreams(bus, runtime, settings, known=runs.start_events)
        delegator.attach(runs)
        scheduler = Scheduler(
            store,
            runtime,
            runs,
            blueprints=app.state.blueprints,
            timing=SchedulerTiming(
                poll_seconds=settings.schedule_poll_seconds,
                claim_seconds=settings.schedule_claim_seconds,
                misfire_grace_seconds=settings.schedule_misfire_grace_seconds,
            ),
            observer=metrics,
        )
        app.state.scheduler = scheduler
        if settings.bootstrap_default_tenant:
            key = await app.state.accounts.bootstrap()
            if key is not None:
                # Printed once to the console, never logged: it is the only copy.
                print("Created tenant 'default'. Its API key (shown once):", flush=True)
                print(key, flush=True)
        runs.start_sweeper()
        targets = TargetPolicy(parse_networks(settings.webhook_allow_networks))
        app.state.webhooks = Webhooks(
            store, targets=targets, max_per_tenant=settings.webhook_max_per_tenant
        )
        deliverer = build_deliverer(settings, store, targets, owner=runs.owner, observer=metrics)
        if deliverer is not None:
            deliverer.start()
        if settings.schedules_enabled:
            scheduler.start()
        try:
            yield
        finally:
            app.state.shutdown_event.set()
            if deliverer is not None:
                await deliverer.stop()
            await scheduler.stop()  # before the runs: no tick starts a run during the drain
            await revocations.stop()
            await runs.shutdown(grace_seconds=5.0)
            await catalog.close()  # stdio MCP servers stop with the service
            if processes is not None:
                await processes.shutdown()  # records each one before the store closes
            await bus.stop()
            await store.flush_wakeups()  # the last commits' NOTIFYs, before the pool closes
            await engine.dispose()

    app = FastAPI(
        title="Agent Session Runtime",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        # Served by app.api.docs with their assets from this process (no CDN).
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    app.state.settings = settings
    app.state.stream_slots = StreamSlots(settings.sse_max_streams_per_tenant)
    app.state.stream_tokens = _stream_tokens(settings)
    app.state.metrics = metrics
    app.state.shutdown_event = asyncio.Event()
    app.state.stream_shutdown = StreamShutdown(app.state.shutdown_event)
    install_problem_handlers(app, outages=OUTAGES)
    if settings.otel_enabled:
        app.state.tracer_provider = configure_tracing(settings, app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(StreamRevocationMiddleware)
    # Outside the body limit: a 413 from it still gets a request id and a label.
    routers = (
        sessions.router,
        memory.router,
        runs.router,
        runs.oneshot,
        schedules.router,
        ag_ui.router,
        processes_api.router,
        delegation_api.router,
        tools_api.router,
        events.router,
        streams.router,
        agents.router,
        models_api.router,
        event_types.router,
        webhooks_api.router,
        ops.router,
        ui_router,
        docs.router,
        *((debug.router,) if settings.debug_endpoints else ()),
    )
    routes = [route for router in routers for route in router.routes]
    app.add_middleware(AccessMiddleware, metrics=metrics, routes=routes)
    # Outermost: every answer the app gives (a 401, a 413 from the body limit) carries the
    # CORS headers, or a browser could not read the problem document.
    install_cors(app, split_origins(settings.cors_origins))
    for router in routers:
        app.include_router(router)
    install_openapi(app)
    return app


def known_tool_names(settings: Settings) -> list[str]:
    """The server tools the app will register, known before it is built (for blueprints)."""
    extra = [DELEGATE, *([SHELL] if settings.processes_enabled else [])]
    return sorted({*ToolRegistry().names(), *extra})


def build_models(settings: Settings, models_file: ModelsFile | None = None) -> ModelRegistry:
    """The model profiles of the models file and ASR_MODEL_PROFILES, with the implicit
    `scripted` and `openai` (from ASR_OPENAI_*). Raises ProfileError listing every problem."""
    models_file = models_file or read_models_file(settings.models_file)
    profiles = build_profiles(
        {**models_file.profiles, **settings.model_profiles},
        openai_base_url=settings.openai_base_url,
        openai_api_key=settings.openai_api_key.get_secret_value(),
        openai_model=settings.openai_model,
        openai_timeout_seconds=settings.openai_timeout_seconds,
        source=str(settings.models_file or "ASR_MODEL_PROFILES"),
    )
    return ModelRegistry(profiles)


def _workspace_of(
    settings: Settings, runtime: SessionRuntime
) -> Callable[[ToolContext], Awaitable[Path]]:
    """The calling session's workspace folder (as processes use it), created on first use:
    where an MCP server started per workspace runs."""
    policy = ProcessPolicy(root=settings.workspace_root)

    async def workspace_of(context: ToolContext) -> Path:
        session = await runtime.get(context.tenant_id, context.session_id)
        name = workspace_name(session.binding or {}, context.session_id)
        folder = workspace_dir(policy, context.tenant_id, name)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    return workspace_of


def _discovery_dir(settings: Settings) -> Path:
    """Where MCP servers are started to list their tools: the workspace root, never a
    tenant's folder."""
    folder = settings.workspace_root.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def build_processes(settings: Settings, runtime: SessionRuntime) -> ProcessManager | None:
    """The process plane, or None when it is off (then the shell tool does not exist)."""
    if not settings.processes_enabled:
        return None
    masked = (
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
        secrets=tuple(s for s in masked if len(s) >= 4),
    )
    return ProcessManager(runtime, policy)


def build_deliverer(
    settings: Settings,
    store: AgentSessionStore,
    targets: TargetPolicy,
    *,
    owner: str,
    observer: Metrics | None,
) -> Deliverer | None:
    """This replica's webhook deliverer, or None when the operator turned it off here."""
    if not settings.webhooks_enabled:
        return None
    policy = DeliveryPolicy(
        timeout_seconds=settings.webhook_timeout_seconds,
        max_response_bytes=settings.webhook_max_response_bytes,
        retry_window_seconds=settings.webhook_retry_window_seconds,
        backoff_base_seconds=settings.webhook_backoff_base_seconds,
        backoff_cap_seconds=settings.webhook_backoff_cap_seconds,
        poll_seconds=settings.webhook_poll_seconds,
        batch=settings.webhook_batch,
    )
    return Deliverer(store, owner=owner, targets=targets, policy=policy, observer=observer)


def _stream_tokens(settings: Settings) -> StreamTokens:
    secret = settings.stream_token_secret
    if secret is None:
        if not settings.is_sqlite:
            # Each replica would sign with its own random key and refuse the others' tokens.
            log.warning("ASR_STREAM_TOKEN_SECRET is unset: stream tokens work on this replica only")
        return StreamTokens(secrets.token_bytes(32), ttl_seconds=settings.stream_token_ttl_seconds)
    raw = secret.get_secret_value().encode()
    return StreamTokens(raw, ttl_seconds=settings.stream_token_ttl_seconds)


def begin_shutdown(app: FastAPI) -> None:
    """Set `app.state.shutdown_event`; safe to call from a signal handler.

    The event is set through the running loop (`call_soon_threadsafe`), which also wakes the
    loop, and the log line is written there too: logging inside a signal handler could
    deadlock on the handler's lock.
    """

    def announce() -> None:
        if not app.state.shutdown_event.is_set():
            app.state.shutdown_event.set()
            log.info("shutdown requested: draining")

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        app.state.shutdown_event.set()
        return
    loop.call_soon_threadsafe(announce)
