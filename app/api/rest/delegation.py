"""Delegation route: hand a subtask to a child session and wait for its run."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from app.api.http import views
from app.api.http.deps import DelegatorDep, IdempotencyKey, ModelsDep, RuntimeDep, TenantDep
from app.api.http.idempotency import idempotent
from app.api.http.problems import problem_responses
from app.api.rest.runs import run_view
from app.api.rest.schemas import DelegateCreate, DelegateRead
from app.runtime.ports import IdempotencyToken
from app.runtime.runs.delegation import Delegated, DelegationRequest

router = APIRouter(prefix="/v1/sessions", tags=["delegation"])


@router.post(
    "/{session_id}/delegate",
    status_code=201,
    response_model=DelegateRead,
    summary="Create a child session (same root), run it with the input, return it and its run",
    responses=problem_responses(401, 404, 409, 413, 422),
)
async def delegate(
    session_id: str,
    body: DelegateCreate,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    delegator: DelegatorDep,
    models: ModelsDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Hand a subtask to a child session (same root, the caller's binding) and wait for its run
    to end; returns the child and its run.
    """
    if body.agent is not None:
        models.check(body.agent.provider)  # before the child session is created

    async def produce(token: IdempotencyToken | None) -> Response:
        return await _delegated(
            await delegator.delegate(
                tenant.tenant_id,
                session_id,
                DelegationRequest(
                    input=body.input,
                    agent=body.agent.model_dump() if body.agent is not None else None,
                    metadata=body.metadata,
                ),
                idempotency=token,
            )
        )

    async def replay(result: dict[str, Any]) -> Response:
        run = await delegator.runs.get_run(tenant.tenant_id, result["run_id"])
        return await _delegated(await delegator.finish(run))

    async def _delegated(result: Delegated) -> Response:
        child = result.session.session_id
        return JSONResponse(
            {
                "session": views.session_summary(result.session),
                "run": await run_view(runtime, result.run),
            },
            status_code=201,
            headers={"Location": f"/v1/sessions/{child}"},
        )

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)
