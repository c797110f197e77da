"""The MCP tools this service offers: one per agent blueprint, or `agent` (the default agent
spec) when the service has no agents file."""

from __future__ import annotations

from typing import Any

from mcp import types

from app.runtime.runs.agent import AgentSpec
from app.runtime.runs.blueprints import Blueprints

DEFAULT_TOOL = "agent"

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {"type": "string", "description": "The message for the agent."},
        "session_id": {
            "type": "string",
            "description": "Continue this conversation (the session_id of an earlier call's "
            "result); a new session when left out.",
        },
    },
    "required": ["input"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_id": {"type": "string", "description": "Pass it back to continue."},
        "run_id": {"type": "string"},
        "status": {
            "type": "string",
            "description": "queued, running, finished, failed or interrupted",
        },
        "stop_reason": {"type": ["string", "null"]},
        "approval_pending": {
            "type": "array",
            "items": {"type": "object"},
            "description": "Tool calls waiting for an approval (call_id, name, arguments).",
        },
    },
    "required": ["session_id", "run_id", "status"],
}


def tool_specs(blueprints: Blueprints) -> dict[str, tuple[str, AgentSpec]]:
    """Tool name -> (description, the agent spec a new session of it gets)."""
    found = blueprints.list()
    if not found:
        return {DEFAULT_TOOL: ("Ask the agent; pass session_id to continue.", AgentSpec())}
    return {
        b.name: (b.description or f"Ask the {b.name} agent; pass session_id to continue.", b.spec)
        for b in found
    }


def list_tools(blueprints: Blueprints) -> list[types.Tool]:
    return [
        types.Tool(
            name=name,
            description=description,
            input_schema=INPUT_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
        )
        for name, (description, _spec) in tool_specs(blueprints).items()
    ]
