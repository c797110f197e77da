"""Tool listing: the server tools this server offers (what an agent spec's `tools` names):
the built-ins and the tools of the configured MCP servers (`server__tool`), with their
schemas, and the state of each MCP server. Reading it never contacts a server."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.http.deps import McpDep, TenantDep, ToolsDep
from app.api.http.problems import problem_responses
from app.api.rest.schemas import ToolList

router = APIRouter(prefix="/v1", tags=["tools"])


@router.get(
    "/tools",
    response_model=ToolList,
    summary="Built-in and MCP tools available to agents (shell only with processes enabled)",
    responses=problem_responses(401),
)
async def list_tools(tenant: TenantDep, tools: ToolsDep, mcp: McpDep) -> dict:
    """The tools agents may call (built-in, `shell` only when processes are enabled, and
    every MCP server's), with their JSON Schema parameters and where each comes from.
    """
    return {
        "data": [
            {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "source": t.source,
                "requires_approval": t.requires_approval,
            }
            for t in tools.listing()
        ],
        "mcp_servers": mcp.status(),
    }
