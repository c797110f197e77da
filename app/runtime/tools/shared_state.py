"""The `update_state` server tool: the model changes the session's shared state by a JSON
Patch (RFC 6902), the same way a frontend does (`SessionRuntime.patch_shared_state`).

The patch is decided on the state as it is when written and recorded as STATE_PATCHED under
the calling run, so an AG-UI stream of that run sends it as a STATE_DELTA. A patch that does
not apply is a tool error the model sees (and may correct): the run goes on whatever its
`on_tool_error` says, since the state is unchanged and nothing else went wrong.
"""

from __future__ import annotations

import json
from typing import Any

from app.runtime.errors import AgentSessionError
from app.runtime.session.service import SessionRuntime
from app.runtime.tools.registry import Tool, ToolContext, ToolError

UPDATE_STATE = "update_state"

_DESCRIPTION = (
    "Change the shared state (the JSON object you share with the user's app, shown to you as "
    "'Shared state') by a JSON Patch (RFC 6902): a list of operations such as "
    '{"op": "add", "path": "/todos/-", "value": "buy milk"} or '
    '{"op": "replace", "path": "/title", "value": "Plan"}. Answers with the new state.'
)
_OPERATION = {
    "type": "object",
    "properties": {
        "op": {"type": "string", "enum": ["add", "remove", "replace", "move", "copy", "test"]},
        "path": {"type": "string"},
        "from": {"type": "string"},
        "value": {},
    },
    "required": ["op", "path"],
}


def update_state_tool(runtime: SessionRuntime) -> Tool:
    """The `update_state` tool over `runtime` (its handler needs the calling session)."""

    async def handler(args: dict[str, Any], context: ToolContext) -> str:
        try:
            loaded = await runtime.patch_shared_state(
                context.tenant_id, context.session_id, args["patch"], run_id=context.run_id
            )
        except AgentSessionError as exc:
            raise ToolError(f"{exc.code}: {exc.detail}") from exc
        return json.dumps(loaded.state.shared_state, separators=(",", ":"), ensure_ascii=False)

    return Tool(
        UPDATE_STATE,
        _DESCRIPTION,
        {
            "type": "object",
            "properties": {"patch": {"type": "array", "items": _OPERATION}},
            "required": ["patch"],
            "additionalProperties": False,
        },
        handler,
        needs_context=True,
        feeds_back_errors=True,
    )
