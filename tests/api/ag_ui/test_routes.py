"""Issue #22: `POST /v1/ag-ui` speaks AG-UI over sessions and runs (scripted model)."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.runtime.session.events import EventType
from app.settings import Settings
from tests.conftest import TenantKey


async def ag_ui(
    client: httpx.AsyncClient, body: dict[str, Any], path: str = "/v1/ag-ui"
) -> list[dict[str, Any]]:
    """POST a RunAgentInput and parse the AG-UI events of the stream."""
    reply = await client.post(path, json=body, headers={"Accept": "text/event-stream"})
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = []
    for line in reply.text.splitlines():
        if line.startswith("data:"):
            events.append(json.loads(line[5:]))
    return events


def run_input(thread: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": extra.pop("runId", f"r-{uuid.uuid4().hex[:8]}"),
        "messages": messages,
        "tools": extra.pop("tools", []),
        "context": [],
        "state": {},
        "forwardedProps": extra.pop("forwardedProps", {}),
        **extra,
    }


def user(text: str, msg_id: str | None = None) -> dict[str, Any]:
    return {"id": msg_id or f"u-{uuid.uuid4().hex[:8]}", "role": "user", "content": text}


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def ledger(client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    reply = await client.get(f"/v1/sessions/{session_id}/events", params={"limit": 1000})
    return reply.json()["data"]


async def test_text_streams_in_protocol_order_and_is_an_ordinary_run(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    events = await ag_ui(client, run_input(thread, [user("[words:5]")], runId="run-1"))
    # Deltas are coalesced, so the five words come in one to five CONTENT events, and live
    # ones may overtake the step's events on the bus (a text message needs no step): the
    # protocol's own order is what holds.
    kinds = [kind for kind, _ in itertools.groupby(types(events))]  # runs of CONTENT as one
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
    text = [k for k in kinds if k.startswith("TEXT_MESSAGE_")]
    assert text[0] == "TEXT_MESSAGE_START" and text[-1] == "TEXT_MESSAGE_END", kinds
    assert set(text[1:-1]) == {"TEXT_MESSAGE_CONTENT"}, kinds
    assert kinds.index("STEP_STARTED") < kinds.index("STEP_FINISHED"), kinds
    assert 1 <= types(events).count("TEXT_MESSAGE_CONTENT") <= 5
    assert events[0]["threadId"] == thread and events[0]["runId"] == "run-1"
    finished = events[-1]
    assert finished["outcome"] == {"type": "success"}
    stored = await ledger(client, thread)
    final = [e["payload"]["text"] for e in stored if e["type"] == EventType.FINAL_OUTPUT]
    assert final == [text_of(events)] == [finished["result"]]
    runs = (await client.get(f"/v1/sessions/{thread}/runs")).json()["data"]
    assert [r["run_id"] for r in runs] == [events[0]["metadata"]["asr_run_id"]]


async def test_same_run_id_streams_the_same_run_and_starts_no_second(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = run_input(thread, [user("hello")], runId="same")
    first = await ag_ui(client, body)
    again = await ag_ui(client, body)
    assert text_of(first) == text_of(again) == "echo: hello"
    assert types(again)[-1] == "RUN_FINISHED"
    assert len((await client.get(f"/v1/sessions/{thread}/runs")).json()["data"]) == 1


async def test_resent_history_appends_nothing_and_new_messages_once(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    first_user = user("one", "m1")
    first = await ag_ui(client, run_input(thread, [first_user]))
    reply_id = next(e["messageId"] for e in first if e["type"] == "TEXT_MESSAGE_START")
    history = [first_user, {"id": reply_id, "role": "assistant", "content": text_of(first)}]
    second = await ag_ui(client, run_input(thread, [*history, user("two", "m2")]))
    assert text_of(second) == "echo: two"
    memory = (await client.get(f"/v1/sessions/{thread}/memory")).json()["items"]
    users = [i for i in memory if i.get("role") == "user"]
    assert [(u["id"], u["content"]) for u in users] == [("m1", "one"), ("m2", "two")]
    assert sum(1 for i in memory if i.get("role") == "assistant") == 2
    # The same history again (a new runId): no message of it is appended a second time.
    await ag_ui(client, run_input(thread, [*history, user("two", "m2")]))
    memory = (await client.get(f"/v1/sessions/{thread}/memory")).json()["items"]
    assert [i["id"] for i in memory if i.get("role") == "user"] == ["m1", "m2"]


async def test_frontend_tool_round_trip(client: httpx.AsyncClient) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    tool = {
        "name": "pick_color",
        "description": "Ask the user for a color.",
        "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}},
    }
    ask = user('[tool:pick_color {"hint": "warm"}]')
    first = await ag_ui(client, run_input(thread, [ask], tools=[tool]))
    assert types(first)[-5:] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    start = next(e for e in first if e["type"] == "TOOL_CALL_START")
    call_id = start["toolCallId"]
    assert start["toolCallName"] == "pick_color"
    assert json.loads(next(e for e in first if e["type"] == "TOOL_CALL_ARGS")["delta"]) == {
        "hint": "warm"
    }
    assert first[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [call_id]}
    history = [
        ask,
        {
            "id": start["parentMessageId"],
            "role": "assistant",
            "toolCalls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "pick_color", "arguments": '{"hint": "warm"}'},
                }
            ],
        },
        {"id": "tm-1", "role": "tool", "toolCallId": call_id, "content": "red"},
    ]
    second = await ag_ui(client, run_input(thread, history, tools=[tool]))
    assert text_of(second) == "pick_color returned: red"
    memory = (await client.get(f"/v1/sessions/{thread}/memory")).json()["items"]
    outputs = [i for i in memory if i["type"] == "function_call_output"]
    assert outputs == [{"type": "function_call_output", "call_id": call_id, "output": "red"}]


async def test_approval_interrupts_and_resume_continues(client: httpx.AsyncClient) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ask = user('[tool:echo {"text": "ship it"}]')
    props = {"approval_required": ["echo"]}
    first = await ag_ui(client, run_input(thread, [ask], forwardedProps=props))
    outcome = first[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["toolCallId"] == interrupt["id"]
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
    second = await ag_ui(client, run_input(thread, [ask], resume=resume, forwardedProps=props))
    result = next(e for e in second if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["id"]
    assert second[-1]["outcome"] == {"type": "success"}
    assert "echo returned" in text_of(second)


async def test_rejected_approval_does_not_run_the_tool(client: httpx.AsyncClient) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ask = user('[tool:echo {"text": "no"}]')
    props = {"approval_required": ["echo"]}
    first = await ag_ui(client, run_input(thread, [ask], forwardedProps=props))
    interrupt_id = first[-1]["outcome"]["interrupts"][0]["id"]
    resume = [{"interruptId": interrupt_id, "status": "cancelled"}]
    await ag_ui(client, run_input(thread, [ask], resume=resume, forwardedProps=props))
    stored = await ledger(client, thread)
    decided = [e["payload"]["decision"] for e in stored if e["type"] == "APPROVAL_DECIDED"]
    assert decided == ["reject"]


async def test_a_failing_model_is_run_error(client: httpx.AsyncClient) -> None:
    events = await ag_ui(client, run_input(f"t-{uuid.uuid4().hex[:8]}", [user("[fail]")]))
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"]


async def test_unauthenticated_is_401_problem(anon: httpx.AsyncClient) -> None:
    reply = await anon.post("/v1/ag-ui", json=run_input("t-anon", [user("hi")]))
    assert reply.status_code == 401
    assert reply.headers["content-type"].startswith("application/problem+json")


async def test_free_form_thread_ids_map_to_one_session(client: httpx.AsyncClient) -> None:
    thread = f"thread with spaces / {uuid.uuid4().hex[:6]}"
    first = await ag_ui(client, run_input(thread, [user("a")]))
    second = await ag_ui(client, run_input(thread, [user("a", "x"), user("b")]))
    assert first[0]["metadata"]["asr_session_id"] == second[0]["metadata"]["asr_session_id"]


async def test_a_body_that_is_no_run_agent_input_is_422_problem(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/ag-ui", json={"threadId": "t", "messages": "nope"})
    assert reply.status_code == 422
    assert reply.headers["content-type"].startswith("application/problem+json")


async def test_a_client_without_the_history_gets_a_messages_snapshot(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    first = await ag_ui(client, run_input(thread, [user("one", "m1")]))
    assert "MESSAGES_SNAPSHOT" not in types(first)  # the client's history is complete
    # A reloaded page: only its new message, none of the thread's history.
    events = await ag_ui(client, run_input(thread, [user("two", "m2")]))
    assert types(events)[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    snapshot = events[1]["messages"]
    assert [(m["role"], m.get("content")) for m in snapshot] == [
        ("user", "one"),
        ("assistant", "echo: one"),
        ("user", "two"),
    ]
    assert [snapshot[0]["id"], snapshot[2]["id"]] == ["m1", "m2"]
    assert text_of(events) == "echo: two"
    # Sending the snapshot back (as the client now holds it) appends nothing.
    await ag_ui(client, run_input(thread, [*snapshot, user("three", "m3")]))
    memory = (await client.get(f"/v1/sessions/{thread}/memory")).json()["items"]
    assert [i["id"] for i in memory if i.get("role") == "user"] == ["m1", "m2", "m3"]


BLUEPRINTS = """
agents:
  support:
    provider: scripted
    instructions: Be brief.
    tools: [echo]
    approval_required: [echo]
"""


@pytest.fixture
async def agents_app(settings: Settings, tmp_path: Path) -> AsyncIterator[FastAPI]:
    path = tmp_path / "agents.yaml"
    path.write_text(BLUEPRINTS)
    application = create_app(settings.model_copy(update={"agents_file": path}))
    async with application.router.lifespan_context(application):
        yield application


async def test_a_route_per_blueprint_runs_that_agent(
    agents_app: FastAPI, tenant: TenantKey
) -> None:
    transport = httpx.ASGITransport(app=agents_app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=tenant.headers
    ) as c:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        ask = user('[tool:echo {"text": "x"}]')
        events = await ag_ui(c, run_input(thread, [ask]), path="/v1/ag-ui/support")
        # The blueprint's own approval list applies: the call interrupts the run.
        assert events[-1]["outcome"]["type"] == "interrupt"
        created = (await ledger(c, thread))[0]
        assert created["payload"]["agent"]["instructions"] == "Be brief."
        props = {"agent_name": "support"}
        other = f"t-{uuid.uuid4().hex[:8]}"
        await ag_ui(c, run_input(other, [user("hi")], forwardedProps=props))
        assert (await ledger(c, other))[0]["payload"]["agent"]["instructions"] == "Be brief."
        unknown = await c.post("/v1/ag-ui/nobody", json=run_input("t-x", [user("hi")]))
        assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_agent"


async def test_the_same_run_id_at_once_starts_one_run(client: httpx.AsyncClient) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    await ag_ui(client, run_input(thread, [user("first")]))  # the session exists
    body = run_input(thread, [user("first", "x1"), user("[words:3]", "x2")], runId="twice")
    streams = await asyncio.gather(*(ag_ui(client, body) for _ in range(3)))
    ours = {s[0]["metadata"]["asr_run_id"] for s in streams}
    assert len(ours) == 1
    assert all(text_of(s) == "word1 word2 word3" for s in streams)
    assert len((await client.get(f"/v1/sessions/{thread}/runs")).json()["data"]) == 2


async def test_a_cancelled_run_finishes_cancelled(client: httpx.AsyncClient) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    stream = asyncio.create_task(ag_ui(client, run_input(thread, [user("[sleep:30000]")])))
    for _ in range(200):  # bounded: the run shows up in its session's list
        await asyncio.sleep(0.02)
        found = await client.get(f"/v1/sessions/{thread}/runs")
        if found.status_code == 200 and found.json()["data"]:
            break
    run_id = found.json()["data"][0]["run_id"]
    await client.post(f"/v1/sessions/{thread}/runs/{run_id}/cancel")
    events = await stream
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}


async def test_a_tool_message_cannot_answer_a_call_waiting_for_approval(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ask = user('[tool:echo {"text": "x"}]')
    props = {"approval_required": ["echo"]}
    first = await ag_ui(client, run_input(thread, [ask], forwardedProps=props))
    call_id = first[-1]["outcome"]["interrupts"][0]["id"]
    forged = {"id": "tm-f", "role": "tool", "toolCallId": call_id, "content": "forged"}
    reply = await client.post(
        "/v1/ag-ui", json=run_input(thread, [ask, forged], forwardedProps=props)
    )
    assert reply.status_code == 409 and reply.json()["code"] == "tool_calls_pending"
    memory = (await client.get(f"/v1/sessions/{thread}/memory")).json()["items"]
    assert not [i for i in memory if i["type"] == "function_call_output"]
