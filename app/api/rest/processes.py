"""Process routes: a session's background processes (list, start, read, logs, stdin, stop).

Every route answers 404 `processes_disabled` unless the operator turned the process plane on
(`ASR_PROCESSES_ENABLED`). A process is controlled by the server that started it; see
`app/runtime/tools/processes.py` for what `restored` means.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from app.api.http.deps import IdempotencyKey, ProcessesDep, RuntimeDep, TenantDep
from app.api.http.idempotency import idempotent
from app.api.http.inputs import MAX_SEQ
from app.api.http.problems import problem_responses
from app.api.http.views import process_json
from app.api.rest.schemas import (
    ProcessCreate,
    ProcessList,
    ProcessLogs,
    ProcessRead,
    StdinRead,
    StdinWrite,
)
from app.runtime.errors import IdempotentReplay
from app.runtime.ports import IdempotencyToken

router = APIRouter(prefix="/v1/sessions", tags=["processes"])

_COMMON = problem_responses(401, 404)


@router.get(
    "/{session_id}/processes",
    response_model=ProcessList,
    summary="The session's processes: running here, exited, or restored",
    responses=_COMMON,
)
async def list_processes(session_id: str, tenant: TenantDep, processes: ProcessesDep) -> dict:
    """The session's background processes: running on this server, exited, or `restored`
    (known from the ledger but no longer running here). 404 `processes_disabled` unless the
    operator enabled the process plane.
    """
    return {"data": [process_json(v) for v in await processes.list(tenant.tenant_id, session_id)]}


@router.post(
    "/{session_id}/processes",
    status_code=201,
    response_model=ProcessRead,
    summary="Start a process in the session's workspace (what the shell tool does)",
    responses=problem_responses(401, 404, 409, 422, 429),
)
async def start_process(
    session_id: str,
    body: ProcessCreate,
    request: Request,
    tenant: TenantDep,
    processes: ProcessesDep,
    runtime: RuntimeDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Start a command in the session's workspace, as the `shell` tool does: split like a
    shell but run without one; its program must be allowed by name (422 `command_not_allowed`).
    """

    async def produce(token: IdempotencyToken | None) -> Response:
        return _started(
            await processes.start(
                tenant.tenant_id,
                session_id,
                body.command,
                timeout_seconds=body.timeout_seconds,
                stdin=body.stdin,
                idempotency=token,
            )
        )

    async def replay(result: dict[str, Any]) -> Response:
        recorded = await runtime.committed_events(tenant.tenant_id, result)
        process_id = recorded.events[0].payload["process_id"]
        return _started(await processes.get(tenant.tenant_id, session_id, process_id))

    def _started(view: dict[str, Any]) -> Response:
        location = f"/v1/sessions/{session_id}/processes/{view['process_id']}"
        return JSONResponse(process_json(view), status_code=201, headers={"Location": location})

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


@router.get(
    "/{session_id}/processes/{process_id}",
    response_model=ProcessRead,
    summary="A process: status (running / exited / restored) and exit code",
    responses=_COMMON,
)
async def get_process(
    session_id: str, process_id: str, tenant: TenantDep, processes: ProcessesDep
) -> dict:
    """A process: its status, exit code, why it ended, and how much output it produced."""
    return process_json(await processes.get(tenant.tenant_id, session_id, process_id))


@router.get(
    "/{session_id}/processes/{process_id}/logs",
    response_model=ProcessLogs,
    summary="Captured output (stdout and stderr) from a byte offset",
    responses=_COMMON,
)
async def get_process_logs(
    session_id: str,
    process_id: str,
    tenant: TenantDep,
    processes: ProcessesDep,
    offset: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=1_048_576)] = 65_536,
) -> dict:
    """Captured output (stdout and stderr merged) from a byte offset; pass `next_offset`
    back to read on. `eof` is true once everything is read and the process has ended.
    """
    return await processes.logs(
        tenant.tenant_id, session_id, process_id, offset=offset, limit=limit
    )


@router.post(
    "/{session_id}/processes/{process_id}/stdin",
    response_model=StdinRead,
    summary="Write to a running process's stdin (eof closes it)",
    responses=problem_responses(401, 404, 409, 422),
)
async def write_process_stdin(
    session_id: str,
    process_id: str,
    body: StdinWrite,
    request: Request,
    tenant: TenantDep,
    processes: ProcessesDep,
    runtime: RuntimeDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Write to a running process's stdin; `eof: true` closes it afterwards. 409
    `process_not_running` once the process has ended.
    """

    # Stdin is outside the ledger: nothing to seal the key in, so it is recorded with the
    # answer (a replay once answered; no protection against a crash before that).
    async def produce(_: IdempotencyToken | None) -> Response:
        written = await processes.write_stdin(
            tenant.tenant_id, session_id, process_id, body.data, eof=body.eof
        )
        return JSONResponse({"process_id": process_id, "bytes_written": written, "eof": body.eof})

    async def replay(_: dict[str, Any]) -> Response:
        raise IdempotentReplay(idempotency_key or "")  # recorded keys here always have answers

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


@router.post(
    "/{session_id}/processes/{process_id}/stop",
    response_model=ProcessRead,
    summary="Stop a process (SIGTERM, then SIGKILL); an ended one is returned as it is",
    responses=_COMMON,
)
async def stop_process(
    session_id: str, process_id: str, tenant: TenantDep, processes: ProcessesDep
) -> dict:
    """Stop a process (SIGTERM, then SIGKILL after a grace period). An ended process is
    returned as it is.
    """
    return process_json(await processes.stop(tenant.tenant_id, session_id, process_id))
