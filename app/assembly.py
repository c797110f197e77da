"""`open_services(settings)`: build every service of the app and enter it on one exit stack.

Each part is entered once, in order, on one `contextlib.AsyncExitStack`, so stop is exactly
start reversed. Read bottom-up, `open_services` is the stop order the process relies on:

1. the shutdown event is set (streams say goodbye, loops stop taking work);
2. the webhook deliverer, then the scheduler (no tick starts a run during the drain);
3. the revocation watch;
4. the runs, given 5 s to finish, then interrupted;
5. the MCP servers (stdio servers stop with the service);
6. the session processes (each one recorded before the store closes);
7. the bus, then the store's last NOTIFYs (before the pool closes), then the engine.

This module and `app.main` are the only ones that assemble the store and the API together.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from app.live.bus import EventBus
from app.live.listener import make_bus
from app.live.run_follow import RunStreams
from app.live.stream_response import StreamSlots
from app.metrics import Metrics
from app.runtime.access.accounts import Accounts
from app.runtime.access.revocation import RevocationWatch
from app.runtime.access.stream_tokens import StreamTokens
from app.runtime.models.file import ModelsFile, read_models_file
from app.runtime.models.profiles import build_profiles
from app.runtime.models.registry import ModelRegistry
from app.runtime.observer import Observer
from app.runtime.ports import LiveFrames
from app.runtime.runs.blueprints import Blueprints, load_blueprints
from app.runtime.runs.delegation import DELEGATE, Delegator, delegate_tool
from app.runtime.runs.manager import RunManager
from app.runtime.schedules.service import Scheduler, SchedulerTiming
from app.runtime.session.erasure import Eraser, Workspaces
from app.runtime.session.redaction import Redactor
from app.runtime.session.retention import Retention, RetentionPolicy
from app.runtime.session.service import Limits, SessionRuntime
from app.runtime.tools.mcp.config import McpServerConfig, parse_servers
from app.runtime.tools.processes import ProcessManager
from app.runtime.tools.registry import ToolContext, ToolRegistry
from app.runtime.tools.shared_state import UPDATE_STATE, update_state_tool
from app.runtime.tools.shell import SHELL, shell_tool
from app.runtime.tools.workspace import ProcessPolicy, split_names, workspace_dir, workspace_name
from app.runtime.webhooks.delivery import Deliverer, DeliveryPolicy, Renderer
from app.runtime.webhooks.service import Webhooks
from app.runtime.webhooks.targets import TargetPolicy, parse_networks
from app.services import Services
from app.settings import Settings
from app.store.engine import make_engine, make_read_engine
from app.store.migrations import script_revisions
from app.store.replicas import Replica, ReplicaSet
from app.store.stores import Stores, open_stores
from app.store.webhooks import WebhookStore

if TYPE_CHECKING:
    from app.runtime.tools.mcp.catalog import McpCatalog

__all__ = ["build_models", "known_tool_names", "open_services", "runtime_over"]

log = logging.getLogger("app")

# The delivery formats an API adds to the webhook deliverer (`app.main` passes the A2A push
# notifications'), built over the runtime and the runs once they exist.
RendererFactory = Callable[[SessionRuntime, RunManager], Mapping[str, Renderer]]


@asynccontextmanager
async def open_services(
    settings: Settings,
    *,
    metrics: Metrics | None,
    shutdown_event: asyncio.Event,
    renderers: RendererFactory | None = None,
) -> AsyncIterator[Services]:
    """Every service of the app, started in order and stopped in reverse (module docstring);
    `renderers` gives the webhook deliverer the delivery formats beyond the standard one."""
    async with AsyncExitStack() as stack:
        config = read_config(settings)
        redactor = Redactor(settings.redact_patterns)
        stores = enter_stores(stack, settings, metrics=metrics, redactor=redactor)
        bus = await enter_bus(stack, settings, stores)
        accounts = Accounts(stores.accounts)
        runtime = build_runtime(settings, stores, bus=bus, metrics=metrics)
        plane = await enter_tools(stack, settings, runtime, servers=config.mcp_servers)
        await bootstrap_default_tenant(settings, accounts)
        runs = enter_runs(
            stack, settings, runtime, plane=plane, models=config.models, control=bus,
            shutdown_event=shutdown_event, redactor=redactor,
        )  # fmt: skip
        revocations = enter_revocations(stack, settings, accounts)
        scheduler = enter_scheduler(
            stack, settings, stores, runtime=runtime, runs=runs, blueprints=config.blueprints,
            metrics=metrics,
        )  # fmt: skip
        webhooks, deliverer = enter_webhooks(
            stack, settings, stores, owner=runs.owner, metrics=metrics,
            renderers=renderers(runtime, runs) if renderers is not None else None,
        )  # fmt: skip
        eraser = build_eraser(settings, stores, runtime, accounts, plane=plane, control=bus)
        retention = enter_retention(stack, settings, stores, runtime=runtime, metrics=metrics)
        stack.callback(shutdown_event.set)  # the first thing stop does
        yield Services(
            settings=settings,
            metrics=metrics,
            shutdown_event=shutdown_event,
            schema_revisions=config.schema_revisions,
            models=config.models,
            blueprints=config.blueprints,
            stores=stores,
            bus=bus,
            accounts=accounts,
            runtime=runtime,
            tools=plane.registry,
            processes=plane.processes,
            delegator=plane.delegator,
            mcp=plane.mcp,
            runs=runs,
            run_streams=RunStreams(bus, runtime, settings, known=runs.start_events),
            revocations=revocations,
            scheduler=scheduler,
            webhooks=webhooks,
            deliverer=deliverer,
            eraser=eraser,
            retention=retention,
            stream_slots=StreamSlots(settings.sse_max_streams_per_tenant),
            stream_tokens=build_stream_tokens(settings),
        )


# ---------------------------------------------------------------- configuration (files only)


@dataclass(frozen=True, slots=True)
class Config:
    """What the app reads before it connects: migrations, model profiles, MCP servers and
    agent blueprints (checked against the tools and profiles they name)."""

    schema_revisions: tuple[str, frozenset[str]]
    models: ModelRegistry
    mcp_servers: dict[str, McpServerConfig]
    blueprints: Blueprints


def read_config(settings: Settings) -> Config:
    """The configuration files and settings, validated; no connection is opened."""
    models_file = read_models_file(settings.models_file)
    models = build_models(settings, models_file)
    mcp_servers = parse_servers({**models_file.mcp_servers, **settings.mcp_servers})
    known = [*known_tool_names(settings), *(f"{name}__*" for name in mcp_servers)]
    blueprints = load_blueprints(
        settings.agents_file, known_tools=known, known_profiles=models.names()
    )
    return Config(script_revisions(), models, mcp_servers, blueprints)


def known_tool_names(settings: Settings) -> list[str]:
    """The server tools the app will register, known before it is built (for blueprints)."""
    extra = [DELEGATE, UPDATE_STATE, *([SHELL] if settings.processes_enabled else [])]
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


# ---------------------------------------------------------------- storage and the session runtime


def enter_stores(
    stack: AsyncExitStack, settings: Settings, *, metrics: Metrics | None, redactor: Redactor
) -> Stores:
    """The engine and the stores; on stop, the last commits' wake-ups go out, then the pool
    closes."""
    engine = make_engine(settings)
    stack.push_async_callback(engine.dispose)
    stores = open_stores(
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
    stack.push_async_callback(stores.flush_wakeups)
    if settings.read_urls and settings.is_sqlite:
        log.warning("ASR_DATABASE_READ_URLS is ignored: SQLite has no read replicas")
    if settings.read_urls and not settings.is_sqlite:
        engines = [make_read_engine(settings, url) for url in settings.read_urls]
        replicas = ReplicaSet(
            [Replica(i, read_engine) for i, read_engine in enumerate(engines)],
            primary=engine,
            timeout=settings.db_read_timeout_seconds,
            health_seconds=settings.db_read_health_seconds,
            consistency=settings.db_read_consistency,
            wait_seconds=settings.db_read_wait_ms / 1000,
        )
        stores.database.replicas = replicas
        replicas.start()
        stack.push_async_callback(replicas.stop)
        if metrics is not None:
            metrics.replica_stats = replicas.stats
    return stores


async def enter_bus(stack: AsyncExitStack, settings: Settings, stores: Stores) -> EventBus:
    """The live bus (NOTIFY on PostgreSQL, in-process otherwise), started; it catches up
    from the ledger."""
    bus = make_bus(settings, stores.ledger)
    await bus.start()
    stack.push_async_callback(bus.stop)
    return bus


def build_runtime(
    settings: Settings, stores: Stores, *, bus: EventBus, metrics: Metrics | None
) -> SessionRuntime:
    """The session verbs over the ledger and run stores, publishing to the bus."""
    limits = Limits(
        max_items_per_request=settings.max_items_per_request,
        max_inline_bytes=settings.max_inline_bytes,
        max_metadata_bytes=settings.max_metadata_bytes,
        max_state_bytes=settings.max_state_bytes,
        snapshot_every=settings.snapshot_every,
        max_sessions_per_tenant=settings.max_sessions_per_tenant,
    )
    return runtime_over(stores, limits=limits, live=bus, observer=metrics)


def runtime_over(
    stores: Stores,
    *,
    limits: Limits | None = None,
    live: LiveFrames | None = None,
    observer: Observer | None = None,
) -> SessionRuntime:
    """`SessionRuntime` over the stores' ledger, runs, Idempotency-Keys and maintenance."""
    return SessionRuntime(
        stores.ledger,
        stores.runs,
        stores.idempotency,
        stores.maintenance,
        limits=limits,
        live=live,
        observer=observer,
    )


# ---------------------------------------------------------------- tools


@dataclass(frozen=True, slots=True)
class ToolPlane:
    """The server tools and what runs them: processes (shell), delegation, MCP servers."""

    registry: ToolRegistry
    processes: ProcessManager | None
    delegator: Delegator
    mcp: McpCatalog


async def enter_tools(
    stack: AsyncExitStack,
    settings: Settings,
    runtime: SessionRuntime,
    *,
    servers: dict[str, McpServerConfig],
) -> ToolPlane:
    """The tool registry with shell (when processes are on), delegate and every MCP server's
    tools; processes stop after the MCP servers, each recorded before the store closes."""
    registry = ToolRegistry()
    processes = build_processes(settings, runtime)
    if processes is not None:
        registry.register(shell_tool(processes))
        stack.push_async_callback(processes.shutdown)
    delegator = Delegator(
        runtime,
        max_depth=settings.delegation_max_depth,
        wait_seconds=settings.delegation_timeout_seconds,
    )
    timeout = settings.delegation_timeout_seconds + 5
    registry.register(delegate_tool(delegator, timeout_seconds=timeout))
    registry.register(update_state_tool(runtime))
    # The MCP SDK loads here, with the service, not for each `asr` command that imports this
    # module (it is a second of a command's start).
    from app.runtime.tools.mcp.catalog import McpCatalog

    catalog = McpCatalog(
        servers,
        registry,
        workspace_of=_workspace_of(settings, runtime),
        discovery_cwd=_discovery_dir(settings) if servers else None,
    )
    await catalog.start()
    stack.push_async_callback(catalog.close)
    return ToolPlane(registry, processes, delegator, catalog)


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


def build_eraser(
    settings: Settings,
    stores: Stores,
    runtime: SessionRuntime,
    accounts: Accounts,
    *,
    plane: ToolPlane,
    control: EventBus,
) -> Eraser:
    """Erasure over the erasure store, the state caches, the process plane and the
    workspaces (which exist from earlier runs even with the process plane off now)."""
    return Eraser(
        stores.erasure,
        runtime,
        workspaces=Workspaces(settings.workspace_root),
        processes=plane.processes,
        control=control,
        forget_tenant=accounts.forget_tenant,
        children=settings.erasure_children,
    )


# ---------------------------------------------------------------- runs and schedules


def enter_runs(
    stack: AsyncExitStack,
    settings: Settings,
    runtime: SessionRuntime,
    *,
    plane: ToolPlane,
    models: ModelRegistry,
    control: EventBus,
    shutdown_event: asyncio.Event,
    redactor: Redactor,
) -> RunManager:
    """The run manager (the delegator attached: a child run is a run), sweeping expired
    leases; on stop, live runs get 5 s to finish, then are interrupted."""
    runs = RunManager(
        runtime,
        models=models,
        tools=plane.registry,
        lease_seconds=settings.run_lease_seconds,
        sweep_seconds=settings.run_sweep_seconds,
        shutdown_event=shutdown_event,
        redactor=redactor,
        max_live_runs_per_tenant=settings.max_live_runs_per_tenant,
        max_runs_per_minute=settings.max_runs_per_minute,
        control=control,
        delta_tick_seconds=settings.sse_delta_flush_ms / 1000,
    )
    plane.delegator.attach(runs)
    runs.start_sweeper()
    stack.push_async_callback(runs.shutdown, grace_seconds=5.0)
    return runs


def enter_scheduler(
    stack: AsyncExitStack,
    settings: Settings,
    stores: Stores,
    *,
    runtime: SessionRuntime,
    runs: RunManager,
    blueprints: Blueprints,
    metrics: Metrics | None,
) -> Scheduler:
    """The schedule verbs, firing due ticks here when schedules are enabled; stopped before
    the runs either way, so no tick starts a run during the drain."""
    timing = SchedulerTiming(
        poll_seconds=settings.schedule_poll_seconds,
        claim_seconds=settings.schedule_claim_seconds,
        misfire_grace_seconds=settings.schedule_misfire_grace_seconds,
    )
    scheduler = Scheduler(
        stores.schedules, runtime, runs, blueprints=blueprints, timing=timing, observer=metrics
    )
    if settings.schedules_enabled:
        scheduler.start()
    stack.push_async_callback(scheduler.stop)
    return scheduler


def retention_defaults(settings: Settings) -> RetentionPolicy:
    """The settings' retention numbers (the defaults of tenants without a policy)."""
    return RetentionPolicy(
        idle_days=settings.retention_idle_days,
        keep_snapshots=settings.retention_keep_snapshots,
        webhook_log_days=settings.retention_webhook_log_days,
    )


def enter_retention(
    stack: AsyncExitStack,
    settings: Settings,
    stores: Stores,
    *,
    runtime: SessionRuntime,
    metrics: Metrics | None,
) -> Retention:
    """The retention pass, run here every `retention_interval_seconds` when set."""
    loop = Retention(
        stores.maintenance,
        retention_defaults(settings),
        tenants=stores.accounts,
        pruner=runtime,
        interval=settings.retention_interval_seconds,
        observer=metrics,
    )
    if settings.retention_interval_seconds:
        loop.start()
    stack.push_async_callback(loop.stop)
    return loop


# ---------------------------------------------------------------- access


async def bootstrap_default_tenant(settings: Settings, accounts: Accounts) -> None:
    """On an empty database (when enabled), create tenant `default` and print its key."""
    if not settings.bootstrap_default_tenant:
        return
    key = await accounts.bootstrap()
    if key is not None:
        # Printed once to the console, never logged: it is the only copy.
        print("Created tenant 'default'. Its API key (shown once):", flush=True)
        print(key, flush=True)


def enter_revocations(
    stack: AsyncExitStack, settings: Settings, accounts: Accounts
) -> RevocationWatch:
    """The watch that ends a stream once its key is revoked, started."""
    revocations = RevocationWatch(accounts, interval=settings.sse_key_check_seconds)
    revocations.start()
    stack.push_async_callback(revocations.stop)
    return revocations


def build_stream_tokens(settings: Settings) -> StreamTokens:
    """The signer of stream tokens: ASR_STREAM_TOKEN_SECRET, else a random key of this
    process."""
    secret = settings.stream_token_secret
    if secret is None:
        if not settings.is_sqlite:
            # Each replica would sign with its own random key and refuse the others' tokens.
            log.warning("ASR_STREAM_TOKEN_SECRET is unset: stream tokens work on this replica only")
        return StreamTokens(secrets.token_bytes(32), ttl_seconds=settings.stream_token_ttl_seconds)
    raw = secret.get_secret_value().encode()
    return StreamTokens(raw, ttl_seconds=settings.stream_token_ttl_seconds)


# ---------------------------------------------------------------- webhooks


def enter_webhooks(
    stack: AsyncExitStack,
    settings: Settings,
    stores: Stores,
    *,
    owner: str,
    metrics: Metrics | None,
    renderers: Mapping[str, Renderer] | None = None,
) -> tuple[Webhooks, Deliverer | None]:
    """The subscriptions, and this replica's deliverer (started) unless turned off here."""
    targets = TargetPolicy(parse_networks(settings.webhook_allow_networks))
    webhooks = Webhooks(
        stores.webhooks, targets=targets, max_per_tenant=settings.webhook_max_per_tenant
    )
    deliverer = build_deliverer(
        settings, stores.webhooks, targets, owner=owner, observer=metrics, renderers=renderers
    )
    if deliverer is not None:
        deliverer.start()
        stack.push_async_callback(deliverer.stop)
    return webhooks, deliverer


def build_deliverer(
    settings: Settings,
    store: WebhookStore,
    targets: TargetPolicy,
    *,
    owner: str,
    observer: Metrics | None,
    renderers: Mapping[str, Renderer] | None = None,
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
    return Deliverer(
        store, owner=owner, targets=targets, policy=policy, observer=observer, renderers=renderers
    )
