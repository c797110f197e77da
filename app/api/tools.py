"""Tool listing: the server tools this server offers (what an agent spec's `tools` names)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import TenantDep, ToolsDep
from app.api.problems import problem_responses
from app.api.schemas import ToolList

router = APIRouter(prefix="/v1", tags=["tools"])


@router.get(
    "/tools",
    response_model=ToolList,
    summary="Server tools available to agents (shell only with processes enabled)",
    responses=problem_responses(401),
)
async def list_tools(tenant: TenantDep, tools: ToolsDep) -> dict:
    """The server tools agents may call, with their JSON Schema parameters. `shell` appears
    only when processes are enabled.
    """
    return {
        "data": [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in tools.listing()
        ]
    }
