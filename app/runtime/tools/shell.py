"""The `shell` server tool: start a program in the session's workspace, through the
`ProcessManager` (registered only when the process plane is enabled)."""

from __future__ import annotations

import json
from typing import Any

from app.runtime.errors import AgentSessionError
from app.runtime.tools.processes import ProcessManager
from app.runtime.tools.registry import Tool, ToolContext, ToolError

SHELL = "shell"
TOOL_OUTPUT_MAX = 8192  # a tool result is memory: a long output is read through the logs route


def shell_tool(manager: ProcessManager) -> Tool:
    """The `shell` server tool: start a process in the session's workspace.

    It waits up to `wait_ms` (default 500) for the process to end: a short command answers
    with its exit code and output; a longer one answers at once with its process id and
    keeps running, to be read and stopped through the processes routes.
    """

    async def handler(args: dict[str, Any], context: ToolContext) -> str:
        try:
            view = await manager.start(
                context.tenant_id,
                context.session_id,
                args["command"],
                run_id=context.run_id,
                timeout_seconds=args.get("timeout_seconds"),
                stdin=args.get("stdin"),
            )
        except AgentSessionError as exc:
            raise ToolError(f"{exc.code}: {exc.detail}") from exc
        view = await manager.settle(
            context.tenant_id,
            context.session_id,
            view["process_id"],
            seconds=args.get("wait_ms", 500) / 1000,
        )
        answer = {k: view[k] for k in ("process_id", "pid", "status", "exit_code", "reason")}
        if "output" in view:
            answer["output"] = view["output"][:TOOL_OUTPUT_MAX]
            answer["output_bytes"] = view["output_bytes"]
        return json.dumps(answer)

    allowed = ", ".join(sorted(manager.policy.allowlist)) or "any program not denied"
    return Tool(
        SHELL,
        "Start a program in the session's workspace (no shell: one command line, an allowed "
        "program by name). Answers with its exit code and output if it ends within wait_ms, "
        f"else with its process id while it keeps running in the background. Allowed: {allowed}.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "wait_ms": {"type": "integer", "minimum": 0, "maximum": 10_000},
                "timeout_seconds": {"type": "number", "minimum": 0.1},
                "stdin": {"type": "string"},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        handler,
        timeout_seconds=15.0,
        needs_context=True,
    )
