"""Dependencies as `Annotated` aliases, so route signatures read like the contract."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.live.run_follow import RunStreams
from app.logs import bind
from app.runtime.access.accounts import Accounts, Principal
from app.runtime.access.stream_tokens import StreamGrant
from app.runtime.errors import ProcessesDisabled, Unauthorized
from app.runtime.models.registry import ModelRegistry
from app.runtime.runs.blueprints import Blueprints
from app.runtime.runs.delegation import Delegator
from app.runtime.runs.manager import RunManager
from app.runtime.schedules.service import Scheduler
from app.runtime.session.service import SessionRuntime
from app.runtime.tools.processes import ProcessManager
from app.runtime.tools.registry import ToolRegistry
from app.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer asr_...`")


async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_runtime(request: Request) -> SessionRuntime:
    return request.app.state.runtime


async def get_runs(request: Request) -> RunManager:
    return request.app.state.runs


async def get_run_streams(request: Request) -> RunStreams:
    return request.app.state.run_streams


async def get_accounts(request: Request) -> Accounts:
    return request.app.state.accounts


async def get_processes(
    request: Request, session_id: str, tenant: TenantDep, runtime: RuntimeDep
) -> ProcessManager:
    """The process manager, once the session is known to be the caller's.

    The session comes first, so another tenant's session is `session_not_found` on these
    routes as on every other; then, with the process plane off, `processes_disabled` (404).
    """
    await runtime.get(tenant.tenant_id, session_id)
    manager: ProcessManager | None = request.app.state.processes
    if manager is None:
        raise ProcessesDisabled()
    return manager


async def get_delegator(request: Request) -> Delegator:
    return request.app.state.delegator


async def get_models(request: Request) -> ModelRegistry:
    return request.app.state.models


async def get_tools(request: Request) -> ToolRegistry:
    return request.app.state.tools


async def get_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller's tenant, from the API key alone (never from the path, query or body)."""
    accounts: Accounts = request.app.state.accounts
    raw = credentials.credentials if credentials is not None else None
    principal = await accounts.authenticate(raw)
    # From here on, every log line of this request names the tenant (and the session).
    bind(tenant_id=principal.tenant_id, session_id=request.path_params.get("session_id"))
    request.state.key_prefix = principal.key_prefix  # a stream is watched under its key
    return principal


async def get_scheduler(request: Request) -> Scheduler:
    return request.app.state.scheduler


async def get_blueprints(request: Request) -> Blueprints:
    return request.app.state.blueprints


async def get_stream_grant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
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
    accounts: Accounts = request.app.state.accounts
    if credentials is not None:
        principal = await accounts.authenticate(credentials.credentials)
        grant = StreamGrant(tenant_id=principal.tenant_id, key_prefix=principal.key_prefix)
    elif token:
        grant = request.app.state.stream_tokens.verify(token)
        assert grant.key_prefix is not None  # verify refuses a token without one
        await accounts.check_key(grant.key_prefix, grant.tenant_id)
    else:
        raise Unauthorized()
    request.state.key_prefix = grant.key_prefix  # a stream is watched under its key
    return grant


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
BlueprintsDep = Annotated[Blueprints, Depends(get_blueprints)]
RuntimeDep = Annotated[SessionRuntime, Depends(get_runtime)]
RunsDep = Annotated[RunManager, Depends(get_runs)]
RunStreamsDep = Annotated[RunStreams, Depends(get_run_streams)]
SchedulerDep = Annotated[Scheduler, Depends(get_scheduler)]
TenantDep = Annotated[Principal, Depends(get_tenant)]
StreamGrantDep = Annotated[StreamGrant, Depends(get_stream_grant)]
ProcessesDep = Annotated[ProcessManager, Depends(get_processes)]
DelegatorDep = Annotated[Delegator, Depends(get_delegator)]
ToolsDep = Annotated[ToolRegistry, Depends(get_tools)]
ModelsDep = Annotated[ModelRegistry, Depends(get_models)]
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
