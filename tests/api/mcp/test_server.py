"""`/mcp`, in process, with the official `mcp` SDK's client over Streamable HTTP: both the
`initialize` handshake (2025-11-25, `ClientSession`) and the 2026-07-28 per-request
envelope (`Client`, which discovers it)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client, ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from app.main import create_app
from app.settings import Settings
from tests.conftest import TenantKey

BASE = "http://asr.test"
ACCEPT = {"Accept": "application/json, text/event-stream"}


def http_client(app: object, headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    transport = httpx2.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx2.AsyncClient(transport=transport, base_url=BASE, headers=headers, timeout=30)


@asynccontextmanager
async def handshake(app: object, tenant: TenantKey) -> AsyncIterator[ClientSession]:
    """A client of the `initialize` handshake era."""
    async with (
        http_client(app, tenant.headers) as http,
        streamable_http_client(f"{BASE}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def runs_of(app: object, tenant: TenantKey, session_id: str) -> list[dict[str, Any]]:
    async with http_client(app, tenant.headers) as http:
        reply = await http.get(f"/v1/sessions/{session_id}/runs")
        assert reply.status_code == 200, reply.text
        runs: list[dict[str, Any]] = reply.json()["data"]
        return runs


async def ended(app: object, tenant: TenantKey, session_id: str) -> list[dict[str, Any]]:
    """The session's runs once none is live (bounded)."""
    for _ in range(50):
        runs = await runs_of(app, tenant, session_id)
        if all(r["status"] not in ("queued", "running") for r in runs):
            return runs
        await asyncio.sleep(0.1)
    raise AssertionError(f"a run is still live: {runs}")


async def test_tools_call_continue_and_progress(app: FastAPI, tenant: TenantKey) -> None:
    async with handshake(app, tenant) as mcp:
        assert mcp.protocol_version == "2025-11-25"
        tools = (await mcp.list_tools()).tools
        assert [t.name for t in tools] == ["agent"]
        assert tools[0].input_schema["required"] == ["input"]
        assert tools[0].output_schema is not None

        first = await mcp.call_tool("agent", {"input": "hello"})
        assert not first.is_error
        assert first.content[0].text == "echo: hello"  # type: ignore[union-attr]
        ids = first.structured_content
        assert ids is not None and ids["status"] == "finished"
        session_id = ids["session_id"]

        second = await mcp.call_tool("agent", {"input": "again", "session_id": session_id})
        assert second.structured_content is not None
        assert second.structured_content["session_id"] == session_id
        assert second.content[0].text == "echo: again"  # type: ignore[union-attr]

        steps: list[tuple[float, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            steps.append((progress, message))

        third = await mcp.call_tool(
            "agent",
            {"input": "[sleep:2500] [words:5]", "session_id": session_id},
            progress_callback=on_progress,
        )
        assert third.content[0].text == "word1 word2 word3 word4 word5"  # type: ignore[union-attr]
    # Progress came while the run worked, increasing, with a heartbeat during the sleep.
    assert len(steps) >= 3 and [p for p, _ in steps] == sorted({p for p, _ in steps})
    assert ("working" in {m for _, m in steps}) and steps[-1][1] == "run finished"
    runs = await runs_of(app, tenant, session_id)
    assert len(runs) == 3
    # The second call continued the conversation: the model's context holds both turns.
    async with http_client(app, tenant.headers) as http:
        context = (await http.get(f"/v1/sessions/{session_id}/context")).text
    assert "hello" in context and "again" in context


async def test_a_cancelled_call_interrupts_its_run_in_both_eras(
    app: FastAPI, tenant: TenantKey
) -> None:
    async with handshake(app, tenant) as mcp:
        started = await mcp.call_tool("agent", {"input": "hi"})
        assert started.structured_content is not None
        legacy = started.structured_content["session_id"]
        with anyio.move_on_after(1):
            # notifications/cancelled, a request of its own on the stateless transport
            await mcp.call_tool("agent", {"input": "[sleep:8000] long", "session_id": legacy})
            raise AssertionError("the call was not cancelled")
    runs = await ended(app, tenant, legacy)
    assert [r["status"] for r in runs] == ["interrupted", "finished"]
    assert runs[0]["stop_reason"] == "INTERRUPTED"

    async with (
        http_client(app, tenant.headers) as http,
        Client(streamable_http_client(f"{BASE}/mcp", http_client=http)) as modern,
    ):
        assert modern.protocol_version == "2026-07-28"
        started = await modern.call_tool("agent", {"input": "hi"})
        assert started.structured_content is not None
        session_id = started.structured_content["session_id"]
        with anyio.move_on_after(1):
            # 2026-07-28: closing the request's stream is its cancellation
            await modern.call_tool(
                "agent", {"input": "[sleep:8000] long", "session_id": session_id}
            )
            raise AssertionError("the call was not cancelled")
    runs = await ended(app, tenant, session_id)
    assert [r["status"] for r in runs] == ["interrupted", "finished"]


def call(request_id: int, text: str, **extra: Any) -> dict[str, Any]:
    arguments = {"input": text, **extra}
    params = {"name": "agent", "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def result_of(reply: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC response of a POST answered as SSE or JSON."""
    import json

    assert reply.status_code == 200, reply.text
    if reply.headers["content-type"].startswith("application/json"):
        message: dict[str, Any] = reply.json()
        return message
    lines = [line[5:] for line in reply.text.splitlines() if line.startswith("data:")]
    found: dict[str, Any] = json.loads(lines[-1])
    return found


async def test_a_retried_request_id_runs_once_and_ids_do_not_collide(
    app: FastAPI, tenant: TenantKey
) -> None:
    headers = {**tenant.headers, **ACCEPT}
    async with http_client(app, headers) as http:
        body = call(7, f"once {uuid.uuid4().hex[:6]}")
        first, again = [result_of(await http.post("/mcp", json=body)) for _ in range(2)]
        assert first["result"]["structuredContent"] == again["result"]["structuredContent"]
        session_id = first["result"]["structuredContent"]["session_id"]
        assert len(await runs_of(app, tenant, session_id)) == 1

        # Another client's request 7, with other arguments: its own run.
        other = result_of(await http.post("/mcp", json=call(7, "someone else")))
        assert other["result"]["structuredContent"]["session_id"] != session_id

        # A client with a connection id (from its initialize): the id is scoped by it.
        connection = {"Mcp-Session-Id": uuid.uuid4().hex}
        body = call(8, "[sleep:300] scoped")
        one = result_of(await http.post("/mcp", json=body, headers=connection))
        two = result_of(await http.post("/mcp", json=body, headers=connection))
        three = result_of(await http.post("/mcp", json=body, headers={"Mcp-Session-Id": "x1"}))
        ids = [m["result"]["structuredContent"]["run_id"] for m in (one, two, three)]
        assert ids[0] == ids[1] != ids[2]


async def test_errors_are_the_protocols_own(app: FastAPI, tenant: TenantKey) -> None:
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with http_client(app, ACCEPT) as anon:
        for headers in ({}, {"Authorization": "Bearer asr_not_a_key"}, {"Authorization": "x"}):
            reply = await anon.post("/mcp", json=listing, headers=headers)
            assert reply.status_code == 401
            assert reply.headers["www-authenticate"] == "Bearer"
            assert reply.headers["content-type"].startswith("application/problem+json")
    headers = {**tenant.headers, **ACCEPT, "Content-Type": "application/json"}
    async with http_client(app, headers) as http:
        bad = await http.post("/mcp", content=b"{not json")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == types.PARSE_ERROR
        unknown = result_of(await http.post("/mcp", json={**listing, "method": "nope/nope"}))
        assert unknown["error"]["code"] == types.METHOD_NOT_FOUND
        not_rpc = await http.post("/mcp", json={"hello": "world"})
        assert 400 <= not_rpc.status_code < 500
        for junk in (
            b"[]",
            b"42",
            b'{"jsonrpc": "2.0"}',
            b'{"jsonrpc":"2.0","id":{},"method":"x"}',
        ):
            odd = await http.post("/mcp", content=junk)
            assert 200 <= odd.status_code < 500, odd.text
        for method in ("GET", "DELETE"):
            # Stateless: no stream to open, no session to end.
            refused = await http.request(method, "/mcp", headers={"Mcp-Session-Id": "abc"})
            assert refused.status_code == 405 and refused.headers["allow"] == "POST"
        for arguments in ({}, {"input": 3}, {"input": "x", "session_id": 5}):
            body = {**call(2, "x"), "params": {"name": "agent", "arguments": arguments}}
            wrong = result_of(await http.post("/mcp", json=body))
            assert "error" in wrong or wrong["result"]["isError"] is True
    async with handshake(app, tenant) as mcp:
        with pytest.raises(MCPError) as raised:
            await mcp.call_tool("no_such_agent", {"input": "x"})
        assert raised.value.code == types.INVALID_PARAMS
        missing = await mcp.call_tool("agent", {"input": "x", "session_id": "no-such-session"})
        assert missing.is_error
        assert "session_not_found" in missing.content[0].text  # type: ignore[union-attr]


BLUEPRINTS = """
agents:
  support:
    description: First-line support.
    provider: scripted
    tools: [echo]
    approval_required: [echo]
  writer:
    provider: scripted
"""


@pytest.fixture
async def agents_app(settings: Settings, tmp_path: Path) -> AsyncIterator[FastAPI]:
    path = tmp_path / "agents.yaml"
    path.write_text(BLUEPRINTS)
    application = create_app(settings.model_copy(update={"agents_file": path}))
    async with application.router.lifespan_context(application):
        yield application


async def test_one_tool_per_blueprint_and_approvals(agents_app: FastAPI, tenant: TenantKey) -> None:
    ask = {"input": '[tool:echo {"text": "hi"}]'}
    async with handshake(agents_app, tenant) as mcp:
        tools = (await mcp.list_tools()).tools
        assert (tools[0].name, tools[0].description) == ("support", "First-line support.")
        assert [t.name for t in tools] == ["support", "writer"]
        # No way to ask this client (stateless, 2025-11-25): the approval is pending.
        blocked = await mcp.call_tool("support", ask)
        data = blocked.structured_content
        assert data is not None and data["stop_reason"] == "BLOCKED_BY_APPROVAL"
        assert [p["name"] for p in data["approval_pending"]] == ["echo"]
        text = blocked.content[0].text  # type: ignore[union-attr]
        assert "Approval pending" in text and data["session_id"] in text

    asked: list[str] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with (
        http_client(agents_app, tenant.headers) as http,
        Client(
            streamable_http_client(f"{BASE}/mcp", http_client=http), elicitation_callback=approve
        ) as modern,
    ):
        done = await modern.call_tool("support", ask)
        assert asked and "echo" in asked[0]
        assert done.content[0].text == "echo returned: hi"  # type: ignore[union-attr]
        assert done.structured_content is not None
        runs = await runs_of(agents_app, tenant, done.structured_content["session_id"])
        assert [r["stop_reason"] for r in runs] == ["COMPLETED", "BLOCKED_BY_APPROVAL"]
