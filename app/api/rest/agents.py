"""`GET /v1/agents`: the agent blueprints of this service (ASR_AGENTS_FILE).

Blueprints are server-wide configuration, the same for every tenant; any valid key may read
them. They carry no secrets (provider keys live in server settings).
"""

from __future__ import annotations

from fastapi import APIRouter

from app.api.http.deps import BlueprintsDep, TenantDep
from app.api.http.problems import problem_responses
from app.api.rest.schemas import AgentList

router = APIRouter(prefix="/v1/agents", tags=["agents"])


@router.get(
    "",
    response_model=AgentList,
    summary="Named agent blueprints a session can use (`agent_name`)",
    responses=problem_responses(401),
)
async def list_agents(tenant: TenantDep, blueprints: BlueprintsDep) -> dict:
    """The named agent blueprints of this service (`ASR_AGENTS_FILE`), usable as
    `agent_name` when creating a session.
    """
    return {"data": [blueprint.to_json() for blueprint in blueprints.list()]}
