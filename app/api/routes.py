"""Every router of the API, included in one place. The OpenAPI document lists them in
`ROUTERS`' order; requests are matched against the busiest first (`FIRST`)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute

from app.api.a2a import routes as a2a
from app.api.admin import routes as admin
from app.api.ag_ui import connect as ag_ui_connect
from app.api.ag_ui import routes as ag_ui
from app.api.mcp.endpoint import McpEndpoint, mcp_route
from app.api.openapi import docs
from app.api.ops import debug
from app.api.ops import routes as ops
from app.api.rest import (
    agents,
    delegation,
    event_types,
    events,
    export,
    memory,
    models,
    processes,
    runs,
    schedules,
    sessions,
    shared_state,
    tools,
    webhooks,
)
from app.api.streams import routes as streams
from app.ui import router as ui_router

ROUTERS: tuple[APIRouter, ...] = (
    sessions.router,
    shared_state.router,
    memory.router,
    runs.router,
    runs.oneshot,
    schedules.router,
    # Before `ag_ui.router`: its `/v1/ag-ui/{agent_name}` would take `connect` and `stop`.
    ag_ui_connect.router,
    ag_ui.router,
    a2a.router,
    processes.router,
    delegation.router,
    tools.router,
    events.router,
    export.router,
    streams.router,
    agents.router,
    models.router,
    event_types.router,
    webhooks.router,
    ops.router,
    admin.router,
    ui_router,
    docs.router,
)

# Matched before the others: FastAPI tries a request against the routes one by one, some
# microseconds each, and a run's POST and a stream's GET are most of what a replica serves
# (behind a hundred routes, the match took longer than reading the session from its cache).
# Their paths overlap no earlier router's, so moving them changes no match.
FIRST: tuple[APIRouter, ...] = (runs.router, streams.router)


def documented_paths() -> list[str]:
    """The API's paths in the order the OpenAPI document lists them (`ROUTERS`' order)."""
    paths = (getattr(route, "path", "") for router in ROUTERS for route in router.routes)
    return list(dict.fromkeys(paths))


def include_routers(
    app: FastAPI, *, mcp: McpEndpoint | None = None, debug_endpoints: bool = False
) -> list[BaseRoute]:
    """Include every router (`/debug` only when asked) and the MCP endpoint at `/mcp` (an
    ASGI app of the MCP SDK, not an OpenAPI operation), and return their routes: the ones
    the access middleware labels requests by (the app's own, such as /openapi.json, are
    not)."""
    routers = (*ROUTERS, *((debug.router,) if debug_endpoints else ()))
    for router in (*FIRST, *(r for r in routers if r not in FIRST)):
        app.include_router(router)
    routes = [route for router in routers for route in router.routes]
    if mcp is not None:
        route = mcp_route(mcp)
        app.router.routes.append(route)
        routes.append(route)
    return routes
