"""Dependencies as `Annotated` aliases, so route signatures read like the contract.

Each reads one field of the app's `Services` (`app/services.py`), entered by its lifespan.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.live.run_follow import RunStreams
from app.live.stream_response import StreamSlots
from app.logs import bind
from app.metrics import Metrics
from app.runtime.access.accounts import Principal
from app.runtime.access.stream_tokens import StreamGrant, StreamTokens
from app.runtime.errors import AdminDisabled, AdminUnauthorized, ProcessesDisabled, Unauthorized
from app.runtime.models.registry import ModelRegistry
from app.runtime.ports import LiveBus
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
from app.runtime.webhooks.service import Webhooks
from app.services import Services, services_of
from app.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer asr_...`")
_admin_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="AdminToken",
    description="The operators' token (`ASR_ADMIN_TOKEN`), for `/v1/admin/...` only.",
)


async def get_services(request: Request) -> Services:
    """The services the app's lifespan entered; every dependency below reads one field."""
    return services_of(request.app)


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_settings_dep(services: ServicesDep) -> Settings:
    return services.settings


async def get_runtime(services: ServicesDep) -> SessionRuntime:
    return services.runtime


async def get_runs(services: ServicesDep) -> RunManager:
    return services.runs


async def get_run_streams(services: ServicesDep) -> RunStreams:
    return services.run_streams


async def get_process_plane(services: ServicesDep) -> ProcessManager | None:
    return services.processes


async def get_processes(
    session_id: str,
    tenant: TenantDep,
    runtime: RuntimeDep,
    manager: ProcessPlaneDep,
) -> ProcessManager:
    """The process manager, once the session is known to be the caller's.

    The session comes first, so another tenant's session is `session_not_found` on these
    routes as on every other; then, with the process plane off, `processes_disabled` (404).
    """
    await runtime.get(tenant.tenant_id, session_id)
    if manager is None:
        raise ProcessesDisabled()
    return manager


async def get_delegator(services: ServicesDep) -> Delegator:
    return services.delegator


async def get_models(services: ServicesDep) -> ModelRegistry:
    return services.models


async def get_tools(services: ServicesDep) -> ToolRegistry:
    return services.tools


async def get_mcp(services: ServicesDep) -> McpCatalog:
    return services.mcp


async def get_scheduler(services: ServicesDep) -> Scheduler:
    return services.scheduler


async def get_blueprints(services: ServicesDep) -> Blueprints:
    return services.blueprints


async def get_webhooks(services: ServicesDep) -> Webhooks:
    return services.webhooks


async def get_bus(services: ServicesDep) -> LiveBus:
    return services.bus


async def get_stream_slots(services: ServicesDep) -> StreamSlots:
    return services.stream_slots


async def get_stream_tokens(services: ServicesDep) -> StreamTokens:
    return services.stream_tokens


async def get_metrics(services: ServicesDep) -> Metrics | None:
    return services.metrics


async def get_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    services: ServicesDep,
) -> Principal:
    """The caller's tenant, from the API key alone (never from the path, query or body).

    It takes the services (which the route resolves too, once per request), not a
    dependency of its own for the accounts: every dependency costs every request a
    resolution, and this one is on every route."""
    raw = credentials.credentials if credentials is not None else None
    principal = await services.accounts.authenticate(raw)
    # From here on, every log line of this request names the tenant (and the session).
    bind(tenant_id=principal.tenant_id, session_id=request.path_params.get("session_id"))
    request.state.key_prefix = principal.key_prefix  # a stream is watched under its key
    return principal


async def get_stream_grant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    services: ServicesDep,
    token: Annotated[
        str | None,
        Query(max_length=2048, description="A stream token from POST /v1/stream-tokens."),
    ] = None,
) -> StreamGrant:
    """Who may read a stream: an API key, or (browsers cannot send headers with EventSource)
    a short-lived stream token in `?token=`. The key itself never goes in a URL.

    A token is checked twice: its signature and expiry here, and the key that asked for it
    in the database, uncached, so that a revoked key's or a deleted tenant's tokens are
    refused at once rather than until they expire.
    """
    accounts = services.accounts
    if credentials is not None:
        principal = await accounts.authenticate(credentials.credentials)
        grant = StreamGrant(tenant_id=principal.tenant_id, key_prefix=principal.key_prefix)
    elif token:
        grant = services.stream_tokens.verify(token)
        assert grant.key_prefix is not None  # verify refuses a token without one
        await accounts.check_key(grant.key_prefix, grant.tenant_id)
    else:
        raise Unauthorized()
    request.state.key_prefix = grant.key_prefix  # a stream is watched under its key
    return grant


async def get_eraser(services: ServicesDep) -> Eraser:
    return services.eraser


async def get_retention(services: ServicesDep) -> Retention:
    return services.retention


async def get_operator(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_admin_bearer)],
) -> str:
    """The caller of an operators' route, by the admin token; never a tenant's key. Returns
    who to name in a receipt (the token is one, so: the admin API).

    Raises:
        AdminDisabled: no token is configured (the routes answer 404).
        AdminUnauthorized: a missing or wrong token (the compare takes constant time).
    """
    token = services.settings.admin_token
    if token is None:
        raise AdminDisabled()
    given = credentials.credentials.encode() if credentials is not None else b""
    if not hmac.compare_digest(given, token.get_secret_value().encode()):
        raise AdminUnauthorized()
    return "admin-api"


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
BlueprintsDep = Annotated[Blueprints, Depends(get_blueprints)]
RuntimeDep = Annotated[SessionRuntime, Depends(get_runtime)]
RunsDep = Annotated[RunManager, Depends(get_runs)]
RunStreamsDep = Annotated[RunStreams, Depends(get_run_streams)]
SchedulerDep = Annotated[Scheduler, Depends(get_scheduler)]
TenantDep = Annotated[Principal, Depends(get_tenant)]
StreamGrantDep = Annotated[StreamGrant, Depends(get_stream_grant)]
ProcessesDep = Annotated[ProcessManager, Depends(get_processes)]
ProcessPlaneDep = Annotated[ProcessManager | None, Depends(get_process_plane)]
DelegatorDep = Annotated[Delegator, Depends(get_delegator)]
ToolsDep = Annotated[ToolRegistry, Depends(get_tools)]
ModelsDep = Annotated[ModelRegistry, Depends(get_models)]
McpDep = Annotated[McpCatalog, Depends(get_mcp)]
WebhooksDep = Annotated[Webhooks, Depends(get_webhooks)]
BusDep = Annotated[LiveBus, Depends(get_bus)]
StreamSlotsDep = Annotated[StreamSlots, Depends(get_stream_slots)]
StreamTokensDep = Annotated[StreamTokens, Depends(get_stream_tokens)]
MetricsDep = Annotated[Metrics | None, Depends(get_metrics)]
EraserDep = Annotated[Eraser, Depends(get_eraser)]
RetentionDep = Annotated[Retention, Depends(get_retention)]
OperatorDep = Annotated[str, Depends(get_operator)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=255,
        description="Retry-safe key: the same key and body replay the stored response.",
    ),
]
IfMatch = Annotated[
    str | None,
    Header(alias="If-Match", max_length=64, description="The session version (ETag) expected."),
]
