"""Server-side tools: a registry of small, safe built-ins with JSON-schema parameters.

Tools run inside the run's process with a timeout. A tool that raises produces an error
output; the run then stops with BLOCKED_BY_TOOL_ERROR or feeds the error back to the model,
as the run's `on_tool_error` says.
"""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from app.runtime.models.base import ToolSpec

Handler = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling: tools that act on their session (processes, delegation) need it."""

    tenant_id: str
    session_id: str
    run_id: str | None = None
    call_id: str | None = None


ContextHandler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


class ToolError(Exception):
    """A tool failed; the message becomes the tool's (error) output."""


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler | ContextHandler
    timeout_seconds: float = 10.0
    # True: the handler is a ContextHandler and receives the calling session's ToolContext.
    needs_context: bool = False
    # Where it comes from: "builtin", or "mcp:<server>" for an MCP server's tool.
    source: str = "builtin"
    # Every call waits for an approval, whatever the agent spec says (an operator's choice).
    requires_approval: bool = False
    # True: a failure is the model's own mistake, which it can correct (a patch that does
    # not apply): it is fed back whatever the run's `on_tool_error` says.
    feeds_back_errors: bool = False

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_OPS: dict[str, Callable[[float, float], float]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
}


async def _arithmetic(args: dict[str, Any]) -> str:
    op, a, b = args["op"], args["a"], args["b"]
    if op == "div" and b == 0:
        raise ToolError("division by zero")
    result = _OPS[op](a, b)
    return json.dumps(int(result) if float(result).is_integer() else result)


async def _current_time(args: dict[str, Any]) -> str:
    return datetime.now(UTC).isoformat()


async def _echo(args: dict[str, Any]) -> str:
    return str(args["text"])


async def _sleep(args: dict[str, Any]) -> str:
    await asyncio.sleep(args["ms"] / 1000)
    return f"slept {args['ms']} ms"


async def _fail(args: dict[str, Any]) -> str:
    raise ToolError(str(args.get("message") or "the tool failed"))


BUILTINS: tuple[Tool, ...] = (
    Tool(
        "arithmetic",
        "Add, subtract, multiply or divide two numbers.",
        _schema(
            {
                "op": {"type": "string", "enum": list(_OPS)},
                "a": {"type": "number"},
                "b": {"type": "number"},
            },
            ["op", "a", "b"],
        ),
        _arithmetic,
    ),
    Tool("current_time", "The current UTC time (ISO 8601).", _schema({}, []), _current_time),
    Tool("echo", "Return the given text.", _schema({"text": {"type": "string"}}, ["text"]), _echo),
    Tool(
        "sleep",
        "Wait some milliseconds (at most 30000).",
        _schema({"ms": {"type": "integer", "minimum": 0, "maximum": 30000}}, ["ms"]),
        _sleep,
        timeout_seconds=31.0,
    ),
    Tool(
        "fail",
        "Always fails with the given message (for testing error handling).",
        _schema({"message": {"type": "string"}}, []),
        _fail,
    ),
)

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def check_arguments(schema: dict[str, Any], raw: str) -> dict[str, Any]:
    """Parse and check arguments against the (flat) schema; raises ToolError."""
    try:
        args = json.loads(raw or "{}")
    except (ValueError, RecursionError) as exc:  # the parser recurses: a deep value is refused
        raise ToolError("arguments are not valid JSON") from exc
    if not isinstance(args, dict):
        raise ToolError("arguments must be a JSON object")
    props: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in args:
            raise ToolError(f"missing argument {name!r}")
    for name, value in args.items():
        spec = props.get(name)
        if spec is None:
            if schema.get("additionalProperties") is False:
                raise ToolError(f"unknown argument {name!r}")
            continue
        types = _TYPES.get(spec.get("type", ""), (object,))
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise ToolError(f"argument {name!r} must be {spec.get('type')}")
        if "enum" in spec and value not in spec["enum"]:
            raise ToolError(f"argument {name!r} must be one of {spec['enum']}")
        if "maximum" in spec and value > spec["maximum"]:
            raise ToolError(f"argument {name!r} must be at most {spec['maximum']}")
        if "minimum" in spec and value < spec["minimum"]:
            raise ToolError(f"argument {name!r} must be at least {spec['minimum']}")
    return args


class ToolRegistry:
    def __init__(self, tools: tuple[Tool, ...] = BUILTINS) -> None:
        self._tools = {t.name: t for t in tools}

    def register(self, tool: Tool) -> None:
        """Add a tool built outside the runtime's defaults (its handler injected by main)."""
        self._tools[tool.name] = tool

    def listing(self) -> list[Tool]:
        """Every registered server tool, by name."""
        return [self._tools[n] for n in self.names()]

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def available(self, allowed: list[str]) -> list[Tool]:
        """The agent's server tools: those it names, or every built-in when it names none.

        MCP tools are offered only by name: `server__tool`, or `server__*` for all of a
        server's tools (an operator's server is not every agent's business).
        """
        if not allowed:
            return [t for t in self._tools.values() if t.source == "builtin"]
        chosen: dict[str, Tool] = {}
        for name in allowed:
            if name.endswith("__*"):
                prefix = name[:-1]
                for tool in self.listing():
                    if tool.source != "builtin" and tool.name.startswith(prefix):
                        chosen.setdefault(tool.name, tool)
            elif name in self._tools:
                chosen.setdefault(name, self._tools[name])
        return list(chosen.values())

    async def execute(
        self, tool: Tool, raw_arguments: str, context: ToolContext | None = None
    ) -> str:
        """Run a tool; raises ToolError on bad arguments, failure or timeout."""
        args = check_arguments(tool.parameters, raw_arguments)
        if tool.needs_context:
            if context is None:
                raise ToolError(f"{tool.name} can only run inside a session")
            work = cast(ContextHandler, tool.handler)(args, context)
        else:
            work = cast(Handler, tool.handler)(args)
        try:
            return await asyncio.wait_for(work, timeout=tool.timeout_seconds)
        except TimeoutError as exc:
            raise ToolError(f"{tool.name} timed out after {tool.timeout_seconds} s") from exc
