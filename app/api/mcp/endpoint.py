"""`/mcp`: the official MCP SDK's Streamable HTTP transport, stateless, behind our bearer keys.

Stateless, so that any replica answers any request: the SDK keeps no session between
requests, and a call's state is its run (in the ledger). It serves the revisions the SDK
serves: the `initialize` handshake (2025-11-25 and before) and the per-request envelope of
2026-07-28.

`McpEndpoint` is the ASGI app at `/mcp`:
- it authenticates the caller's API key like every route (`Authorization: Bearer`); without
  a valid one the answer is our 401 problem with `WWW-Authenticate: Bearer`;
- it gives a client that comes without one an `Mcp-Session-Id`, an opaque random id that
  names nothing on the server: the client sends it back on every request, and it scopes the
  call keys of that client (`keys.py`) on whichever replica they land;
- GET (a stream for server-initiated messages) and DELETE (the end of a session) get 405,
  as the protocol allows a server without either: nothing is held open or kept per client.

The SDK's session manager needs its task group running: `run()` is entered by the app's
lifespan (`app.main`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from app.api.mcp import catalog
from app.api.mcp.approvals import answered, ask, can_elicit
from app.api.mcp.calls import (
    Call,
    CallFailed,
    CallServices,
    error_result,
    find_run,
    follow_to_end,
    pending_approvals,
    result_of,
    start_or_find,
)
from app.api.mcp.keys import call_token, cancel_token, new_session_id
from app.runtime.access.accounts import Principal
from app.runtime.errors import AgentSessionError, Unauthorized
from app.services import Services, services_of

log = logging.getLogger("app")

PATH = "/mcp"
CONNECTION_HEADER = "mcp-session-id"
_PRINCIPAL = "mcp_principal"
_SERVICES = "mcp_services"
# At most this long for a cancel to find and stop its call's run.
CANCEL_SECONDS = 10.0


def _caller(ctx: ServerRequestContext[Any, Any]) -> tuple[Principal, Services, str | None]:
    """The authenticated tenant, the app's services and the client's connection id, as the
    endpoint left them on the request."""
    request = ctx.request
    if not isinstance(request, Request):
        raise MCPError(types.INTERNAL_ERROR, "no HTTP request")
    state = request.scope.get("state", {})
    return state[_PRINCIPAL], state[_SERVICES], request.headers.get(CONNECTION_HEADER)


async def _list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    _principal, services, _connection = _caller(ctx)
    return types.ListToolsResult(tools=catalog.list_tools(services.blueprints))


async def _call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    principal, services, connection = _caller(ctx)
    specs = catalog.tool_specs(services.blueprints)
    if params.name not in specs:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
    arguments = params.arguments or {}
    text, session_id = arguments.get("input"), arguments.get("session_id")
    if not isinstance(text, str) or not (session_id is None or isinstance(session_id, str)):
        raise MCPError(
            types.INVALID_PARAMS, "arguments: input (string) and optional session_id (string)"
        )
    assert ctx.request_id is not None
    token = call_token(connection, ctx.request_id, params.name, arguments)
    call = Call(
        tenant_id=principal.tenant_id,
        tool=params.name,
        agent=specs[params.name][1],
        input=text,
        session_id=session_id,
        token=token,
        new_session_id=new_session_id(token),
    )
    calls = CallServices(
        runtime=services.runtime,
        runs=services.runs,
        streams=services.run_streams,
        wait_seconds=services.settings.run_wait_seconds,
    )

    async def progress(step: float, message: str | None) -> None:
        await ctx.session.report_progress(step, None, message)

    try:
        run = await answered(calls, call, params) or await start_or_find(calls, call)
        done = await follow_to_end(calls, call.tenant_id, run, progress)
        pending = await pending_approvals(services.runtime, done)
    except CallFailed as exc:
        return error_result(str(exc))
    except AgentSessionError as exc:
        return error_result(f"{getattr(exc, 'code', type(exc).__name__)}: {exc}")
    if pending and can_elicit(ctx):
        return ask(done, pending)
    return result_of(done, pending)


async def _cancelled(
    ctx: ServerRequestContext[Any, Any], params: types.CancelledNotificationParams
) -> None:
    """A `notifications/cancelled` that reached a request of its own (stateless: the call it
    names is served elsewhere, on this replica or another): cancel that call's run."""
    principal, services, connection = _caller(ctx)
    if not connection or params.request_id is None:
        return  # a call without a connection id ends when its stream closes
    token = cancel_token(connection, params.request_id)
    calls = CallServices(
        runtime=services.runtime,
        runs=services.runs,
        streams=services.run_streams,
        wait_seconds=0,
    )
    # Shielded: the stateless transport ends this notification's own request (and cancels
    # what it started) as soon as it has answered 202.
    try:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_SECONDS):
            run = await find_run(calls, principal.tenant_id, token)
            if run is not None:
                await services.runs.cancel(principal.tenant_id, run.session_id, run.run_id)
    except AgentSessionError as exc:
        log.info("mcp cancel of request %r: %s", params.request_id, exc)


def build_server() -> Server[Any]:
    server: Server[Any] = Server(
        "agent-session-runtime",
        version="0.1.0",
        instructions="Each tool is an agent: pass `input`, and `session_id` to continue.",
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
    )
    server.add_notification_handler(
        "notifications/cancelled", types.CancelledNotificationParams, _cancelled
    )
    return server


class McpEndpoint:
    """The ASGI app at `/mcp` (module docstring)."""

    def __init__(self) -> None:
        self.server = build_server()
        self.manager = StreamableHTTPSessionManager(app=self.server, stateless=True)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The SDK's task group, for the app's lifespan. It lives in a task of its own: an
        anyio task group must end in the task that began it, and a lifespan may be entered
        and left by different tasks (a test's fixture)."""
        started, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(hold(), name="mcp-transport")
        ready = asyncio.create_task(started.wait())
        await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if task.done():
            task.result()  # it failed to start: raise its error
        try:
            yield
        finally:
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        services = services_of(scope["app"])
        headers = Request(scope).headers
        authorization = headers.get("authorization", "")
        scheme, _, raw = authorization.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise Unauthorized()
        principal = await services.accounts.authenticate(raw.strip())
        state = scope.setdefault("state", {})
        state[_PRINCIPAL] = principal
        state[_SERVICES] = services
        if scope["method"] != "POST":
            # Stateless: no stream to open (GET) and no session to end (DELETE); the
            # protocol's answer for both is 405, which clients take in their stride.
            await _not_allowed(scope, receive, send)
            return
        if CONNECTION_HEADER not in headers:
            send = _with_connection_id(send, secrets.token_hex(16))
        await self.manager.handle_request(scope, receive, send)


async def _not_allowed(scope: Scope, receive: Receive, send: Send) -> None:
    body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Method Not Allowed"}}'
    response = Response(
        body, status_code=405, media_type="application/json", headers={"Allow": "POST"}
    )
    await response(scope, receive, send)


def _with_connection_id(send: Send, connection: str) -> Send:
    """`send`, adding an `Mcp-Session-Id` to the response (the client keeps the one of its
    `initialize`)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            headers.append((CONNECTION_HEADER.encode(), connection.encode()))
            message = {**message, "headers": headers}
        await send(message)

    return sending


def mcp_route(endpoint: McpEndpoint) -> Route:
    """`/mcp`: POST carries the protocol; GET and DELETE are answered 405 (stateless)."""
    return Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"])
