"""Issue #22 with a real OpenAI-compatible model (tests/fake_openai.py, over HTTP): reasoning
streams as AG-UI reasoning events before the text, and a frontend tool's call, assembled from
fragmented deltas, goes out as TOOL_CALL_* and comes back as a tool message."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from tests.conftest import Server, TenantKey
from tests.e2e.test_runs import openai_server  # noqa: F401  (the fixture)


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
        assert kinds[:7] == [
            "RUN_STARTED",
            "STEP_STARTED",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
        ]
        assert kinds.count("TEXT_MESSAGE_CONTENT") == 3
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
