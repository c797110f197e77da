"""`/mcp` on two real replicas sharing one database, driven with the official `mcp` SDK's
client over Streamable HTTP: the transport is stateless, so each request may land on either
replica (a call on one, its continuation, retry or cancel on the other). The official
TypeScript SDK's client does the same from Node (clients/mcp-tests, installed by `npm ci`
there as `.ci/run` does; skipped without it)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import Server, TenantKey
from tests.e2e.test_ag_ui_node import node_test
from tests.e2e.test_runs import replicas  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
ACCEPT = {"Accept": "application/json, text/event-stream"}


@asynccontextmanager
async def handshake(server: Server, tenant: TenantKey) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=tenant.headers, timeout=60) as http,
        streamable_http_client(f"{server.base_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def run_record(server: Server, tenant: TenantKey, ids: dict[str, Any]) -> dict[str, Any]:
    """The run as REST sees it, once it has ended (bounded)."""
    url = f"{server.base_url}/v1/sessions/{ids['session_id']}/runs/{ids['run_id']}"
    async with httpx.AsyncClient(headers=tenant.headers, timeout=30) as http:
        for _ in range(100):
            run: dict[str, Any] = (await http.get(url)).json()
            if run["status"] not in ("queued", "running"):
                return run
            await asyncio.sleep(0.1)
    raise AssertionError(f"the run is still live: {run}")


async def runs_of(server: Server, tenant: TenantKey, session_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(headers=tenant.headers, timeout=30) as http:
        reply = await http.get(f"{server.base_url}/v1/sessions/{session_id}/runs")
        assert reply.status_code == 200, reply.text
        data: list[dict[str, Any]] = reply.json()["data"]
        return data


def message_of(reply: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC response of a POST (answered as SSE)."""
    assert reply.status_code == 200, reply.text
    lines = [line[5:] for line in reply.text.splitlines() if line.startswith("data:")]
    found: dict[str, Any] = json.loads(lines[-1]) if lines else reply.json()
    return found


def call(request_id: int, arguments: dict[str, Any], tool: str = "agent") -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_list_call_continue_progress_across_replicas(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    a, b = replicas
    async with handshake(a, tenant) as on_a:
        tools = (await on_a.list_tools()).tools
        assert [t.name for t in tools] == ["agent"] and tools[0].output_schema is not None
        first = await on_a.call_tool("agent", {"input": "hello"})
        assert first.content[0].text == "echo: hello"  # type: ignore[union-attr]
        ids = first.structured_content
        assert ids is not None and ids["status"] == "finished"
    steps: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        steps.append((progress, message))

    async with handshake(b, tenant) as on_b:
        again = {"input": "[sleep:3000] [words:20]", "session_id": ids["session_id"]}
        second = await on_b.call_tool("agent", again, progress_callback=on_progress)
    assert second.structured_content is not None
    assert second.structured_content["session_id"] == ids["session_id"]
    assert second.content[0].text.split()[-1] == "word20"  # type: ignore[union-attr]
    assert len(steps) >= 3 and steps[-1][1] == "run finished"
    assert [p for p, _ in steps] == sorted({p for p, _ in steps})
    # The continuation saw the first turn: it is in the context the model gets.
    async with httpx.AsyncClient(headers=tenant.headers, timeout=30) as http:
        context = await http.get(f"{a.base_url}/v1/sessions/{ids['session_id']}/context")
    assert "hello" in context.text
    assert len(await runs_of(a, tenant, ids["session_id"])) == 2

    # The 2026-07-28 revision on the other replica continues the same session.
    async with (
        httpx2.AsyncClient(headers=tenant.headers, timeout=60) as http,
        Client(streamable_http_client(f"{a.base_url}/mcp", http_client=http)) as modern,
    ):
        assert modern.protocol_version == "2026-07-28"
        third = await modern.call_tool("agent", {"input": "third", "session_id": ids["session_id"]})
        assert third.content[0].text == "echo: third"  # type: ignore[union-attr]


async def test_cancelled_calls_end_interrupted(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    a, b = replicas
    async with handshake(a, tenant) as mcp:
        first = await mcp.call_tool("agent", {"input": "hi"})
        assert first.structured_content is not None
        session_id = first.structured_content["session_id"]
        with anyio.move_on_after(1.5):
            await mcp.call_tool("agent", {"input": "[sleep:10000] long", "session_id": session_id})
            raise AssertionError("not cancelled")
    runs = await runs_of(b, tenant, session_id)
    ended = await run_record(b, tenant, {"session_id": session_id, "run_id": runs[0]["run_id"]})
    assert (ended["status"], ended["stop_reason"]) == ("interrupted", "INTERRUPTED")

    # The call on one replica, its notifications/cancelled on the other (no affinity).
    connection = {**tenant.headers, **ACCEPT, "Mcp-Session-Id": uuid.uuid4().hex}
    async with httpx.AsyncClient(headers=connection, timeout=60) as http:
        long = call(41, {"input": "[sleep:10000] long", "session_id": session_id})
        pending = asyncio.create_task(http.post(f"{a.base_url}/mcp", json=long))
        for _ in range(50):
            if len(await runs_of(b, tenant, session_id)) == 3:
                break
            await asyncio.sleep(0.1)
        cancel = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 41, "reason": "changed my mind"},
        }
        reply = await http.post(f"{b.base_url}/mcp", json=cancel)
        assert reply.status_code == 202, reply.text
        answer = message_of(await asyncio.wait_for(pending, 30))
    assert answer["result"]["structuredContent"]["status"] == "interrupted"
    assert answer["result"]["isError"] is True
    ended = await run_record(b, tenant, answer["result"]["structuredContent"])
    assert ended["stop_reason"] == "INTERRUPTED"


async def test_a_retried_request_id_runs_once_on_either_replica(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    a, b = replicas
    headers = {**tenant.headers, **ACCEPT}
    body = call(5, {"input": f"[sleep:1500] once {uuid.uuid4().hex[:6]}"})
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        # The retry lands on the other replica while the first attempt still runs.
        first = asyncio.create_task(http.post(f"{a.base_url}/mcp", json=body))
        await asyncio.sleep(0.5)
        retried = message_of(await http.post(f"{b.base_url}/mcp", json=body))
        original = message_of(await first)
    ids = original["result"]["structuredContent"]
    assert retried["result"]["structuredContent"]["run_id"] == ids["run_id"]
    assert retried["result"]["content"] == original["result"]["content"]
    assert len(await runs_of(a, tenant, ids["session_id"])) == 1


async def test_errors_are_the_protocols_own_on_real_servers(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    a, b = replicas
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient(headers=ACCEPT, timeout=30) as anon:
        for server, headers in ((a, {}), (b, {"Authorization": "Bearer asr_wrong"})):
            reply = await anon.post(f"{server.base_url}/mcp", json=listing, headers=headers)
            assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer"
    async with httpx.AsyncClient(headers={**tenant.headers, **ACCEPT}, timeout=30) as http:
        bad = await http.post(
            f"{b.base_url}/mcp", content=b"{oops", headers={"Content-Type": "application/json"}
        )
        assert bad.status_code == 400 and bad.json()["error"]["code"] == types.PARSE_ERROR
        for junk in (b"[]", b"42", b'{"jsonrpc": "2.0"}'):
            odd = await http.post(
                f"{a.base_url}/mcp", content=junk, headers={"Content-Type": "application/json"}
            )
            assert odd.status_code < 500, odd.text
    async with handshake(b, tenant) as mcp:
        with pytest.raises(MCPError) as raised:
            await mcp.call_tool("nobody", {"input": "x"})
        assert raised.value.code == types.INVALID_PARAMS


async def test_the_example_runs_against_a_server(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    env = {**os.environ, "ASR_URL": replicas[0].base_url, "ASR_KEY": tenant.key}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(ROOT / "examples" / "python" / "mcp_client.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "tools: agent" in done.stdout
    assert "answer: echo: hello" in done.stdout
    assert "continued: echo: and again" in done.stdout
    assert "progress" in done.stdout and "slow answer: word1 word2 word3 word4" in done.stdout


async def test_the_typescript_sdk_client_on_two_replicas(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    out = await node_test(ROOT / "clients" / "mcp-tests", "test/", replicas, tenant)
    assert "# pass 2" in out and "# fail 0" in out
