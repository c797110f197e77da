"""Session routes: create, list, get, patch, delete, items, state, save, resume, fork,
restore, projection, memory."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from app.api.http import views
from app.api.http.deps import (
    BlueprintsDep,
    EraserDep,
    IdempotencyKey,
    IfMatch,
    ModelsDep,
    RetentionDep,
    RuntimeDep,
    SettingsDep,
    TenantDep,
)
from app.api.http.idempotency import idempotent
from app.api.http.inputs import MAX_SEQ
from app.api.http.pages import cut, decode_cursor
from app.api.http.problems import problem_responses
from app.api.http.query import prefixed
from app.api.rest.schemas import (
    AppendRead,
    ForkRequest,
    ItemsAppend,
    MemoryView,
    ProjectionRead,
    RestoreRequest,
    ResumeRequest,
    SaveRead,
    SessionCreate,
    SessionList,
    SessionPatch,
    SessionRead,
    StateRead,
)
from app.runtime.errors import InvalidRequest, VersionConflict
from app.runtime.ports import IdempotencyToken
from app.runtime.session.service import Loaded

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

_COMMON = problem_responses(401, 404, 422)


def _created(body: dict, location: str) -> JSONResponse:
    return JSONResponse(body, status_code=201, headers={"Location": location})


def _if_match(value: str | None) -> int | None:
    """Parse an ETag precondition: the session version, quoted or not (`*` = any)."""
    if value is None or value.strip() == "*":
        return None
    raw = value.strip().removeprefix("W/").strip('"')
    if not raw.isdigit():
        raise VersionConflict(-1, -1) from None
    return int(raw)


def _etag(version: int) -> str:
    return f'"{version}"'


@router.post(
    "",
    status_code=201,
    response_model=SessionRead,
    summary="Create a session",
    responses=problem_responses(401, 409, 413, 422),
)
async def create_session(
    body: SessionCreate,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    blueprints: BlueprintsDep,
    models: ModelsDep,
    retention: RetentionDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Create a session: a durable container with its own memory and event ledger.

    Give your own `session_id` or let the service make a UUID. `agent` (inline) or `agent_name`
    (a blueprint from `GET /v1/agents`) says which model and tools runs use; `binding` ties the
    session to a workspace, checked on resume and fork. The ledger starts with SESSION_CREATED
    at seq 1. With `Idempotency-Key`, a retry returns the first answer (`Idempotent-Replayed`).
    """
    if body.agent_name is not None and "agent" in body.model_fields_set:
        raise InvalidRequest("give either agent or agent_name, not both")
    # A named agent is copied into the session: later edits of the file leave it alone.
    agent = blueprints.spec(body.agent_name) if body.agent_name is not None else body.agent
    models.check(agent.provider)  # 422 naming the profile, or the setting to fix

    async def produce(token: IdempotencyToken | None) -> Response:
        loaded = await runtime.create(
            tenant.tenant_id,
            session_id=body.session_id,
            metadata=body.metadata,
            agent=agent.model_dump(),
            binding=body.binding,
            max_items=body.max_items,
            idempotency=token,
        )
        own = _retention_changes(body)
        if own:
            record = await retention.set_session_retention(
                tenant.tenant_id, loaded.session.session_id, own
            )
            runtime.forget(tenant.tenant_id, record.session_id)
            loaded = Loaded(session=record, state=loaded.state)
        return _display_created(loaded)

    async def replay(result: dict) -> Response:
        return _display_created(await runtime.as_committed(tenant.tenant_id, result))

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


def _retention_changes(body: SessionCreate | SessionPatch) -> dict[str, Any]:
    """The session's own retention fields the body gives (a PATCH's null clears one)."""
    given = body.model_fields_set & {"expires_at", "idle_ttl_seconds"}
    return {name: getattr(body, name) for name in sorted(given)}


def _display_created(loaded: Loaded) -> Response:
    return _created(views.session_display(loaded), f"/v1/sessions/{loaded.session.session_id}")


@router.get(
    "",
    response_model=SessionList,
    summary="List sessions (newest first, keyset-paginated)",
    responses=problem_responses(401, 422),
)
async def list_sessions(
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    status: Annotated[str | None, Query(max_length=32)] = None,
) -> dict:
    """The tenant's sessions, newest first, one page at a time.

    Pass `next_cursor` back as `cursor` for the next page. Filter by `status` and by metadata
    with `metadata.<key>=<value>` query parameters (string equality, all must match).
    """
    # Metadata filters: ?metadata.user=alice&metadata.team=x (string equality, ANDed).
    filters = prefixed(request.query_params.multi_items(), "metadata.")
    page = min(limit, settings.page_limit_max)
    after = decode_cursor(cursor)
    rows = await runtime.list(
        tenant.tenant_id, limit=page + 1, after=after, status=status, metadata=filters or None
    )
    rows, next_cursor = cut(rows, page, lambda r: (r.created_at, r.session_id))
    return {"data": [views.session_summary(r) for r in rows], "next_cursor": next_cursor}


@router.get(
    "/{session_id}",
    response_model=SessionRead,
    summary="Display snapshot of a session",
    responses=_COMMON,
)
async def get_session(session_id: str, tenant: TenantDep, runtime: RuntimeDep) -> dict:
    """The display snapshot of a session: its row, counts, token estimate, usage, window,
    compaction breaker and last compaction, as a UI shows them.
    """
    return views.session_display(await runtime.load(tenant.tenant_id, session_id, display=True))


@router.patch(
    "/{session_id}",
    response_model=SessionRead,
    summary="Merge metadata (RFC 7386 merge patch) and/or change the memory window",
    responses=problem_responses(401, 404, 413, 422),
)
async def patch_session(
    session_id: str,
    body: SessionPatch,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    retention: RetentionDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Merge metadata (RFC 7386 merge patch: `null` deletes a key) and/or change the
    memory window (`max_items`, or `clear_window`). Each change is an event (METADATA_UPDATED,
    WINDOW_CHANGED); a request that changes nothing returns the session as it is.
    `expires_at` and `idle_ttl_seconds` set the session's own retention (null clears one):
    a column of the session, not an event, and not activity (`updated_at` stays).
    """
    window = (body.max_items,) if body.max_items is not None or body.clear_window else None
    own = _retention_changes(body)
    if own:
        await retention.set_session_retention(tenant.tenant_id, session_id, own)
        runtime.forget(tenant.tenant_id, session_id)
    if body.metadata is None and window is None:
        return JSONResponse(views.session_display(await runtime.load(tenant.tenant_id, session_id)))

    async def produce(token: IdempotencyToken | None) -> Response:
        await runtime.patch(
            tenant.tenant_id, session_id, metadata=body.metadata, window=window, idempotency=token
        )
        return JSONResponse(views.session_display(await runtime.load(tenant.tenant_id, session_id)))

    async def replay(result: dict) -> Response:
        loaded = await runtime.as_committed(tenant.tenant_id, result)
        return JSONResponse(views.session_display(loaded))

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


@router.delete(
    "/{session_id}",
    status_code=204,
    summary="Erase a session, its events, snapshots and runs",
    responses=_COMMON,
)
async def delete_session(session_id: str, tenant: TenantDep, eraser: EraserDep) -> Response:
    """Erase the session: its events, snapshots, runs, the Idempotency-Keys of its writes,
    the webhook subscriptions and schedules that name it, its live processes and its
    workspace folder, and the sessions it delegated work to (unless the operator keeps
    them: `ASR_ERASURE_CHILDREN`). Forks of it keep their own copies of its history and
    are not touched. Every replica drops what it holds of it; an erasure receipt (counts,
    no content) is kept for the operator.
    """
    await eraser.erase_session(
        tenant.tenant_id, session_id, requested_by=f"key:{tenant.key_prefix}"
    )
    return Response(status_code=204)


@router.post(
    "/{session_id}/items",
    status_code=201,
    response_model=AppendRead,
    summary="Append memory items without running the model",
    responses=problem_responses(401, 404, 409, 413, 422),
)
async def append_items(
    session_id: str,
    body: ItemsAppend,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Append memory items (messages, function calls and their outputs) without running the
    model, as one MEMORY_ITEMS_APPENDED event. With `expected_seq` the append happens only if the
    session's last seq is still that value (else 409 `seq_conflict` with `current_seq`).
    """

    async def produce(token: IdempotencyToken | None) -> Response:
        result = await runtime.append_items(
            tenant.tenant_id,
            session_id,
            [i.model_dump(mode="json", exclude_none=True) for i in body.items],
            expected_seq=body.expected_seq,
            idempotency=token,
        )
        return JSONResponse(views.append_result(result), status_code=201)

    async def replay(result: dict) -> Response:
        committed = await runtime.committed_events(tenant.tenant_id, result)
        return JSONResponse(views.append_result(committed), status_code=201)

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


@router.get(
    "/{session_id}/state",
    response_model=StateRead,
    summary="Recovery object (ETag = version)",
    responses=_COMMON,
)
async def get_state(session_id: str, tenant: TenantDep, runtime: RuntimeDep) -> Response:
    """The recovery object: memory, summary, window, usage and breaker at the session's last
    seq. Its `ETag` is the session version, for `If-Match` on save and restore; `restore` takes the
    object back as it is.
    """
    loaded = await runtime.load(tenant.tenant_id, session_id, display=True)
    return JSONResponse(
        views.recovery_object(loaded), headers={"ETag": _etag(loaded.session.version)}
    )


@router.post(
    "/{session_id}/save",
    response_model=SaveRead,
    summary="Write a snapshot row (If-Match: version -> 412 when stale)",
    responses=problem_responses(401, 404, 409, 412, 422),
)
async def save_session(
    session_id: str,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    if_match: IfMatch = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Write a snapshot of the current state (SESSION_SAVED), so a later load starts from it
    instead of folding the whole ledger. With `If-Match` the save happens only at that version
    (else 412).
    """

    async def produce(token: IdempotencyToken | None) -> Response:
        loaded = await runtime.save(
            tenant.tenant_id, session_id, if_match=_if_match(if_match), idempotency=token
        )
        return _saved(session_id, loaded.session.last_seq, loaded.session.version)

    async def replay(result: dict) -> Response:
        return _saved(session_id, result["last_seq"], result["version"])

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


def _saved(session_id: str, snapshot_seq: int, version: int) -> Response:
    body = {"session_id": session_id, "snapshot_seq": snapshot_seq, "version": version}
    return JSONResponse(body, headers={"ETag": _etag(version)})


def _recovery(loaded: Loaded) -> Response:
    return JSONResponse(
        views.recovery_object(loaded), headers={"ETag": _etag(loaded.session.version)}
    )


@router.post(
    "/{session_id}/resume",
    response_model=StateRead,
    summary="Load snapshot + tail, check the binding, record SESSION_RESUMED",
    responses=problem_responses(401, 404, 409, 422),
)
async def resume_session(
    session_id: str,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    body: ResumeRequest | None = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Load the session (latest snapshot plus the events after it), check that the given
    `binding` equals the stored one (else 409 `binding_mismatch`) and record SESSION_RESUMED.
    """
    binding = body.binding if body is not None else None

    async def produce(token: IdempotencyToken | None) -> Response:
        return _recovery(
            await runtime.resume(tenant.tenant_id, session_id, binding=binding, idempotency=token)
        )

    async def replay(result: dict) -> Response:
        return _recovery(await runtime.as_committed(tenant.tenant_id, result))

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


@router.post(
    "/{session_id}/fork",
    status_code=201,
    response_model=SessionRead,
    summary="Fork a new session from the state at at_seq; the source is untouched",
    responses=problem_responses(401, 404, 409, 422),
)
async def fork_session(
    session_id: str,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    body: ForkRequest | None = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Create a new session from this one's state at `at_seq` (default: the latest). The
    child gets a copy of events 1..at_seq and a SESSION_FORKED event; the source is untouched. A
    different `binding` needs `rebind: true`.
    """
    fork = body or ForkRequest()

    async def produce(token: IdempotencyToken | None) -> Response:
        child = await runtime.fork(
            tenant.tenant_id,
            session_id,
            at_seq=fork.at_seq,
            new_session_id=fork.session_id,
            metadata=fork.metadata,
            binding=fork.binding,
            rebind=fork.rebind,
            idempotency=token,
        )
        return _display_created(await runtime.as_loaded(tenant.tenant_id, child))

    async def replay(result: dict) -> Response:
        return _display_created(await runtime.as_committed(tenant.tenant_id, result))

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


@router.post(
    "/{session_id}/restore",
    response_model=StateRead,
    summary="Install a recovery object as the memory baseline",
    responses=problem_responses(401, 404, 409, 412, 422),
)
async def restore_session(
    session_id: str,
    body: RestoreRequest,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    if_match: IfMatch = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Install a recovery object (from `GET .../state`, of this or another session) as the
    memory baseline (SESSION_RESTORED). With `If-Match`, only at that version.
    """

    async def produce(token: IdempotencyToken | None) -> Response:
        loaded = await runtime.restore(
            tenant.tenant_id,
            session_id,
            body.state,
            if_match=_if_match(if_match),
            idempotency=token,
        )
        return _recovery(loaded)

    async def replay(result: dict) -> Response:
        return _recovery(await runtime.as_committed(tenant.tenant_id, result))

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


@router.get(
    "/{session_id}/projection",
    response_model=ProjectionRead,
    summary="Fold of the whole ledger, and whether it equals live memory",
    responses=_COMMON,
)
async def get_projection(session_id: str, tenant: TenantDep, runtime: RuntimeDep) -> dict:
    """Fold the whole ledger from seq 1 and compare the result with live memory: the
    service's central invariant, checkable by anyone. Reads only.
    """
    loaded, folded = await runtime.projection(tenant.tenant_id, session_id)
    return {
        "session_id": session_id,
        "seq": folded.seq,
        "memory": views.memory_json(folded),
        "equals_live": folded.memory_json() == loaded.state.memory_json(),
    }


@router.get(
    "/{session_id}/memory",
    response_model=MemoryView,
    summary="Memory items and summary; full=true adds the whole history from the ledger",
    responses=_COMMON,
)
async def get_memory(
    session_id: str,
    tenant: TenantDep,
    runtime: RuntimeDep,
    full: bool = False,
    after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> dict:
    """Memory items and summary as the model will see them; with `full=true`, also every
    item ever added (from the ledger, a page at a time via `after_seq` and `limit`).
    """
    loaded = await runtime.load(tenant.tenant_id, session_id)
    body: dict = {
        "session_id": session_id,
        "seq": loaded.state.seq,
        **views.memory_json(loaded.state),
        "max_items": loaded.state.max_items,
        "truncated": loaded.state.truncated_through > 0,
        "covers_seq": [loaded.state.truncated_through + 1, loaded.state.seq],
    }
    if full:
        history, next_after = await runtime.history(
            tenant.tenant_id, session_id, after_seq=after_seq, limit=limit
        )
        body["history"] = history
        body["next_after_seq"] = next_after
    return body
