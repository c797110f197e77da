"""`McpCatalog`: the tools of the configured MCP servers, as tools of the registry.

At start every server is connected and asked for its tools; each becomes a registry tool
named `server__tool` (the agent names it, or `server__*` for all of a server's), with the
server's JSON schema, a call timeout and an output cap. A server that cannot be reached at
start is retried in the background (with backoff, until the service stops); its tools appear
once it answers. A call runs on the server's connection — for a server started per
workspace (`workspace_root: true`), on the connection of the calling session's workspace —
and every failure (the server died, hung, or refused the call) is a tool error for the
model, never an error of the request: the connection is dropped and made again by the next
call. Calls and results reach the ledger as TOOL_CALL / TOOL_RESULT like any tool's, and
`approval_required` (per server, or per tool in the agent spec) applies the same way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from mcp_types import Tool as McpTool

from app.runtime.tools.mcp.config import McpServerConfig
from app.runtime.tools.mcp.connection import McpConnection, McpUnavailable
from app.runtime.tools.registry import Tool, ToolContext, ToolError, ToolRegistry

log = logging.getLogger("app.mcp")

SEPARATOR = "__"
# Connections kept per server started per workspace; the least recently used one closes.
MAX_WORKSPACE_CONNECTIONS = 16
WorkspaceOf = Callable[[ToolContext], Awaitable[Path]]


def tool_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def result_output(result: CallToolResult, max_bytes: int) -> str:
    """A call's result as the model reads it: its text blocks (others named), capped."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)  # type: ignore[union-attr]
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '')}]")
        elif kind == "resource_link":
            parts.append(f"[resource: {getattr(block, 'uri', '')}]")
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(
                text if text is not None else f"[resource: {getattr(resource, 'uri', '')}]"
            )
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return cap("\n".join(parts), max_bytes)


def cap(text: str, max_bytes: int) -> str:
    """`text` cut to `max_bytes` of UTF-8 (on a character boundary), saying it was cut."""
    raw = text.encode()
    if len(raw) <= max_bytes:
        return text
    kept = raw[:max_bytes].decode(errors="ignore")
    return f"{kept}\n[output cut at {max_bytes} bytes of {len(raw)}]"


class McpCatalog:
    """The MCP servers of this service, their connections and their tools."""

    def __init__(
        self,
        servers: dict[str, McpServerConfig],
        registry: ToolRegistry,
        *,
        workspace_of: WorkspaceOf | None = None,
        discovery_cwd: Path | None = None,
        retry_seconds: float = 5.0,
    ) -> None:
        self.servers = servers
        self.registry = registry
        self.workspace_of = workspace_of
        self.discovery_cwd = discovery_cwd
        self.retry_seconds = retry_seconds
        self._connections: dict[str, McpConnection] = {}
        self._workspaces: dict[str, collections.OrderedDict[Path, McpConnection]] = {}
        self._tools: dict[str, list[str]] = {}  # server -> its registry tool names
        self._closing = asyncio.Event()
        self._retry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Discover every server's tools once (concurrently, each bounded by its connect
        and call timeouts); keep retrying the ones that failed in the background."""
        await asyncio.gather(*(self.discover(name) for name in self.servers))
        if any(name not in self._tools for name in self.servers):
            self._retry = asyncio.create_task(self._retry_discovery(), name="mcp-discovery")

    async def discover(self, server: str) -> bool:
        """List `server`'s tools and register them; False when it cannot be reached."""
        config = self.servers[server]
        try:
            listed = await self._connection(server, None).list_tools()
        except (McpUnavailable, MCPError):
            return False
        names = []
        for tool in listed:
            if config.tools is not None and tool.name not in config.tools:
                continue
            self.registry.register(self._tool(server, config, tool))
            names.append(tool_name(server, tool.name))
        self._tools[server] = names
        log.info("MCP server %s: %d tools", server, len(names))
        return True

    async def close(self) -> None:
        """Stop retrying and close every connection (stdio servers' processes stop)."""
        self._closing.set()
        if self._retry is not None:
            self._retry.cancel()
            with contextlib.suppress(BaseException):
                await self._retry
        connections = list(self._connections.values())
        for pool in self._workspaces.values():
            connections.extend(pool.values())
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    def status(self) -> list[dict[str, Any]]:
        """Each server: transport, whether its tools are known, connections, last error."""
        out = []
        for name, config in self.servers.items():
            main = self._connections.get(name)
            out.append(
                {
                    "name": name,
                    "transport": config.transport,
                    "discovered": name in self._tools,
                    "tools": list(self._tools.get(name, [])),
                    "connected": bool(main and main.connected),
                    "last_error": main.last_error if main else None,
                }
            )
        return out

    def known_patterns(self) -> list[str]:
        """`server__*` for every configured server (what blueprints may name before the
        server has been reached)."""
        return [tool_name(name, "*") for name in self.servers]

    async def _retry_discovery(self) -> None:
        wait = self.retry_seconds
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), wait)
            missing = [name for name in self.servers if name not in self._tools]
            if not missing or self._closing.is_set():
                return
            await asyncio.gather(*(self.discover(name) for name in missing))
            wait = min(wait * 2, 60.0)

    def _tool(self, server: str, config: McpServerConfig, tool: McpTool) -> Tool:
        async def handler(args: dict[str, Any], context: ToolContext) -> str:
            return await self.call(server, tool.name, args, context)

        schema = dict(tool.input_schema or {"type": "object", "properties": {}})
        return Tool(
            name=tool_name(server, tool.name),
            description=tool.description or f"{tool.name} (MCP server {server})",
            parameters=schema,
            handler=handler,
            # The call's own timeout fires first (and drops the connection); this is the
            # registry's outer bound, which also covers connecting.
            timeout_seconds=config.timeout_seconds + config.connect_timeout_seconds + 5,
            needs_context=True,
            source=f"mcp:{server}",
            requires_approval=config.approval_required,
        )

    async def call(
        self, server: str, tool: str, args: dict[str, Any], context: ToolContext | None
    ) -> str:
        """Call `tool` on `server`; every failure becomes a ToolError the model reads."""
        config = self.servers[server]
        cwd = None
        if config.workspace_root and self.workspace_of is not None and context is not None:
            cwd = await self.workspace_of(context)
        connection = self._connection(server, cwd)
        try:
            result = await connection.call(tool, args)
        except McpUnavailable as exc:
            raise ToolError(str(exc)) from None
        except MCPError as exc:
            raise ToolError(f"MCP server {server!r} refused the call: {exc.message}") from None
        except Exception as exc:  # an SDK failure we did not foresee: drop the connection
            log.warning("MCP server %s: unexpected %s", server, type(exc).__name__, exc_info=True)
            await connection.close()
            raise ToolError(
                f"MCP server {server!r} failed ({type(exc).__name__}); it will be reconnected"
            ) from None
        output = result_output(result, config.max_output_bytes)
        if result.is_error:
            raise ToolError(output or f"{tool} failed on MCP server {server!r}")
        return output

    def _connection(self, server: str, cwd: Path | None) -> McpConnection:
        config = self.servers[server]
        if cwd is None:
            found = self._connections.get(server)
            if found is None:
                found = McpConnection(server, config, cwd=self.discovery_cwd)
                self._connections[server] = found
            return found
        pool = self._workspaces.setdefault(server, collections.OrderedDict())
        found = pool.get(cwd)
        if found is None:
            found = McpConnection(server, config, cwd=cwd)
            pool[cwd] = found
            if len(pool) > MAX_WORKSPACE_CONNECTIONS:
                _, oldest = pool.popitem(last=False)
                asyncio.get_running_loop().create_task(oldest.close())
        pool.move_to_end(cwd)
        return found
