"""Run routes: start (wait / stream / background), list, get, cancel, tool outputs, approvals,
usage, and the one-shot `POST /v1/runs`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from app.api.http.deps import (
    IdempotencyKey,
    RunsDep,
    RunStreamsDep,
    RuntimeDep,
    ServicesDep,
    SettingsDep,
    TenantDep,
)
from app.api.http.idempotency import idempotent, provisional
from app.api.http.problems import problem_responses
from app.api.http.views import rfc3339, usage_json
from app.api.rest.schemas import (
    ApprovalRequest,
    ContinueRead,
    OneShotRunCreate,
    RunCreate,
    RunList,
    RunRead,
    ToolOutputsRequest,
    UsageRead,
)
from app.api.streams.run_response import run_stream_response
from app.live.run_follow import RunStreams
from app.runtime.access.accounts import Principal
from app.runtime.errors import RunNotFound
from app.runtime.ports import IdempotencyToken, RunRecord
from app.runtime.runs.answers import Prefix, answer_events, append_checked, approval_events
from app.runtime.runs.manager import LIVE_STATUSES, RunManager
from app.runtime.runs.plan import RunRequest
from app.runtime.session.events import NewEvent
from app.runtime.session.service import Loaded, SessionRuntime
from app.settings import Settings

router = APIRouter(prefix="/v1/sessions", tags=["runs"])
oneshot = APIRouter(prefix="/v1", tags=["runs"])

_STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "wait: the run's result; stream: Server-Sent Events of the run",
        # Each SSE frame carries one JSON object: an event (id = seq) or a delta frame.
        "content": {"text/event-stream": {"schema": {"type": "object"}}},
    },
    202: {"description": "background: accepted; poll the Location", "model": RunRead},
}


async def run_view(runtime: SessionRuntime, run: RunRecord) -> dict[str, Any]:
    """A run with the tool calls it left waiting (when it stopped for them)."""
    pending: list[dict[str, Any]] = []
    if run.status == "finished" and run.stop_reason in ("NEEDS_USER_INPUT", "BLOCKED_BY_APPROVAL"):
        state = (await runtime.load(run.tenant_id, run.session_id)).state
        pending = [
            {
                "call_id": cid,
                "name": c.get("name"),
                "arguments": c.get("arguments"),
                "kind": c["kind"],
            }
            for cid, c in state.pending.items()
            if c.get("run_id") == run.run_id and c.get("decision") is None
        ]
    return {
        "run_id": run.run_id,
        "session_id": run.session_id,
        "status": run.status,
        "stop_reason": run.stop_reason,
        "output": run.output,
        "error": run.error,
        "turns": run.turns,
        "usage": usage_json(run.usage),
        "first_seq": run.first_seq,
        "last_seq": run.last_seq,
        "created_at": rfc3339(run.created_at),
        "started_at": rfc3339(run.started_at),
        "finished_at": rfc3339(run.finished_at),
        "pending": pending,
    }


def _request_of(body: RunCreate) -> RunRequest:
    value: str | list[Any] | None = body.input
    if isinstance(value, list):
        value = [p.model_dump(mode="json", exclude_none=True) for p in value]
    return RunRequest(
        input=value,
        multitask=body.multitask,
        client_tools=[t.model_dump() for t in body.client_tools],
        approval_required=body.approval_required,
        limits=body.limits.model_dump(exclude_none=True),
        on_tool_error=body.on_tool_error,
    )


async def respond(
    runs: RunManager,
    runtime: SessionRuntime,
    settings: Settings,
    streams: RunStreams,
    tenant_id: str,
    run: RunRecord,
    mode: str,
    *,
    include_deltas: bool = True,
) -> Response:
    """Answer a started run in the requested mode.

    Stream mode is the session's live timeline narrowed to the run (`RunStreams`): it is
    subscribed here, before anything awaits, so that no delta of the run is missed.
    """
    location = f"/v1/sessions/{run.session_id}/runs/{run.run_id}"
    if mode == "background":
        return JSONResponse(
            await run_view(runtime, run), status_code=202, headers={"Location": location}
        )
    if mode == "stream":
        return run_stream_response(
            streams, tenant_id, run, deltas=include_deltas, instance=location
        )
    done = await runs.wait(tenant_id, run.run_id, within_seconds=settings.run_wait_seconds)
    answer = JSONResponse(await run_view(runtime, done), headers={"Location": location})
    # Still running after the wait: not the run's answer, so not what a replay should repeat.
    return provisional(answer) if done.status in LIVE_STATUSES else answer


async def respond_recorded(
    runs: RunManager,
    runtime: SessionRuntime,
    settings: Settings,
    streams: RunStreams,
    tenant_id: str,
    result: dict[str, Any],
    mode: str,
    *,
    include_deltas: bool = True,
) -> Response:
    """Answer again for a recorded run start (an idempotent replay): the same run, in the
    requested mode; a waiting client waits for it wherever it runs."""
    run = await runs.get_run(tenant_id, result["run_id"])
    return await respond(
        runs, runtime, settings, streams, tenant_id, run, mode, include_deltas=include_deltas
    )


@router.post(
    "/{session_id}/runs",
    summary="Run the agent: mode wait (result), stream (SSE) or background (202)",
    response_model=RunRead,
    responses={**_STREAM_DOC, **problem_responses(401, 404, 409, 413, 422)},
)
async def create_run(
    session_id: str,
    body: RunCreate,
    request: Request,
    tenant: TenantDep,
    services: ServicesDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Run the agent on the session with an optional input.

    `mode` says how to answer: `wait` (200 with the finished run), `stream` (Server-Sent Events
    of the run: ledger events with `id` = seq and delta frames without an id, ending with
    RUN_FINISHED), or `background` (202 with the run as started and `Location` to poll). One run is
    active per session: another is 409 `run_in_progress` unless `multitask` says `enqueue` or
    `interrupt`. With `Idempotency-Key`, a retry answers for the same run and never starts a
    second one.
    """
    # The services as one dependency: the busiest route resolves one, not four.
    runtime, runs, settings = services.runtime, services.runs, services.settings
    streams = services.run_streams

    async def produce(token: IdempotencyToken | None) -> Response:
        run = await runs.start(tenant.tenant_id, session_id, _request_of(body), idempotency=token)
        return await respond(
            runs,
            runtime,
            settings,
            streams,
            tenant.tenant_id,
            run,
            body.mode,
            include_deltas=body.include_deltas,
        )

    async def replay(result: dict[str, Any]) -> Response:
        return await respond_recorded(
            runs,
            runtime,
            settings,
            streams,
            tenant.tenant_id,
            result,
            body.mode,
            include_deltas=body.include_deltas,
        )

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


@router.get(
    "/{session_id}/runs",
    response_model=RunList,
    summary="Runs of a session, newest first",
    responses=problem_responses(401, 404),
)
async def list_runs(session_id: str, tenant: TenantDep, runtime: RuntimeDep, runs: RunsDep) -> dict:
    """The session's runs, newest first, each with its status, stop reason and usage."""
    await runtime.get(tenant.tenant_id, session_id)
    records = await runs.list_runs(tenant.tenant_id, session_id)
    return {"data": [await run_view(runtime, r) for r in records]}


async def _owned_run(
    runs: RunManager, runtime: SessionRuntime, tenant_id: str, session_id: str, run_id: str
) -> RunRecord:
    # The session first: another tenant's session is "session not found" on every route.
    await runtime.get(tenant_id, session_id)
    run = await runs.get_run(tenant_id, run_id)
    if run.session_id != session_id:
        raise RunNotFound(run_id)
    return run


@router.get(
    "/{session_id}/runs/{run_id}",
    response_model=RunRead,
    summary="A run's status, stop reason, output and usage",
    responses=problem_responses(401, 404),
)
async def get_run(
    session_id: str, run_id: str, tenant: TenantDep, runtime: RuntimeDep, runs: RunsDep
) -> dict:
    """A run's status (`queued`, `running`, `finished`, `failed`, `interrupted`), stop reason,
    output, usage and the tool calls it left waiting for an answer (`pending`).
    """
    run = await _owned_run(runs, runtime, tenant.tenant_id, session_id, run_id)
    return await run_view(runtime, run)


@router.post(
    "/{session_id}/runs/{run_id}/cancel",
    response_model=RunRead,
    summary="Interrupt a run (INTERRUPTED); a finished run is returned as it is",
    responses=problem_responses(401, 404),
)
async def cancel_run(
    session_id: str, run_id: str, tenant: TenantDep, runtime: RuntimeDep, runs: RunsDep
) -> dict:
    """Interrupt a queued or running run: it ends INTERRUPTED. A run that already ended is
    returned as it is, so a repeated cancel is harmless.
    """
    await _owned_run(runs, runtime, tenant.tenant_id, session_id, run_id)
    return await run_view(runtime, await runs.cancel(tenant.tenant_id, session_id, run_id))


async def _answer(
    request: Request,
    runs: RunManager,
    runtime: SessionRuntime,
    settings: Settings,
    streams: RunStreams,
    tenant: Principal,
    session_id: str,
    idempotency_key: str | None,
    make_events: Prefix,
    *,
    continue_run: bool,
    mode: str,
) -> Response:
    """Write answers (tool outputs, an approval) and, with `continue_run`, start the run that
    continues from them, in one transaction: a crash can never leave the answers written and
    the continuation lost, nor a retry start it twice."""

    async def produce(token: IdempotencyToken | None) -> Response:
        if continue_run:
            run = await runs.start(
                tenant.tenant_id, session_id, RunRequest(), idempotency=token, prefix=make_events
            )
            return await respond(runs, runtime, settings, streams, tenant.tenant_id, run, mode)
        result = await append_checked(
            runtime, tenant.tenant_id, session_id, make_events, idempotency=token
        )
        return _answered(session_id, result.session.last_seq)

    async def replay(result: dict[str, Any]) -> Response:
        if "run_id" in result:
            return await respond_recorded(
                runs, runtime, settings, streams, tenant.tenant_id, result, mode
            )
        return _answered(session_id, result["last_seq"])

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


def _answered(session_id: str, last_seq: int) -> Response:
    return JSONResponse({"session_id": session_id, "last_seq": last_seq, "run": None})


@router.post(
    "/{session_id}/tool-outputs",
    summary="Answer pending client tool calls (and continue), or replace an earlier output",
    responses={**_STREAM_DOC, **problem_responses(401, 404, 409, 422)},
    response_model=RunRead | ContinueRead,
)
async def post_tool_outputs(
    session_id: str,
    body: ToolOutputsRequest,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    runs: RunsDep,
    settings: SettingsDep,
    streams: RunStreamsDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Answer the client tool calls a run stopped for (NEEDS_USER_INPUT). By default a run
    continues from the answers, in the same transaction, answered in `mode`; `continue: false`
    only records them, and `replace: true` replaces earlier outputs.
    """
    outputs = [o.model_dump() for o in body.outputs]

    def make_events(loaded: Loaded) -> list[NewEvent]:
        return answer_events(loaded, outputs, replace=body.replace)

    return await _answer(
        request,
        runs,
        runtime,
        settings,
        streams,
        tenant,
        session_id,
        idempotency_key,
        make_events,
        continue_run=body.continue_run and not body.replace,
        mode=body.mode,
    )


@router.post(
    "/{session_id}/approvals",
    summary="Approve or reject a pending tool call (and continue)",
    responses={**_STREAM_DOC, **problem_responses(401, 404, 409, 422)},
    response_model=RunRead | ContinueRead,
)
async def post_approval(
    session_id: str,
    body: ApprovalRequest,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    runs: RunsDep,
    settings: SettingsDep,
    streams: RunStreamsDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Approve or reject a tool call that needs approval (BLOCKED_BY_APPROVAL). By default the
    run continues from the decision; `continue: false` only records it.
    """

    def make_events(loaded: Loaded) -> list[NewEvent]:
        return approval_events(
            loaded, call_id=body.call_id, decision=body.decision, reason=body.reason
        )

    return await _answer(
        request,
        runs,
        runtime,
        settings,
        streams,
        tenant,
        session_id,
        idempotency_key,
        make_events,
        continue_run=body.continue_run,
        mode=body.mode,
    )


@router.get(
    "/{session_id}/usage",
    response_model=UsageRead,
    summary="Token usage: the session's totals and each run's",
    responses=problem_responses(401, 404),
)
async def get_usage(session_id: str, tenant: TenantDep, runtime: RuntimeDep, runs: RunsDep) -> dict:
    """Token usage: the session's totals and each run's, with its number of turns."""
    loaded = await runtime.load(tenant.tenant_id, session_id)
    records = await runs.list_runs(tenant.tenant_id, session_id)
    return {
        "session_id": session_id,
        "usage": usage_json(loaded.state.usage),
        "runs": [
            {"run_id": r.run_id, "usage": usage_json(r.usage), "turns": r.turns} for r in records
        ],
    }


@oneshot.post(
    "/runs",
    summary="One-shot run without a stored session (kept only with keep=true)",
    response_model=RunRead,
    responses={**_STREAM_DOC, **problem_responses(401, 409, 413, 422)},
)
async def create_oneshot_run(
    body: OneShotRunCreate,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    runs: RunsDep,
    settings: SettingsDep,
    streams: RunStreamsDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Run an inline agent once without keeping a session: the session is created, run and
    erased in one call (kept with `keep: true`). Answers like `POST /v1/sessions/{id}/runs`.
    """
    # Before anything is created: an unusable profile would leave an empty session behind.
    runs.models.check(body.agent.provider)

    async def produce(token: IdempotencyToken | None) -> Response:
        loaded = await runtime.create(
            tenant.tenant_id,
            session_id=None,
            metadata={"one_shot": True},
            agent=body.agent.model_dump(),
            binding={},
        )
        session_id = loaded.session.session_id
        # The key guards the run's start; a crash before it leaves an empty one-shot session.
        run = await runs.start(tenant.tenant_id, session_id, _request_of(body), idempotency=token)
        if body.mode != "wait" or body.keep:
            return await respond(runs, runtime, settings, streams, tenant.tenant_id, run, body.mode)
        done = await runs.wait(
            tenant.tenant_id, run.run_id, within_seconds=settings.run_wait_seconds
        )
        view = await run_view(runtime, done)
        await runtime.delete(tenant.tenant_id, session_id)
        return JSONResponse(view)

    async def replay(result: dict[str, Any]) -> Response:
        # A discarded one-shot session took its run along: only a stored answer replays it.
        return await respond_recorded(
            runs, runtime, settings, streams, tenant.tenant_id, result, body.mode
        )

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)
