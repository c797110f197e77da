"""A2A (Agent2Agent, spec 1.0) over our sessions and runs, spoken by the official SDK.

- `GET /.well-known/agent-card.json`: the default agent's card (public, the path the
  official clients resolve from a base URL); `GET /a2a/{agent_name}/.well-known/agent-card.json`
  a blueprint's (so the base URL of agent `support` is `/a2a/support`);
- `POST /a2a` and `POST /a2a/{agent_name}`: the JSON-RPC binding (SendMessage,
  SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask, the push
  notification config methods, GetExtendedAgentCard), authenticated with an API key;
- `/a2a/rest/...` and `/a2a/{agent_name}/rest/...`: the same methods in the HTTP+JSON
  binding (`POST .../message:send`, `GET .../tasks/{id}`, ...), the SDK's `RestDispatcher`
  over the same handler, authenticated the same way. Its paths are A2A's (spec 1.0, "HTTP+JSON
  binding"), announced by the card, and not OpenAPI operations of ours, as `/mcp` is not.

The SDK's JSON-RPC dispatcher parses the envelope and answers with A2A's error codes
(-32700 parse error, -32600 invalid request, -32601 method not found, -32602 invalid params,
-32001 task not found, -32002 task not cancelable, ...); our `A2aHandler` does the work.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import JSONParseError
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.routes.rest_dispatcher import RestDispatcher
from a2a.utils.constants import PROTOCOL_VERSION_1_0, VERSION_HEADER
from a2a.utils.error_handlers import build_rest_error_payload
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from google.protobuf.json_format import ParseError
from starlette.requests import Request as StarletteRequest

from app.api.a2a.cards import REST_SUFFIX, CardMaker
from app.api.a2a.handler import A2aHandler
from app.api.a2a.schema import CARD_DOC, RPC_BODY, RPC_DOC
from app.api.http.deps import ServicesDep, TenantDep
from app.api.http.problems import problem_responses
from app.runtime.access.accounts import Principal
from app.services import Services

router = APIRouter(tags=["a2a"])

# Messages the SDK's dispatcher logs with a traceback for a caller's malformed request: the
# caller gets its -32600 / -32602 answer, so the server's log needs the line, not the trace
# (a trace in our logs means a fault of ours).
_CLIENT_ERRORS = ("Failed to validate base JSON-RPC request", "Failed to parse request params")


class _ClientErrorsWithoutTraceback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in _CLIENT_ERRORS:
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


logging.getLogger("a2a.server.routes.jsonrpc_dispatcher").addFilter(_ClientErrorsWithoutTraceback())


class _CallContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with the tenant our key authentication found."""

    def __init__(self, tenant_id: str, *, default_version: str | None) -> None:
        self.tenant_id = tenant_id
        self.default_version = default_version

    def build(self, request: StarletteRequest) -> ServerCallContext:
        context = super().build(request)
        context.state["tenant_id"] = self.tenant_id
        headers = context.state["headers"]
        if self.default_version and not headers.get(VERSION_HEADER.lower()):
            headers[VERSION_HEADER.lower()] = self.default_version
        return context


# JSON text is UTF-8 (RFC 8259). The SDK decodes a body without catching a decoding error,
# so other bytes would be answered as its own fault (-32603 with a traceback in our log on
# JSON-RPC, a 500 on HTTP+JSON); they are refused first, as its malformed JSON is.
NOT_UTF8 = "the request body is not UTF-8 text, so it is not JSON"


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode()
    except UnicodeDecodeError:
        return False
    return True


def _default_version(body: bytes) -> str | None:
    """1.0 for a call of one of 1.0's method names without `A2A-Version` (the SDK would
    assume 0.3, whose method names differ: the name alone says which one is meant)."""
    try:
        call = json.loads(body)
    except ValueError:
        return None
    method = call.get("method") if isinstance(call, dict) else None
    if not isinstance(method, str):
        return None  # the dispatcher refuses it (-32600)
    return PROTOCOL_VERSION_1_0 if method in JsonRpcDispatcher.METHOD_TO_MODEL else None


def _card(request: Request, services: Services, agent_name: str | None) -> JSONResponse:
    maker = CardMaker(services.blueprints, agent_name, str(request.base_url))
    return JSONResponse(agent_card_to_dict(maker.card()))


async def _dispatch(
    request: Request, tenant: Principal, services: Services, agent_name: str | None
) -> Response:
    body = await request.body()  # kept by the request for the dispatcher
    if not _is_utf8(body):
        return JSONResponse(build_error_response(None, JSONParseError(message=NOT_UTF8)))
    cards = CardMaker(services.blueprints, agent_name, str(request.base_url))
    handler = A2aHandler(services, tenant_id=tenant.tenant_id, agent_name=agent_name, cards=cards)
    dispatcher = JsonRpcDispatcher(
        request_handler=handler,
        context_builder=_CallContext(tenant.tenant_id, default_version=_default_version(body)),
        enable_v0_3_compat=True,
    )
    return await dispatcher.handle_requests(request)


@router.get(
    "/.well-known/agent-card.json",
    summary="A2A: the default agent's Agent Card (public)",
    responses=CARD_DOC,
)
async def get_agent_card(request: Request, services: ServicesDep) -> JSONResponse:
    """The default agent's Agent Card: its JSON-RPC endpoint (`/a2a`), capabilities
    (streaming, push notifications) and the bearer key scheme its calls need."""
    return _card(request, services, None)


@router.get(
    "/a2a/.well-known/agent-card.json",
    summary="A2A: the default agent's Agent Card, under its base URL /a2a (public)",
    responses=CARD_DOC,
)
async def get_default_agent_card(request: Request, services: ServicesDep) -> JSONResponse:
    """The same card as `/.well-known/agent-card.json`, for clients given `/a2a` as base URL."""
    return _card(request, services, None)


@router.get(
    "/a2a/{agent_name}/.well-known/agent-card.json",
    summary="A2A: a blueprint's Agent Card (public)",
    responses={**CARD_DOC, **problem_responses(422)},
)
async def get_blueprint_agent_card(
    agent_name: str, request: Request, services: ServicesDep
) -> JSONResponse:
    """The Agent Card of blueprint `agent_name`: its base URL is `/a2a/{agent_name}`."""
    return _card(request, services, agent_name)


@router.post(
    "/a2a",
    summary="A2A JSON-RPC: the default agent",
    response_class=Response,
    responses={**RPC_DOC, **problem_responses(401, 413)},
    openapi_extra=RPC_BODY,
)
async def call_agent(request: Request, tenant: TenantDep, services: ServicesDep) -> Response:
    """One A2A JSON-RPC 2.0 call (`SendMessage`, `SendStreamingMessage`, `GetTask`,
    `ListTasks`, `CancelTask`, `SubscribeToTask`, the push notification config methods,
    `GetExtendedAgentCard`): a context is a session, a task a run. Streaming methods
    answer with Server-Sent Events, each `data:` one JSON-RPC response."""
    return await _dispatch(request, tenant, services, None)


@router.post(
    "/a2a/{agent_name}",
    summary="A2A JSON-RPC: one agent blueprint",
    response_class=Response,
    responses={**RPC_DOC, **problem_responses(401, 413, 422)},
    openapi_extra=RPC_BODY,
)
async def call_blueprint_agent(
    agent_name: str, request: Request, tenant: TenantDep, services: ServicesDep
) -> Response:
    """Like `POST /a2a`, with new contexts' sessions running blueprint `agent_name`."""
    return await _dispatch(request, tenant, services, agent_name)


# The HTTP+JSON binding: (path under the agent's REST base, method, the `RestDispatcher`
# method that answers it). `/tasks/{id}` comes after `/tasks/{id}:subscribe`, whose paths
# it would match too.
REST_ROUTES = (
    ("/message:send", "POST", "on_message_send"),
    ("/message:stream", "POST", "on_message_send_stream"),
    ("/tasks/{id}:cancel", "POST", "on_cancel_task"),
    ("/tasks/{id}:subscribe", "GET", "on_subscribe_to_task"),
    ("/tasks/{id}:subscribe", "POST", "on_subscribe_to_task"),
    ("/tasks/{id}/pushNotificationConfigs/{push_id}", "GET", "get_push_notification"),
    ("/tasks/{id}/pushNotificationConfigs/{push_id}", "DELETE", "delete_push_notification"),
    ("/tasks/{id}/pushNotificationConfigs", "POST", "set_push_notification"),
    ("/tasks/{id}/pushNotificationConfigs", "GET", "list_push_notifications"),
    ("/tasks/{id}", "GET", "on_get_task"),
    ("/tasks", "GET", "list_tasks"),
    ("/extendedAgentCard", "GET", "handle_authenticated_agent_card"),
)


async def _rest(
    request: Request, tenant: Principal, services: Services, agent_name: str | None, method: str
) -> Response:
    """One HTTP+JSON call: its paths name only 1.0's methods, so a call without
    `A2A-Version` is taken as 1.0 (the SDK would assume 0.3 and refuse it)."""
    if not _is_utf8(await request.body()):  # kept by the request for the dispatcher
        return JSONResponse(build_rest_error_payload(ParseError(NOT_UTF8)), status_code=400)
    cards = CardMaker(services.blueprints, agent_name, str(request.base_url))
    handler = A2aHandler(services, tenant_id=tenant.tenant_id, agent_name=agent_name, cards=cards)
    dispatcher = RestDispatcher(
        request_handler=handler,
        context_builder=_CallContext(tenant.tenant_id, default_version=PROTOCOL_VERSION_1_0),
    )
    answer: Callable[[Request], Awaitable[Response]] = getattr(dispatcher, method)
    return await answer(request)


def _default_rest(method: str) -> Callable[..., Awaitable[Response]]:
    async def endpoint(request: Request, tenant: TenantDep, services: ServicesDep) -> Response:
        return await _rest(request, tenant, services, None, method)

    return endpoint


def _blueprint_rest(method: str) -> Callable[..., Awaitable[Response]]:
    async def endpoint(
        agent_name: str, request: Request, tenant: TenantDep, services: ServicesDep
    ) -> Response:
        return await _rest(request, tenant, services, agent_name, method)

    return endpoint


for _path, _verb, _method in REST_ROUTES:
    router.add_api_route(
        "/a2a" + REST_SUFFIX + _path,
        _default_rest(_method),
        methods=[_verb],
        include_in_schema=False,
        response_class=Response,
    )
    router.add_api_route(
        "/a2a/{agent_name}" + REST_SUFFIX + _path,
        _blueprint_rest(_method),
        methods=[_verb],
        include_in_schema=False,
        response_class=Response,
    )
