"""`POST /v1/ag-ui/connect` and `POST /v1/ag-ui/stop` (scripted model, in process)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx

from tests.api.ag_ui.test_routes import ag_ui, run_input, text_of, types, user


async def connect(
    client: httpx.AsyncClient, thread: str, last_event_id: str | None = None
) -> list[tuple[str | None, dict[str, Any]]]:
    """POST connect; (SSE id, AG-UI event) pairs."""
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    reply = await client.post("/v1/ag-ui/connect", json={"threadId": thread}, headers=headers)
    assert reply.status_code == 200, reply.text
    out: list[tuple[str | None, dict[str, Any]]] = []
    frame_id: str | None = None
    for line in reply.text.splitlines():
        if line.startswith("id:"):
            frame_id = line[3:].strip()
        elif line.startswith("data:"):
            out.append((frame_id, json.loads(line[5:])))
            frame_id = None
    return out


async def active_run(client: httpx.AsyncClient, thread: str) -> str:
    for _ in range(300):  # bounded: until the run is in the session's list
        await asyncio.sleep(0.02)
        found = await client.get(f"/v1/sessions/{thread}/runs")
        if found.status_code == 200 and found.json()["data"]:
            return str(found.json()["data"][0]["run_id"])
    raise AssertionError("the run never started")


async def test_connect_to_an_idle_thread_sends_its_snapshots(client: httpx.AsyncClient) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    ask = user("[words:3]")
    await ag_ui(client, run_input(thread, [ask]))
    framed = await connect(client, thread)
    events = [e for _, e in framed]
    assert types(events) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    messages = events[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["id"] == ask["id"] and messages[1]["content"] == "word1 word2 word3"
    assert events[2]["snapshot"] == {}
    assert events[-1]["outcome"] == {"type": "success"}
    assert all(frame_id is not None for frame_id, _ in framed)


async def test_connect_to_an_unknown_thread_is_404_problem(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/ag-ui/connect", json={"threadId": "never-seen"})
    assert reply.status_code == 404
    assert reply.headers["content-type"].startswith("application/problem+json")
    stop = await client.post("/v1/ag-ui/stop", json={"threadId": "never-seen"})
    assert stop.status_code == 404


async def test_connect_without_a_thread_is_422(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/ag-ui/connect", json={"runId": "x"})
    assert reply.status_code == 422
    bad = await client.post(
        "/v1/ag-ui/connect", json={"threadId": "x"}, headers={"Last-Event-ID": "nope"}
    )
    assert bad.status_code in (404, 422)


async def test_connect_yields_a_waiting_approval_again(client: httpx.AsyncClient) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    props = {"approval_required": ["echo"]}
    first = await ag_ui(
        client, run_input(thread, [user('[tool:echo {"text": "ship"}]')], forwardedProps=props)
    )
    (interrupt,) = first[-1]["outcome"]["interrupts"]
    events = [e for _, e in await connect(client, thread)]
    assert types(events)[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    assert types(events)[3:] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    snapshot_calls = [m.get("toolCalls") for m in events[1]["messages"]]
    assert not any(snapshot_calls)  # the waiting call comes as events, once
    assert events[3]["toolCallId"] == interrupt["id"]
    assert events[-1]["outcome"]["type"] == "interrupt"
    assert events[-1]["outcome"]["interrupts"][0]["id"] == interrupt["id"]


async def test_connect_yields_a_waiting_frontend_tool_call_again(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    tool = {"name": "pick_color", "description": "Ask.", "parameters": {"type": "object"}}
    first = await ag_ui(
        client, run_input(thread, [user('[tool:pick_color {"hint": "warm"}]')], tools=[tool])
    )
    call_id = first[-1]["outcome"]["pendingToolCallIds"][0]
    events = [e for _, e in await connect(client, thread)]
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallId"] == call_id and start["toolCallName"] == "pick_color"
    assert events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [call_id]}


async def test_connect_during_a_run_follows_it_to_the_end_once(client: httpx.AsyncClient) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    runner = asyncio.create_task(ag_ui(client, run_input(thread, [user("[sleep:800] [words:12]")])))
    ours = await active_run(client, thread)
    framed = await connect(client, thread)
    original = await runner
    events = [e for _, e in framed]
    assert events[0]["type"] == "RUN_STARTED" and events[0]["runId"] == ours
    assert types(events)[1:3] == ["MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    words = " ".join(f"word{n}" for n in range(1, 13))
    assert text_of(events) == words == text_of(original)
    assert types(events).count("TEXT_MESSAGE_START") == 1
    # Resumed from every frame id: the rest, each event once.
    for n, (frame_id, _) in enumerate(framed):
        if frame_id is None or n < 3:
            continue
        rest = [e for _, e in await connect(client, thread, last_event_id=frame_id)]
        before = [e for _, e in framed[: n + 1]]
        assert text_of(before) + text_of(rest) == words, (frame_id, rest)
        assert rest == [] or rest[-1]["type"] == "RUN_FINISHED"
        assert "RUN_STARTED" not in types(rest)


async def test_stop_interrupts_the_active_run(client: httpx.AsyncClient) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = run_input(thread, [user("[sleep:30000]")], runId="long-one")
    runner = asyncio.create_task(ag_ui(client, body))
    await active_run(client, thread)
    other = await client.post("/v1/ag-ui/stop", json={"threadId": thread, "runId": "other"})
    assert other.status_code == 200 and other.json()["stopped"] is False
    stopped = await client.post("/v1/ag-ui/stop", json={"threadId": thread, "runId": "long-one"})
    assert stopped.status_code == 200 and stopped.json()["stopped"] is True, stopped.json()
    events = await asyncio.wait_for(runner, 10)
    assert events[-1]["outcome"] == {"type": "cancelled"}
    again = await client.post("/v1/ag-ui/stop", json={"threadId": thread})
    assert again.json()["stopped"] is False
