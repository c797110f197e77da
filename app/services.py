"""`Services`: everything the application holds while it runs, as one typed object.

`app.assembly.open_services` builds it and enters every part on one exit stack (stop is
start reversed); the app's lifespan puts it on `app.state.services`, and `app/api/http/deps.py`
hands its fields to routes as `Annotated` dependencies. Only this type is imported by the
API: the store's classes are named here for the type checker alone, so `app/api` still
imports nothing from `app/store`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from starlette.applications import Starlette

    from app.live.bus import EventBus
    from app.live.run_follow import RunStreams
    from app.live.stream_response import StreamSlots
    from app.metrics import Metrics
    from app.runtime.access.accounts import Accounts
    from app.runtime.access.revocation import RevocationWatch
    from app.runtime.access.stream_tokens import StreamTokens
    from app.runtime.models.registry import ModelRegistry
    from app.runtime.runs.blueprints import Blueprints
    from app.runtime.runs.delegation import Delegator
    from app.runtime.runs.manager import RunManager
    from app.runtime.schedules.service import Scheduler
    from app.runtime.session.erasure import Eraser
    from app.runtime.session.retention import Retention
    from app.runtime.session.service import SessionRuntime
    from app.runtime.tools.mcp.catalog import McpCatalog
    from app.runtime.tools.processes import ProcessManager
    from app.runtime.tools.registry import ToolRegistry
    from app.runtime.webhooks.delivery import Deliverer
    from app.runtime.webhooks.service import Webhooks
    from app.settings import Settings
    from app.store.stores import Stores

__all__ = ["Services", "services_of"]


@dataclass(frozen=True, slots=True)
class Services:
    """The running application's parts, listed as `open_services` builds them; each one
    is read by routes through its alias in `app/api/http/deps.py`."""

    settings: Settings
    metrics: Metrics | None  # None when ASR_METRICS_ENABLED=false
    # Set once the process starts to shut down: SIGTERM under `asr serve` (`begin_shutdown`),
    # else the lifespan's end. Streams and loops wait on it; /readyz answers 503 once set.
    shutdown_event: asyncio.Event
    schema_revisions: tuple[str, frozenset[str]]  # (head, every revision) the code ships
    models: ModelRegistry
    blueprints: Blueprints
    stores: Stores
    bus: EventBus
    accounts: Accounts
    runtime: SessionRuntime
    tools: ToolRegistry
    processes: ProcessManager | None  # None when the process plane is off
    delegator: Delegator
    mcp: McpCatalog
    runs: RunManager
    run_streams: RunStreams
    revocations: RevocationWatch
    scheduler: Scheduler
    webhooks: Webhooks
    deliverer: Deliverer | None  # None when this replica does not deliver webhooks
    eraser: Eraser
    retention: Retention
    stream_slots: StreamSlots
    stream_tokens: StreamTokens


def services_of(app: Starlette) -> Services:
    """The services `app`'s lifespan entered (`app.state.services`)."""
    services: Services = app.state.services
    return services
