"""One live connection to an MCP server, through the official SDK's `Client`.

The SDK's client is an async context (its transport runs in a task group), which must be
entered and left by one task: a connection therefore lives in a task of its own (`_hold`),
and calls from runs reach it through the client object. A call that fails on the transport
(the server died, the pipe broke, the HTTP session vanished) or that times out (the server
hangs) closes the connection — a stdio server's process is stopped — and raises
`McpUnavailable`; the next call connects again. Every wait here is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Tool
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

from app.runtime.tools.mcp.config import McpServerConfig

log = logging.getLogger("app.mcp")


class McpUnavailable(Exception):
    """The server could not be reached, died, or did not answer in time (message for the
    model: what happened and that the server will be reconnected)."""


class McpConnection:
    """A lazily opened, self-healing connection to one MCP server (one workspace, for a
    server started per workspace)."""

    def __init__(self, name: str, config: McpServerConfig, *, cwd: Path | None = None) -> None:
        self.name = name
        self.config = config
        self.cwd = cwd
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self.connects = 0  # how many times it connected (tests see the reconnects)
        self.last_error: str | None = None

    @property
    def connected(self) -> bool:
        return self._client is not None and self._task is not None and not self._task.done()

    async def list_tools(self) -> list[Tool]:
        """Every tool the server lists (all pages, at most 100 pages)."""
        client = await self._ensure()
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(100):
            try:
                page = await asyncio.wait_for(
                    client.list_tools(cursor=cursor), self.config.timeout_seconds
                )
            except (MCPError, OSError, TimeoutError, httpx2.HTTPError) as exc:
                await self._fail(exc, "listing tools")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call `tool`; raises McpUnavailable (and drops the connection) on a transport
        failure or a timeout."""
        client = await self._ensure()
        timeout = self.config.timeout_seconds
        try:
            return await asyncio.wait_for(
                client.call_tool(tool, arguments, read_timeout_seconds=timeout), timeout + 1
            )
        except TimeoutError as exc:
            await self._fail(exc, f"calling {tool} (no answer in {timeout:g} s)")
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                await self._fail(exc, f"calling {tool} (no answer in {timeout:g} s)")
            if exc.code == CONNECTION_CLOSED:
                await self._fail(exc, f"calling {tool} (the connection closed)")
            raise  # a protocol error of the call itself (unknown tool, bad arguments)
        except (OSError, httpx2.HTTPError, anyio.BrokenResourceError) as exc:
            await self._fail(exc, f"calling {tool}")
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close the connection (a stdio server's process stops); bounded."""
        task, closing = self._task, self._closing
        self._client, self._task, self._closing = None, None, None
        if task is None or closing is None:
            return
        closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except (TimeoutError, Exception):  # the SDK's own shutdown waits are bounded too
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5)

    async def _fail(self, exc: BaseException, doing: str) -> None:
        self.last_error = f"{type(exc).__name__} while {doing}"
        log.warning("MCP server %s failed %s: %s", self.name, doing, type(exc).__name__)
        await self.close()
        raise McpUnavailable(
            f"MCP server {self.name!r} failed while {doing}; it will be reconnected "
            "for the next call"
        ) from None

    async def _ensure(self) -> Client:
        if self.connected:
            assert self._client is not None
            return self._client
        async with self._lock:
            if self.connected:
                assert self._client is not None
                return self._client
            await self.close()  # a connection whose task ended: release what it held
            ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
            closing = asyncio.Event()
            task = asyncio.create_task(self._hold(ready, closing), name=f"mcp:{self.name}")
            try:
                client = await asyncio.wait_for(
                    asyncio.shield(ready), self.config.connect_timeout_seconds
                )
            except BaseException as exc:
                closing.set()
                task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, 5)
                self.last_error = f"{type(exc).__name__} while connecting"
                log.warning("MCP server %s: cannot connect (%s)", self.name, type(exc).__name__)
                raise McpUnavailable(
                    f"MCP server {self.name!r} cannot be reached right now; it will be "
                    "retried on the next call"
                ) from None
            self._client, self._task, self._closing = client, task, closing
            self.connects += 1
            self.last_error = None
            return client

    async def _hold(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        """Open the client, hand it over, and keep it open until `closing` is set."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(self._target(stack), raise_exceptions=False)
                await stack.enter_async_context(client)
                if not ready.done():
                    ready.set_result(client)
                await closing.wait()
        except BaseException as exc:  # reported to the caller waiting for `ready`, if any
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpUnavailable())
            if not isinstance(exc, Exception):
                raise

    def _target(self, stack: contextlib.AsyncExitStack) -> Any:
        config = self.config
        if config.command is not None:
            env = {name: value.resolve() or "" for name, value in config.env.items()}
            parameters = StdioServerParameters(
                command=config.command[0],
                args=config.command[1:],
                env=env or None,
                cwd=self.cwd or config.cwd,
            )
            # The server's stderr is its own business: discarded unless the operator names
            # a file, so whatever it prints (its own token, say) never reaches our log.
            errlog = open(config.stderr_file or os.devnull, "a", encoding="utf-8")
            stack.callback(errlog.close)
            return stdio_client(parameters, errlog=errlog)
        assert config.url is not None
        headers = {name: value.resolve() or "" for name, value in config.headers.items()}
        http = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(config.connect_timeout_seconds, read=config.timeout_seconds + 5),
        )
        stack.push_async_callback(http.aclose)
        return streamable_http_client(config.url, http_client=http)
