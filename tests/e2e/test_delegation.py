"""Issue 10, delegation over real HTTP: the `delegate` tool and `POST .../delegate` create a
child session in the caller's tree (parent = caller, root = the caller's root), run it, and
hand back its final output; the child's timeline is its own; the depth limit (default 3)
stops runaway delegation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.conftest import Server, TenantKey


@pytest.fixture
async def http(server: Server, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, headers=tenant.headers, timeout=60) as c:
        yield c


async def new_session(http: httpx.AsyncClient, **body: object) -> dict:
    response = await http.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def run(http: httpx.AsyncClient, sid: str, text: str) -> dict:
    response = await http.post(f"/v1/sessions/{sid}/runs", json={"input": text})
    assert response.status_code == 200, response.text
    return response.json()


async def events(http: httpx.AsyncClient, sid: str) -> list[dict]:
    return (await http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})).json()["data"]


async def children(http: httpx.AsyncClient, sid: str) -> list[dict]:
    response = await http.get("/v1/sessions", params={"metadata.delegated_from": sid})
    return response.json()["data"]


async def assert_consistent(http: httpx.AsyncClient, sid: str) -> None:
    seqs = [e["seq"] for e in await events(http, sid)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert (await http.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"] is True


def tool_outputs(evts: list[dict]) -> list[str]:
    return [e["payload"]["item"]["output"] for e in evts if e["type"] == "TOOL_RESULT"]


def nested(depth: int, text: str) -> str:
    """`text` wrapped in `depth` delegate directives: each level delegates the next."""
    for _ in range(depth):
        text = f"[tool:delegate {json.dumps({'input': text})}]"
    return text


async def test_delegate_tool_runs_a_child_and_returns_its_final_output(
    http: httpx.AsyncClient,
) -> None:
    root = (await new_session(http, binding={"workspace": "repo-a"}))["session_id"]
    # The caller is itself a fork of the root: the child must keep the root, not the caller.
    caller = (await http.post(f"/v1/sessions/{root}/fork", json={})).json()["session_id"]
    result = await run(http, caller, '[tool:delegate {"input": "hello"}]')
    assert (result["stop_reason"], result["output"]) == (
        "COMPLETED",
        "delegate returned: echo: hello",
    )
    parent_events = await events(http, caller)
    assert tool_outputs(parent_events) == ["echo: hello"]

    [child] = await children(http, caller)
    assert child["root_session_id"] == root
    assert child["parent_session_id"] == caller
    assert child["binding"] == {"workspace": "repo-a"}
    call = next(e for e in parent_events if e["type"] == "TOOL_CALL")
    assert child["metadata"]["delegated_call_id"] == call["payload"]["call_id"]
    child_events = await events(http, child["session_id"])
    assert child_events[0]["type"] == "SESSION_CREATED"
    assert child_events[0]["payload"]["parent_session_id"] == caller
    final = [e["payload"]["text"] for e in child_events if e["type"] == "FINAL_OUTPUT"]
    assert final == ["echo: hello"]
    # Each timeline is its own: the child's run and input are not in the caller's ledger.
    child_runs = {e["run_id"] for e in child_events if e["run_id"]}
    assert not child_runs & {e["run_id"] for e in parent_events}
    assert "hello" not in [
        e["payload"]["item"]["content"] for e in parent_events if e["type"] == "USER_INPUT"
    ]
    await assert_consistent(http, caller)
    await assert_consistent(http, child["session_id"])


async def test_delegation_depth_limit_stops_a_runaway_chain(http: httpx.AsyncClient) -> None:
    top = (await new_session(http))["session_id"]
    result = await run(http, top, nested(4, "too deep"))
    assert result["stop_reason"] == "BLOCKED_BY_TOOL_ERROR"
    # Depths 1, 2 and 3 were created; the fourth level was refused.
    chain, sid = [], top
    for _ in range(4):
        found = await children(http, sid)
        if not found:
            break
        [child] = found
        assert child["root_session_id"] == top and child["parent_session_id"] == sid
        chain.append(child["session_id"])
        sid = child["session_id"]
    assert len(chain) == 3
    deepest = tool_outputs(await events(http, chain[-1]))
    assert len(deepest) == 1 and deepest[0].startswith("error: delegation_too_deep")
    assert "depth 4, the limit is 3" in deepest[0]
    assert "delegation_too_deep" in tool_outputs(await events(http, top))[0]
    for sid in [top, *chain]:
        await assert_consistent(http, sid)


async def test_within_the_limit_nested_delegation_completes(http: httpx.AsyncClient) -> None:
    top = (await new_session(http))["session_id"]
    result = await run(http, top, nested(3, "deep"))
    assert result["stop_reason"] == "COMPLETED"
    assert result["output"].endswith("echo: deep")


async def test_delegate_route_creates_and_runs_a_child_and_enforces_depth(
    http: httpx.AsyncClient,
) -> None:
    top = (await new_session(http))["session_id"]
    body = {"input": "hi", "agent": {"instructions": "be brief"}, "metadata": {"k": "v"}}
    first = await http.post(f"/v1/sessions/{top}/delegate", json=body)
    assert first.status_code == 201, first.text
    child = first.json()["session"]
    assert first.headers["location"] == f"/v1/sessions/{child['session_id']}"
    assert (child["parent_session_id"], child["root_session_id"]) == (top, top)
    assert child["agent"]["instructions"] == "be brief"
    assert child["metadata"] == {"k": "v", "delegated_from": top}
    assert first.json()["run"]["output"] == "echo: hi"
    assert first.json()["run"]["session_id"] == child["session_id"]

    sid = child["session_id"]
    for _ in range(2):  # depths 2 and 3
        response = await http.post(f"/v1/sessions/{sid}/delegate", json={"input": "again"})
        assert response.status_code == 201, response.text
        sid = response.json()["session"]["session_id"]
    refused = await http.post(f"/v1/sessions/{sid}/delegate", json={"input": "one more"})
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("application/problem+json")
    problem = refused.json()
    assert (problem["code"], problem["depth"], problem["max_depth"]) == (
        "delegation_too_deep",
        4,
        3,
    )
    assert await children(http, sid) == []

    bad = await http.post(f"/v1/sessions/{top}/delegate", json={"input": ""})
    assert bad.status_code == 422
    missing = await http.post("/v1/sessions/no-such-session/delegate", json={"input": "x"})
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"


async def test_delegate_tool_with_an_invalid_agent_is_a_tool_error(
    http: httpx.AsyncClient,
) -> None:
    sid = (await new_session(http))["session_id"]
    result = await run(http, sid, '[tool:delegate {"input": "x", "agent": {"provider": "nope"}}]')
    assert result["stop_reason"] == "BLOCKED_BY_TOOL_ERROR"
    [output] = tool_outputs(await events(http, sid))
    # `provider` names a model profile (issue #19): an unknown one is refused by name.
    assert output.startswith("error: unknown_model_profile: no model profile named 'nope'")
    assert await children(http, sid) == []
    bad = '[tool:delegate {"input": "x", "agent": {"max_total_turns": 0}}]'
    assert (await run(http, sid, bad))["stop_reason"] == "BLOCKED_BY_TOOL_ERROR"
    output = tool_outputs(await events(http, sid))[-1]
    assert output.startswith("error: invalid_request: the child's agent spec is invalid")
    assert await children(http, sid) == []


async def test_interrupting_the_caller_cancels_its_child(http: httpx.AsyncClient) -> None:
    sid = (await new_session(http))["session_id"]
    started = await http.post(
        f"/v1/sessions/{sid}/runs",
        json={"input": '[tool:delegate {"input": "[sleep:20000] slow"}]', "mode": "background"},
    )
    assert started.status_code == 202

    async def child_running() -> list[dict]:
        found = await children(http, sid)
        return found if found and found[0]["active_run_id"] else []

    deadline = asyncio.get_running_loop().time() + 10
    while not await child_running():
        assert asyncio.get_running_loop().time() < deadline, "the child never started"
        await asyncio.sleep(0.05)
    [child] = await children(http, sid)
    cancelled = await http.post(f"/v1/sessions/{sid}/runs/{started.json()['run_id']}/cancel")
    assert cancelled.json()["status"] == "interrupted"
    child_run = (await http.get(f"/v1/sessions/{child['session_id']}/runs")).json()["data"][0]
    assert (child_run["status"], child_run["stop_reason"]) == ("interrupted", "INTERRUPTED")
