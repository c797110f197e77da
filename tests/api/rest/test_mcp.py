"""Issue #19 (4): MCP tools from a real MCP server (tests/mcp/server.py, the SDK's server
side), over stdio and over Streamable HTTP: discovery into `GET /v1/tools`, a call that
waits for its approval, a call that times out, a server killed in the middle of a call and
reconnected, the output cap, and a stdio server started in the session's workspace. After
each, the ledger is gapless and the run ended with a stop reason; nothing is a 500.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.services import services_of
from app.settings import Settings
from tests.conftest import ROOT, TenantKey, free_port
from tests.mcp.process import HttpServer

TOKEN_ENV = "ASR_TEST_MCP_TOKEN"
TOKEN = "mcp-CANARYtoken0123456789"
SERVERS = ["loc", "web"]  # stdio, Streamable HTTP


@pytest.fixture(scope="module")
def http_mcp() -> Iterator[HttpServer]:
    server = HttpServer(port=free_port(), token=TOKEN)
    server.start()
    yield server
    server.stop()


def mcp_settings(settings: Settings, http_mcp: HttpServer, root: Path) -> Settings:
    common = {"timeout_seconds": 2, "connect_timeout_seconds": 10, "max_output_bytes": 256}
    stdio = {
        "command": [sys.executable, "-m", "tests.mcp.server"],
        "env": {"PYTHONPATH": {"value": str(ROOT)}},
        **common,
    }
    return settings.model_copy(
        update={
            "workspace_root": root,
            "mcp_servers": {
                "loc": stdio,
                "web": {
                    "url": http_mcp.url,
                    "headers": {"X-Test-Token": {"env": TOKEN_ENV}},
                    **common,
                },
                "ws": {**stdio, "workspace_root": True},
                "gated": {**stdio, "approval_required": True, "tools": ["add"]},
                "gone": {
                    "url": f"http://127.0.0.1:{free_port()}/mcp",
                    "connect_timeout_seconds": 2,
                },
            },
        }
    )


@pytest.fixture(scope="module")
async def mcp_app(
    settings: Settings, http_mcp: HttpServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[FastAPI]:
    os.environ[TOKEN_ENV] = TOKEN
    root = tmp_path_factory.mktemp("workspaces")
    application = create_app(mcp_settings(settings, http_mcp, root))
    try:
        async with application.router.lifespan_context(application):
            yield application
    finally:
        os.environ.pop(TOKEN_ENV, None)


@pytest.fixture
async def http(mcp_app: FastAPI, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=mcp_app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=tenant.headers, timeout=60
    ) as client:
        yield client


async def new_session(http: httpx.AsyncClient, **agent: Any) -> str:
    answer = await http.post("/v1/sessions", json={"agent": agent, "binding": {}})
    assert answer.status_code == 201, answer.text
    return answer.json()["session_id"]


async def run(http: httpx.AsyncClient, sid: str, text: str) -> dict[str, Any]:
    answer = await http.post(f"/v1/sessions/{sid}/runs", json={"input": text})
    assert answer.status_code == 200, answer.text
    return answer.json()


def call(server: str, tool: str, **args: Any) -> str:
    return f"[tool:{server}__{tool} {json.dumps(args)}]"


async def ledger(http: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    events = (await http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})).json()["data"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    finished = [e for e in events if e["type"] == "RUN_FINISHED"]
    assert finished and all(e["payload"]["stop_reason"] for e in finished)
    assert (await http.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"]
    return events


async def test_discovery_lists_mcp_tools_with_their_schemas(http: httpx.AsyncClient) -> None:
    listing = (await http.get("/v1/tools")).json()
    tools = {t["name"]: t for t in listing["data"]}
    for server in ("loc", "web", "ws"):
        add = tools[f"{server}__add"]
        assert add["source"] == f"mcp:{server}" and add["requires_approval"] is False
        assert add["parameters"]["required"] == ["a", "b"]
    assert [n for n in tools if n.startswith("gated__")] == ["gated__add"]
    assert tools["gated__add"]["requires_approval"] is True
    assert tools["echo"]["source"] == "builtin"
    servers = {s["name"]: s for s in listing["mcp_servers"]}
    assert servers["web"]["transport"] == "streamable_http" and servers["web"]["discovered"]
    assert servers["gone"]["discovered"] is False and servers["gone"]["last_error"]
    assert TOKEN not in json.dumps(listing)


async def test_mcp_tools_are_offered_only_when_named(http: httpx.AsyncClient) -> None:
    sid = await new_session(http)  # no tools named: the built-ins only
    result = await run(http, sid, call("loc", "add", a=1, b=2))
    assert result["stop_reason"] == "BLOCKED_BY_TOOL_ERROR"
    events = await ledger(http, sid)
    output = next(e for e in events if e["type"] == "TOOL_RESULT")["payload"]["item"]["output"]
    assert "no tool named 'loc__add'" in output


@pytest.mark.parametrize("server", SERVERS)
async def test_a_call_waits_for_its_approval(http: httpx.AsyncClient, server: str) -> None:
    sid = await new_session(http, tools=[f"{server}__*"], approval_required=[f"{server}__add"])
    blocked = await run(http, sid, call(server, "add", a=2, b=3))
    assert blocked["stop_reason"] == "BLOCKED_BY_APPROVAL"
    [pending] = blocked["pending"]
    decided = await http.post(
        f"/v1/sessions/{sid}/approvals",
        json={"call_id": pending["call_id"], "decision": "approve", "continue": True},
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["stop_reason"] == "COMPLETED"
    assert decided.json()["output"] == f"{server}__add returned: 5"
    types = [e["type"] for e in await ledger(http, sid)]
    assert types.count("TOOL_CALL") == 1 and types.count("TOOL_RESULT") == 1
    assert types.index("APPROVAL_DECIDED") < types.index("TOOL_RESULT")


async def test_an_operator_can_require_approval_for_a_whole_server(
    http: httpx.AsyncClient,
) -> None:
    sid = await new_session(http, tools=["gated__*"])
    blocked = await run(http, sid, call("gated", "add", a=1, b=1))
    assert blocked["stop_reason"] == "BLOCKED_BY_APPROVAL"


@pytest.mark.parametrize("server", SERVERS)
async def test_a_call_that_hangs_times_out_and_the_server_is_reconnected(
    http: httpx.AsyncClient, mcp_app: FastAPI, server: str
) -> None:
    sid = await new_session(http, tools=[f"{server}__*"])
    result = await run(http, sid, call(server, "slow", ms=20_000))
    assert result["stop_reason"] == "BLOCKED_BY_TOOL_ERROR"
    events = await ledger(http, sid)
    output = next(e for e in events if e["type"] == "TOOL_RESULT")["payload"]["item"]["output"]
    assert "no answer in 2 s" in output and "reconnected" in output
    connects = services_of(mcp_app).mcp._connections[server].connects
    again = await run(http, sid, call(server, "add", a=20, b=22))
    assert again["output"] == f"{server}__add returned: 42"
    assert services_of(mcp_app).mcp._connections[server].connects == connects + 1
    await ledger(http, sid)


@pytest.mark.parametrize("server", SERVERS)
async def test_a_server_killed_mid_call_is_a_tool_error_then_reconnected(
    http: httpx.AsyncClient, http_mcp: HttpServer, server: str
) -> None:
    sid = await new_session(http, tools=[f"{server}__*"], on_tool_error="feed_back")
    result = await run(http, sid, call(server, "die"))
    # The model read the error and answered: the run ends normally.
    assert result["stop_reason"] == "COMPLETED", result
    assert "error: MCP server" in result["output"] and "reconnected" in result["output"]
    if server == "web":
        http_mcp.ensure_running()  # the process died with the call: its operator restarts it
    again = await run(http, sid, call(server, "add", a=1, b=1))
    assert again["output"] == f"{server}__add returned: 2"
    events = await ledger(http, sid)
    assert [e["type"] for e in events].count("TOOL_RESULT") == 2


async def test_outputs_are_capped(http: httpx.AsyncClient) -> None:
    sid = await new_session(http, tools=["loc__shout"])
    result = await run(http, sid, call("loc", "shout", text="abc", times=500))
    assert result["stop_reason"] == "COMPLETED"
    assert "[output cut at 256 bytes of 1500]" in result["output"]


async def test_a_stdio_server_runs_in_the_sessions_workspace(
    http: httpx.AsyncClient, mcp_app: FastAPI, tenant: TenantKey
) -> None:
    answer = await http.post(
        "/v1/sessions", json={"agent": {"tools": ["ws__where"]}, "binding": {"workspace": "repo-a"}}
    )
    sid = answer.json()["session_id"]
    result = await run(http, sid, call("ws", "where"))
    root = services_of(mcp_app).settings.workspace_root
    assert f"cwd={root / tenant.tenant_id / 'repo-a'}" in result["output"]


async def test_an_unreachable_server_is_a_tool_error_not_a_500(http: httpx.AsyncClient) -> None:
    sid = await new_session(http, tools=["gone__anything"])
    result = await run(http, sid, call("gone", "anything"))
    # Never discovered: the tool does not exist for the agent; the run stops cleanly.
    assert result["stop_reason"] == "BLOCKED_BY_TOOL_ERROR"
    await ledger(http, sid)
