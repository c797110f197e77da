"""`GET /v1/models`: the model profiles an agent spec can name, without their secrets.

Profiles are server-wide configuration, the same for every tenant; any valid key may read
them. Each says where its credential comes from (`env:NAME`, `file:PATH`), never its value,
and whether it is configured; when not, `missing` names the setting to fix.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.api.http.deps import ModelsDep, TenantDep
from app.api.http.problems import problem_responses
from app.api.rest.schemas import ModelProfileList

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get(
    "",
    response_model=ModelProfileList,
    summary="Model profiles an agent's `provider` can name (no secrets)",
    responses=problem_responses(401),
)
async def list_models(tenant: TenantDep, models: ModelsDep) -> dict:
    """The model profiles this server has: their kind, endpoint, default model, timeouts,
    retry policy and limits, and where each one's key is read from (`env:NAME`,
    `file:PATH`) — never the key. `configured: false` with `missing` names the setting that
    would make a profile usable; a session or run naming such a profile is refused with 422.
    """
    return {"data": models.listing()}
