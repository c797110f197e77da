"""Memory routes: compact now, and preview the context projection."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from app.api.http.deps import IdempotencyKey, ModelsDep, RunsDep, RuntimeDep, TenantDep
from app.api.http.idempotency import idempotent
from app.api.http.problems import problem_responses
from app.api.rest.schemas import CompactRead, CompactRequest, ContextRead
from app.runtime.memory.calibration import key_of, ratio_of, scaled
from app.runtime.memory.compact import compact_result_of, compact_session
from app.runtime.memory.context import budget_of, project
from app.runtime.ports import IdempotencyToken
from app.runtime.runs.agent import AgentSpec
from app.runtime.session.service import Loaded

router = APIRouter(prefix="/v1/sessions", tags=["memory"])


@router.post(
    "/{session_id}/compact",
    response_model=CompactRead,
    summary="Compact memory now (truncate, summarize or tool_results); or reset the breaker",
    responses=problem_responses(401, 404, 409, 422, 502),
)
async def compact(
    session_id: str,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    runs: RunsDep,
    body: CompactRequest | None = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Compact memory now with a strategy (`truncate`, `summarize` or `tool_results`; default:
    the agent's policy), or only close the auto-compaction breaker (`reset_breaker`). Writes
    MEMORY_COMPRESS; the items dropped stay in the ledger.
    """
    asked = body or CompactRequest()
    overrides = {
        k: v
        for k, v in (
            ("keep_last", asked.keep_last),
            ("tool_output_max_chars", asked.tool_output_max_chars),
        )
        if v is not None
    }

    async def produce(token: IdempotencyToken | None) -> Response:
        session = await runtime.get(tenant.tenant_id, session_id)
        loaded, result = await compact_session(
            runtime,
            tenant.tenant_id,
            session_id,
            runs.summarizer_for(session.agent),
            strategy=asked.strategy,
            overrides=overrides,
            reset_breaker=asked.reset_breaker,
            idempotency=token,
        )
        return _compacted(session_id, loaded, result)

    async def replay(result: dict) -> Response:
        committed = await runtime.committed_events(tenant.tenant_id, result)
        loaded = await runtime.as_committed(tenant.tenant_id, result)
        return _compacted(session_id, loaded, compact_result_of(committed.events))

    return await idempotent(request, runtime, tenant, idempotency_key, produce, replay)


def _compacted(session_id: str, loaded: Loaded, result: dict[str, Any] | None) -> Response:
    return JSONResponse(
        {
            "session_id": session_id,
            "seq": loaded.state.seq,
            "result": result,
            "breaker": loaded.state.breaker,
            "estimated_tokens": loaded.state.estimated_tokens(),
            "items": len(loaded.state.items),
        }
    )


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
    models: ModelsDep,
    max_input_tokens: Annotated[int | None, Query(ge=1)] = None,
    reserved_output_tokens: Annotated[int | None, Query(ge=0)] = None,
) -> dict:
    """Preview the context projection for a token budget: which items would be sent to the
    model and which dropped. Memory is not changed.
    """
    loaded = await runtime.load(tenant.tenant_id, session_id)
    spec = AgentSpec.model_validate(loaded.session.agent or {})
    key = key_of(spec.provider, spec.model or models.default_model(spec.provider))
    ratio = ratio_of(loaded.state.calibration, key)
    budget = budget_of(
        max_input_tokens if max_input_tokens is not None else spec.max_input_tokens,
        reserved_output_tokens
        if reserved_output_tokens is not None
        else (spec.reserved_output_tokens if max_input_tokens is None else 0),
    )
    items, report = project(loaded.state.items, loaded.state.summary, budget, ratio)
    heuristic = loaded.state.estimated_tokens()
    learnt = loaded.state.calibration.get(key)
    return {
        "session_id": session_id,
        "seq": loaded.state.seq,
        "report": report,
        "items": items,
        "summary": loaded.state.summary,
        "estimate": {
            "tokens": scaled(heuristic, ratio),
            "heuristic_tokens": heuristic,
            "basis": "calibrated" if learnt else "heuristic",
            "calibration_key": key,
            "ratio": ratio,
            "samples": int(learnt["samples"]) if learnt else 0,
        },
    }
