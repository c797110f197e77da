"""Memory routes: compact now, and preview the context projection."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import RunsDep, RuntimeDep, TenantDep
from app.api.problems import problem_responses
from app.api.schemas import CompactRead, CompactRequest, ContextRead
from app.runtime.agent import AgentSpec
from app.runtime.compact import compact_session
from app.runtime.context import budget_of, project

router = APIRouter(prefix="/v1/sessions", tags=["memory"])


@router.post(
    "/{session_id}/compact",
    response_model=CompactRead,
    summary="Compact memory now (truncate, summarize or tool_results); or reset the breaker",
    responses=problem_responses(401, 404, 409, 422, 502),
)
async def compact(
    session_id: str,
    tenant: TenantDep,
    runtime: RuntimeDep,
    runs: RunsDep,
    body: CompactRequest | None = None,
) -> dict:
    request = body or CompactRequest()
    session = await runtime.get(tenant.tenant_id, session_id)
    overrides = {
        k: v
        for k, v in (
            ("keep_last", request.keep_last),
            ("tool_output_max_chars", request.tool_output_max_chars),
        )
        if v is not None
    }
    loaded, result = await compact_session(
        runtime,
        tenant.tenant_id,
        session_id,
        runs.summarizer_for(session.agent),
        strategy=request.strategy,
        overrides=overrides,
        reset_breaker=request.reset_breaker,
    )
    return {
        "session_id": session_id,
        "seq": loaded.state.seq,
        "result": result,
        "breaker": loaded.state.breaker,
        "estimated_tokens": loaded.state.estimated_tokens(),
        "items": len(loaded.state.items),
    }


@router.get(
    "/{session_id}/context",
    response_model=ContextRead,
    summary="Preview the context projection for a budget (memory is not changed)",
    responses=problem_responses(401, 404, 422),
)
async def context(
    session_id: str,
    tenant: TenantDep,
    runtime: RuntimeDep,
    max_input_tokens: Annotated[int | None, Query(ge=1)] = None,
    reserved_output_tokens: Annotated[int | None, Query(ge=0)] = None,
) -> dict:
    loaded = await runtime.load(tenant.tenant_id, session_id)
    spec = AgentSpec.model_validate(loaded.session.agent or {})
    budget = budget_of(
        max_input_tokens if max_input_tokens is not None else spec.max_input_tokens,
        reserved_output_tokens
        if reserved_output_tokens is not None
        else (spec.reserved_output_tokens if max_input_tokens is None else 0),
    )
    items, report = project(loaded.state.items, loaded.state.summary, budget)
    return {
        "session_id": session_id,
        "seq": loaded.state.seq,
        "report": report,
        "items": items,
        "summary": loaded.state.summary,
    }
