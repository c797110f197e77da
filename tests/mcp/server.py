"""A real MCP server for tests, built with the SDK's server side (`MCPServer`).

Tools: `add(a, b)`, `slow(ms)` (sleeps: the timeout test), `shout(text)` (its output is
long: the output cap), `die()` (the process exits mid-call: a server killed under a call),
`where()` (the server's working directory and the roots its client offers).
Over Streamable HTTP every request must carry `X-Test-Token` equal to the environment's
`MCP_TEST_TOKEN` (a header sent by secret reference). Run:
    python -m tests.mcp.server                      # stdio
    python -m tests.mcp.server --http --port N      # Streamable HTTP at /mcp
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("asr-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def slow(ms: int) -> str:
    """Wait `ms` milliseconds, then answer."""
    await asyncio.sleep(ms / 1000)
    return f"waited {ms} ms"


@server.tool()
def shout(text: str, times: int = 1) -> str:
    """The text in capitals, `times` times."""
    return text.upper() * times


@server.tool()
def die() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool()
async def where(ctx: Context) -> str:
    """The server's working directory, and the roots its client offers."""
    roots: list[str] = []
    try:
        listed = await ctx.session.list_roots()
        roots = [str(r.uri) for r in listed.roots]
    except Exception as exc:  # a client without roots
        roots = [f"no roots: {type(exc).__name__}"]
    return f"cwd={os.getcwd()} roots={roots}"


def http_app() -> Any:
    """The Streamable HTTP app, refusing requests without the expected token header."""
    from starlette.responses import JSONResponse

    inner = server.streamable_http_app(streamable_http_path="/mcp")
    token = os.environ.get("MCP_TEST_TOKEN", "")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"x-test-token", b"").decode() != token:
                await JSONResponse({"error": "bad token"}, status_code=401)(scope, receive, send)
                return
        await inner(scope, receive, send)

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.http:
        import uvicorn

        uvicorn.run(http_app(), host="127.0.0.1", port=args.port, log_level="warning")
    else:
        server.run("stdio")
