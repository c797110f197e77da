"""Operations routes: liveness, readiness and Prometheus metrics. None needs a key.

- `/healthz` answers 200 while the process can run a request at all: a database outage must
  not make an orchestrator restart healthy replicas.
- `/readyz` answers 200 only when this replica should get traffic: the database answers
  within the probe budget, its schema is at the migration head this code expects, and the
  process is not shutting down. Otherwise 503 `application/problem+json` with a `reason`
  (`shutting_down`, `database_unreachable`, `schema_not_migrated`, `schema_behind`).
  A database at a revision this code does not know is taken to be *ahead* (a newer release
  migrated it; migrations are expand-then-contract) and stays ready, reported as `ahead`.
- `/metrics`: Prometheus text (404 when ASR_METRICS_ENABLED=false; 401 without the bearer
  token when ASR_METRICS_TOKEN is set, see `metrics_token`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from app.api.http.deps import MetricsDep, ServicesDep
from app.api.http.problems import problem_response, problem_responses
from app.metrics import CONTENT_TYPE

router = APIRouter(tags=["operations"])

# Kubernetes probes time out after a few seconds; answer before they do.
READINESS_BUDGET_SECONDS = 2.5


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict:
    """Liveness: 200 while the process can answer at all. A database outage does not fail it,
    so an orchestrator does not restart healthy replicas.
    """
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: database reachable, schema at head, not shutting down",
    responses=problem_responses(503, always=False),
)
async def readyz(request: Request, services: ServicesDep) -> JSONResponse:
    """Readiness: 200 when this replica should get traffic (database reachable, schema at the
    head this code expects, not shutting down); 503 with a `reason` otherwise.
    """
    if services.shutdown_event.is_set():
        return _not_ready(request, "shutting_down", "the process is draining before it exits")
    head, known = services.schema_revisions
    try:
        async with asyncio.timeout(READINESS_BUDGET_SECONDS):
            current = await services.runtime.schema_revision()
    except Exception as exc:  # any failure means not ready; the class name is for operators
        return _not_ready(
            request, "database_unreachable", f"the database did not answer: {type(exc).__name__}"
        )
    schema: dict[str, Any] = {"current": current, "expected": head}
    if current is None:
        return _not_ready(request, "schema_not_migrated", "run `asr migrate`", schema=schema)
    if current != head and current in known:
        return _not_ready(request, "schema_behind", "run `asr migrate`", schema=schema)
    schema["state"] = "at_head" if current == head else "ahead"
    return JSONResponse({"status": "ok", "database": "ok", "schema": schema})


def _not_ready(request: Request, reason: str, detail: str, **extra: Any) -> JSONResponse:
    return problem_response(
        request,
        status=503,
        code="not_ready",
        title="Not ready",
        detail=detail,
        reason=reason,
        headers={"Retry-After": "5"},
        **extra,
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}},
        **problem_responses(401, 404, always=False),
    },
)
async def metrics(request: Request, registry: MetricsDep) -> Response:
    """Prometheus metrics in the text exposition format (404 when metrics are disabled).

    Takes no API key: a scraper is no tenant. When the operator sets `ASR_METRICS_TOKEN`,
    only `Authorization: Bearer <that token>` gets them; anything else is 401."""
    if registry is None:
        return problem_response(
            request, status=404, code="not_found", title="Not found", detail="metrics disabled"
        )
    return Response(registry.render(), media_type=CONTENT_TYPE)
