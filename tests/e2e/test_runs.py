"""Runs over real HTTP: every scripted directive, the three modes, client tools, approvals,
concurrency (R4), cancel, idempotent run creation (R2), and the OpenAI-compatible client
against a loopback server that speaks the real wire format."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import aconnect_sse

from tests.conftest import ROOT, Server, TenantKey, free_port, start_server, stop_server


@pytest.fixture
async def http(server: Server, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, headers=tenant.headers, timeout=60) as c:
        yield c


async def session(http: httpx.AsyncClient, **body: object) -> str:
    response = await http.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


async def run(http: httpx.AsyncClient, sid: str, **body: object) -> dict:
    response = await http.post(f"/v1/sessions/{sid}/runs", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def assert_ledger_sound(http: httpx.AsyncClient, sid: str) -> list[dict]:
    events = (await http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})).json()["data"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert (await http.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"] is True
    return events


DIRECTIVES = [
    ("hello there", "finished", "COMPLETED", "echo: hello there"),
    (
        '[tool:arithmetic {"op": "mul", "a": 6, "b": 7}]',
        "finished",
        "COMPLETED",
        "arithmetic returned: 42",
    ),
    ("[ask]", "finished", "NEEDS_USER_INPUT", "Could you tell me more about what you need?"),
    ("[continue:2]", "finished", "COMPLETED", "done after 2 parts."),
    ("[continue:5]", "finished", "MAX_AUTO_FOLLOWUPS_REACHED", "part 4 of 5 ..."),
    ("[fail]", "failed", None, None),
    ("[sleep:200] late", "finished", "COMPLETED", "echo: late"),
    ("[words:4]", "finished", "COMPLETED", "word1 word2 word3 word4"),
    ("[tool:fail {}]", "finished", "BLOCKED_BY_TOOL_ERROR", None),
]


async def test_every_directive_has_its_outcome(http: httpx.AsyncClient) -> None:
    sid = await session(http)
    for text, status, stop, output in DIRECTIVES:
        result = await run(http, sid, input=text)
        assert (result["status"], result["stop_reason"], result["output"]) == (
            status,
            stop,
            output,
        ), text
        events = await assert_ledger_sound(http, sid)
        mine = [e for e in events if e["run_id"] == result["run_id"]]
        assert mine[0]["type"] == "RUN_STARTED" and mine[-1]["type"] == "RUN_FINISHED"
        assert result["first_seq"] == mine[0]["seq"] and result["last_seq"] == mine[-1]["seq"]
        assert all(e["turn_id"] for e in mine if e["type"] in ("MODEL_REQUEST", "MODEL_RESPONSE"))
    types = [e["type"] for e in await assert_ledger_sound(http, sid)]
    assert "AUTO_CONTINUE" in types and "ERROR" in types and "TOOL_CALL" in types
    # The hidden continuation instruction never entered memory as a user message.
    memory = (await http.get(f"/v1/sessions/{sid}/memory")).json()["items"]
    users = [i["content"] for i in memory if i.get("role") == "user"]
    assert users == [d[0] for d in DIRECTIVES]


async def test_turn_limit_and_usage(http: httpx.AsyncClient) -> None:
    sid = await session(http, agent={"max_total_turns": 1})
    result = await run(http, sid, input='[tool:echo {"text": "x"}]')
    assert result["stop_reason"] == "MAX_TOTAL_TURNS_REACHED"
    usage = (await http.get(f"/v1/sessions/{sid}/usage")).json()
    assert usage["usage"]["total_tokens"] == result["usage"]["total_tokens"] > 0
    assert [r["run_id"] for r in usage["runs"]] == [result["run_id"]]


async def test_budgets_stop_a_run_with_budget_exceeded(http: httpx.AsyncClient) -> None:
    sid = await session(http)
    tool = '[tool:echo {"text": "x"}]'
    calls = await run(http, sid, input=tool, limits={"max_tool_calls": 0})
    assert calls["stop_reason"] == "BUDGET_EXCEEDED"
    tokens = await run(http, sid, input=tool, limits={"max_tokens": 1})
    assert tokens["stop_reason"] == "BUDGET_EXCEEDED"
    stops = [e["payload"] for e in await assert_ledger_sound(http, sid) if e["type"] == "AUTO_STOP"]
    assert [s["budget"] for s in stops] == ["tool_calls", "tokens"]


async def test_stream_mode_sends_deltas_then_events(http: httpx.AsyncClient) -> None:
    sid = await session(http)
    body = {"input": "[words:30]", "mode": "stream"}
    async with http.stream("POST", f"/v1/sessions/{sid}/runs", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = (await response.aread()).decode()
    blocks = [
        dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != ":")
        for block in raw.replace("\r\n", "\n").split("\n\n")
        if block.strip() and not block.startswith(":")
    ]
    kinds = [b.get("event") for b in blocks]
    # Deltas are coalesced (ASR_SSE_DELTA_FLUSH_MS): at least one frame, never more than the
    # model's 30 chunks; together they are the text, in order.
    assert 1 <= kinds.count("delta") <= 30
    assert kinds.index("delta") < kinds.index("FINAL_OUTPUT") < kinds.index("RUN_FINISHED")
    assert all("id" not in b for b in blocks if b.get("event") == "delta")
    seqs = [int(b["id"]) for b in blocks if b.get("event") not in ("delta", None)]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    text = "".join(json.loads(b["data"])["text"] for b in blocks if b.get("event") == "delta")
    assert text == " ".join(f"word{i}" for i in range(1, 31))


async def test_stream_mode_deltas_are_redacted_like_the_stored_answer(
    http: httpx.AsyncClient,
) -> None:
    sid = await session(http)
    secret = "sk-abcdefghijklmnop1234"
    body = {"input": f"[pace:1] my key is {secret} ok", "mode": "stream"}
    async with http.stream("POST", f"/v1/sessions/{sid}/runs", json=body) as response:
        raw = (await response.aread()).decode()
    deltas = [
        json.loads(line[len("data: ") :])["text"]
        for block in raw.split("\r\n\r\n")
        if block.startswith("event: delta")
        for line in block.split("\r\n")
        if line.startswith("data: ")
    ]
    text = "".join(deltas)
    assert secret not in raw and "[REDACTED]" in text and text.endswith(" ok")


async def test_background_mode_returns_202_and_location(http: httpx.AsyncClient) -> None:
    sid = await session(http)
    response = await http.post(
        f"/v1/sessions/{sid}/runs", json={"input": "[sleep:300] bg", "mode": "background"}
    )
    assert response.status_code == 202
    location = response.headers["location"]
    for _ in range(100):
        polled = (await http.get(location)).json()
        if polled["status"] != "running":
            break
        await asyncio.sleep(0.05)
    assert polled["stop_reason"] == "COMPLETED" and polled["output"] == "echo: bg"


async def test_client_tool_round_trip(http: httpx.AsyncClient) -> None:
    sid = await session(http)
    lookup = {
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    first = await run(http, sid, input='[tool:lookup {"q": "x"}]', client_tools=[lookup])
    assert first["stop_reason"] == "NEEDS_USER_INPUT"
    [pending] = first["pending"]
    assert pending["name"] == "lookup" and pending["kind"] == "client"
    blocked = await http.post(f"/v1/sessions/{sid}/runs", json={"input": "new question"})
    assert blocked.status_code == 409 and blocked.json()["code"] == "tool_calls_pending"
    answered = await http.post(
        f"/v1/sessions/{sid}/tool-outputs",
        json={"outputs": [{"call_id": pending["call_id"], "output": "found it"}]},
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["stop_reason"] == "COMPLETED"
    assert answered.json()["output"] == "lookup returned: found it"
    again = await http.post(
        f"/v1/sessions/{sid}/tool-outputs",
        json={"outputs": [{"call_id": pending["call_id"], "output": "twice"}]},
    )
    assert again.status_code == 409 and again.json()["code"] == "nothing_pending"
    replaced = await http.post(
        f"/v1/sessions/{sid}/tool-outputs",
        json={"outputs": [{"call_id": pending["call_id"], "output": "corrected"}], "replace": True},
    )
    assert replaced.status_code == 200 and replaced.json()["run"] is None
    memory = (await http.get(f"/v1/sessions/{sid}/memory")).json()["items"]
    assert [i["output"] for i in memory if i["type"] == "function_call_output"] == ["corrected"]
    await assert_ledger_sound(http, sid)


async def test_approval_then_approve_and_reject(http: httpx.AsyncClient) -> None:
    sid = await session(http, agent={"approval_required": ["echo"]})
    first = await run(http, sid, input='[tool:echo {"text": "launch"}]')
    assert first["stop_reason"] == "BLOCKED_BY_APPROVAL"
    call_id = first["pending"][0]["call_id"]
    approved = await http.post(
        f"/v1/sessions/{sid}/approvals", json={"call_id": call_id, "decision": "approve"}
    )
    assert approved.json()["stop_reason"] == "COMPLETED"
    assert approved.json()["output"] == "echo returned: launch"

    second = await run(http, sid, input='[tool:echo {"text": "again"}]')
    call_id = second["pending"][0]["call_id"]
    rejected = await http.post(
        f"/v1/sessions/{sid}/approvals",
        json={"call_id": call_id, "decision": "reject", "reason": "not today"},
    )
    assert rejected.json()["stop_reason"] == "COMPLETED"
    assert rejected.json()["output"] == "echo returned: rejected by the user: not today"
    types = [e["type"] for e in await assert_ledger_sound(http, sid)]
    assert types.count("APPROVAL_REQUESTED") == 2 and types.count("APPROVAL_DECIDED") == 2


async def test_one_active_run_cancel_and_enqueue(http: httpx.AsyncClient) -> None:
    sid = await session(http)
    slow = await http.post(
        f"/v1/sessions/{sid}/runs", json={"input": "[sleep:5000] slow", "mode": "background"}
    )
    assert slow.status_code == 202
    second = await http.post(f"/v1/sessions/{sid}/runs", json={"input": "hi"})
    assert second.status_code == 409 and second.json()["code"] == "run_in_progress"
    # The cancel answers with the run interrupted, not finished: it did not wait out the
    # 5 s sleep (how quickly it answers is not judged here).
    cancelled = await http.post(f"/v1/sessions/{sid}/runs/{slow.json()['run_id']}/cancel")
    assert cancelled.json()["status"] == "interrupted"
    assert cancelled.json()["stop_reason"] == "INTERRUPTED"
    # Enqueue: both run, one after the other, their seq ranges never overlap.
    a, b = await asyncio.gather(
        http.post(
            f"/v1/sessions/{sid}/runs", json={"input": "[sleep:300] a", "multitask": "enqueue"}
        ),
        http.post(
            f"/v1/sessions/{sid}/runs", json={"input": "[sleep:300] b", "multitask": "enqueue"}
        ),
    )
    ranges = sorted((r.json()["first_seq"], r.json()["last_seq"]) for r in (a, b))
    assert all(r.json()["stop_reason"] == "COMPLETED" for r in (a, b))
    assert ranges[0][1] < ranges[1][0]
    await assert_ledger_sound(http, sid)


async def test_r2_idempotent_run_creation(http: httpx.AsyncClient) -> None:
    sid = await session(http)
    headers = {"Idempotency-Key": "run-once"}
    first = await http.post(f"/v1/sessions/{sid}/runs", json={"input": "once"}, headers=headers)
    again = await http.post(f"/v1/sessions/{sid}/runs", json={"input": "once"}, headers=headers)
    assert again.content == first.content and again.headers["idempotent-replayed"] == "true"
    runs = (await http.get(f"/v1/sessions/{sid}/runs")).json()["data"]
    assert len(runs) == 1


async def test_oneshot_run_keeps_nothing(http: httpx.AsyncClient) -> None:
    before = len((await http.get("/v1/sessions")).json()["data"])
    result = await http.post("/v1/runs", json={"input": "quick"})
    assert result.status_code == 200 and result.json()["output"] == "echo: quick"
    assert len((await http.get("/v1/sessions")).json()["data"]) == before
    kept = await http.post("/v1/runs", json={"input": "keep me", "keep": True})
    assert (await http.get(f"/v1/sessions/{kept.json()['session_id']}")).status_code == 200


# ----------------------------------------------------------------- two replicas (R4)


@pytest.fixture(scope="module")
def replicas(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    folder = tmp_path_factory.mktemp("replicas")
    servers = [start_server(database_url, folder / f"r{i}.log") for i in range(2)]
    yield servers
    for s in servers:
        stop_server(s)


async def test_r4_ten_concurrent_runs_across_two_replicas(
    replicas: list[Server], tenant: TenantKey
) -> None:
    clients = [
        httpx.AsyncClient(base_url=s.base_url, headers=tenant.headers, timeout=60) for s in replicas
    ]
    try:
        sid = (await clients[0].post("/v1/sessions", json={})).json()["session_id"]
        body = {"input": "[sleep:500] r", "mode": "background"}
        rejected = await asyncio.gather(
            *(clients[i % 2].post(f"/v1/sessions/{sid}/runs", json=body) for i in range(10))
        )
        codes = sorted(r.status_code for r in rejected)
        assert codes == [202] + [409] * 9
        winner = next(r for r in rejected if r.status_code == 202).json()
        done = await clients[0].post(f"/v1/sessions/{sid}/runs/{winner['run_id']}/cancel")
        assert done.status_code == 200

        queued = {"input": "[sleep:50] q", "multitask": "enqueue"}
        results = await asyncio.gather(
            *(clients[i % 2].post(f"/v1/sessions/{sid}/runs", json=queued) for i in range(10))
        )
        assert all(r.status_code == 200 and r.json()["stop_reason"] == "COMPLETED" for r in results)
        spans = sorted((r.json()["first_seq"], r.json()["last_seq"]) for r in results)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
        await assert_ledger_sound(clients[0], sid)
    finally:
        for c in clients:
            await c.aclose()


# ----------------------------------------------------------------- OpenAI-compatible


@pytest.fixture(scope="module")
def openai_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    fake = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={}, timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    log = tmp_path_factory.mktemp("openai") / "server.log"
    srv = start_server(
        database_url,
        log,
        ASR_OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
        ASR_OPENAI_API_KEY="sk-test-fake-key",
    )
    yield srv
    stop_server(srv)
    fake.terminate()
    fake.wait(timeout=10)
    assert "sk-test-fake-key" not in Path(log).read_text()


async def test_openai_client_streams_and_round_trips_a_tool_call(
    openai_server: Server, tenant: TenantKey
) -> None:
    async with httpx.AsyncClient(
        base_url=openai_server.base_url, headers=tenant.headers, timeout=60
    ) as http:
        sid = await session(http, agent={"provider": "openai", "model": "fake-model"})
        frames = []
        async with aconnect_sse(
            http, "POST", f"/v1/sessions/{sid}/runs", json={"input": "hello", "mode": "stream"}
        ) as source:
            async for sse in source.aiter_sse():
                frames.append(sse)
        kinds = [f.event for f in frames]
        assert "reasoning_delta" in kinds and 1 <= kinds.count("delta") <= 3  # coalesced
        text = "".join(json.loads(f.data)["text"] for f in frames if f.event == "delta")
        assert text == "openai echo: hello"
        runs = (await http.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        assert runs[0]["usage"] == {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}

        weather = {
            "name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
        asked = await run(http, sid, input="what is the weather?", client_tools=[weather])
        assert asked["stop_reason"] == "NEEDS_USER_INPUT"
        [call] = asked["pending"]
        assert call["name"] == "weather" and json.loads(call["arguments"]) == {"city": "Paris"}
        done = await http.post(
            f"/v1/sessions/{sid}/tool-outputs",
            json={"outputs": [{"call_id": call["call_id"], "output": "18C"}]},
        )
        assert done.json()["stop_reason"] == "COMPLETED"
        assert done.json()["output"] == "The tool said: 18C"
        events = await assert_ledger_sound(http, sid)
        assert "sk-test-fake-key" not in json.dumps(events)
        state = (await http.get(f"/v1/sessions/{sid}/state")).text
        assert "sk-test-fake-key" not in state


async def test_openai_errors_fail_the_run_without_leaking_the_key(
    database_url: str, tmp_path: Path, tenant: TenantKey
) -> None:
    srv = start_server(
        database_url,
        tmp_path / "s.log",
        ASR_OPENAI_BASE_URL=f"http://127.0.0.1:{free_port()}/v1",
        ASR_OPENAI_API_KEY="sk-secret-nope",
        ASR_OPENAI_TIMEOUT_SECONDS="2",
    )
    try:
        async with httpx.AsyncClient(
            base_url=srv.base_url, headers=tenant.headers, timeout=60
        ) as http:
            sid = await session(http, agent={"provider": "openai"})
            result = await run(http, sid, input="hi")
            # Nothing listens there: an outage, retried per the profile, then a provider stop.
            assert result["status"] == "failed" and result["error"]["code"] == "model_unavailable"
            assert result["stop_reason"] == "PROVIDER_ERROR"
            assert "'openai'" in result["error"]["detail"]
            assert "sk-secret-nope" not in json.dumps(await assert_ledger_sound(http, sid))
    finally:
        stop_server(srv)
    assert "sk-secret-nope" not in srv.log()
