"""Issue #22 against real servers: with an OpenAI-compatible model (tests/fake_openai.py, over
HTTP) reasoning streams as AG-UI reasoning events before the text, and a frontend tool's call,
assembled from fragmented deltas, goes out as TOOL_CALL_* and comes back as a tool message;
with two replicas, a retried runId is streamed by the one that does not run it, its shared
state (STATE_SNAPSHOT, STATE_DELTA) included."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx

from app.runtime.session.json_patch import apply_patch
from tests.conftest import Server, TenantKey
from tests.e2e.test_runs import openai_server, replicas  # noqa: F401  (the fixtures)


async def ag_ui(http: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    reply = await http.post("/v1/ag-ui", json=body)
    assert reply.status_code == 200, reply.text
    return [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]


def body(thread: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": uuid.uuid4().hex, "messages": messages, **extra}


async def test_reasoning_text_and_a_frontend_tool_over_ag_ui(
    openai_server: Server,  # noqa: F811
    tenant: TenantKey,
) -> None:
    async with httpx.AsyncClient(
        base_url=openai_server.base_url, headers=tenant.headers, timeout=60
    ) as http:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        agent = {"provider": "openai", "model": "fake-model"}
        created = await http.post("/v1/sessions", json={"session_id": thread, "agent": agent})
        assert created.status_code == 201
        hello = {"id": "u1", "role": "user", "content": "hello"}
        events = await ag_ui(http, body(thread, [hello]))
        kinds = [e["type"] for e in events]
        # Reasoning first, then the text; deltas are coalesced and may overtake the step's
        # start on the bus.
        reasoning = [k for k in kinds if k.startswith("REASONING_")]
        assert reasoning[0] == "REASONING_START" and reasoning[-1] == "REASONING_END"
        assert kinds.index("REASONING_END") < kinds.index("TEXT_MESSAGE_START")
        assert kinds[0] == "RUN_STARTED" and "STEP_STARTED" in kinds
        assert 1 <= kinds.count("TEXT_MESSAGE_CONTENT") <= 3
        text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text == "openai echo: hello" == events[-1]["result"]

        weather = {
            "name": "weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
        ask = {"id": "u2", "role": "user", "content": "what is the weather?"}
        asked = await ag_ui(http, body(thread, [hello, ask], tools=[weather]))
        start = next(e for e in asked if e["type"] == "TOOL_CALL_START")
        args = next(e for e in asked if e["type"] == "TOOL_CALL_ARGS")["delta"]
        assert start["toolCallName"] == "weather" and json.loads(args) == {"city": "Paris"}
        assert asked[-1]["outcome"]["pendingToolCallIds"] == [start["toolCallId"]]
        answer = {"id": "t1", "role": "tool", "toolCallId": start["toolCallId"], "content": "18C"}
        done = await ag_ui(http, body(thread, [hello, ask, answer], tools=[weather]))
        assert done[-1]["result"] == "The tool said: 18C"


async def test_a_retried_run_id_on_another_replica_streams_the_run_from_the_ledger(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    """The retry lands on a replica that does not run the run: it finds the run by the
    runId's key and streams it from the table until RUN_FINISHED (no second run)."""
    a, b = replicas
    thread = f"t-{uuid.uuid4().hex[:8]}"
    request = body(thread, [{"id": "u1", "role": "user", "content": "[sleep:1500] [words:3]"}])
    async with (
        httpx.AsyncClient(base_url=a.base_url, headers=tenant.headers, timeout=60) as on_a,
        httpx.AsyncClient(base_url=b.base_url, headers=tenant.headers, timeout=60) as on_b,
    ):
        first = asyncio.create_task(ag_ui(on_a, request))
        for _ in range(300):  # bounded: until replica A has started the run
            listed = await on_b.get(f"/v1/sessions/{thread}/runs")
            if listed.status_code == 200 and listed.json()["data"]:
                break
            await asyncio.sleep(0.02)
        retried = await ag_ui(on_b, request)
        original = await first
    assert retried[0]["metadata"]["asr_run_id"] == original[0]["metadata"]["asr_run_id"]
    for events in (original, retried):
        text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text == "word1 word2 word3" and events[-1]["type"] == "RUN_FINISHED"
    async with httpx.AsyncClient(base_url=a.base_url, headers=tenant.headers) as api:
        assert len((await api.get(f"/v1/sessions/{thread}/runs")).json()["data"]) == 1


async def test_state_of_a_run_streams_the_same_from_the_replica_that_does_not_run_it(
    replicas: list[Server],  # noqa: F811
    tenant: TenantKey,
) -> None:
    """Shared state across replicas: the retry on B (from the ledger and the bus) opens with
    the state the run started from and sends the same deltas as A, which runs it; applied,
    both give what the service stores."""
    a, b = replicas
    thread = f"t-{uuid.uuid4().hex[:8]}"
    patch = [
        {"op": "replace", "path": "/n", "value": 1},
        {"op": "add", "path": "/by", "value": "a"},
    ]
    text = f"[sleep:800] [state:{json.dumps(patch)}]"
    request = body(thread, [{"id": "u1", "role": "user", "content": text}], state={"n": 0})
    async with (
        httpx.AsyncClient(base_url=a.base_url, headers=tenant.headers, timeout=60) as on_a,
        httpx.AsyncClient(base_url=b.base_url, headers=tenant.headers, timeout=60) as on_b,
    ):
        first = asyncio.create_task(ag_ui(on_a, request))
        for _ in range(300):  # bounded: until replica A has started the run
            listed = await on_b.get(f"/v1/sessions/{thread}/runs")
            if listed.status_code == 200 and listed.json()["data"]:
                break
            await asyncio.sleep(0.02)
        retried = await ag_ui(on_b, request)
        original = await first
        stored = (await on_b.get(f"/v1/sessions/{thread}/shared-state")).json()
    assert stored == {"n": 1, "by": "a"}
    for events in (original, retried):
        states = [e for e in events if e["type"] in ("STATE_SNAPSHOT", "STATE_DELTA")]
        assert [e["type"] for e in states] == ["STATE_SNAPSHOT", "STATE_DELTA"], events
        assert states[0]["snapshot"] == {"n": 0} and states[1]["delta"] == patch
        assert apply_patch(states[0]["snapshot"], states[1]["delta"]) == stored
