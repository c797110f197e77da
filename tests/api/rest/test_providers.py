"""Issue #19 (1, 2): each provider kind, through its official SDK, against a loopback server
that speaks the provider's wire format (tests/fake_openai.py, fake_anthropic.py,
fake_gemini.py): streamed deltas, tool-call fragments, usage, and the failures — 429 with a
retry hint, a context-length refusal, a refused key — as stop reasons, never crashes.

Every profile's key is a canary; no answer, event or state read here may contain it.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from httpx_sse import aconnect_sse

from app.main import create_app
from app.settings import Settings
from tests import fake_anthropic, fake_gemini, fake_openai
from tests.conftest import TenantKey
from tests.fake_behaviour import CONTEXT_LIMIT
from tests.loopback import serve

KINDS = ["oai", "claude", "gem"]
KEYS = {
    "oai": ("ASR_TEST_OAI_KEY", "sk-test-fake-key"),
    "claude": ("ASR_TEST_CLAUDE_KEY", fake_anthropic.KEY),
    "gem": ("ASR_TEST_GEM_KEY", fake_gemini.KEY),
}
RETRY = {"max_attempts": 3, "initial_backoff_seconds": 0.01, "max_backoff_seconds": 5}


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, str]]:
    with (
        serve(fake_openai.app) as oai,
        serve(fake_anthropic.build_app()) as claude,
        serve(fake_gemini.build_app()) as gem,
    ):
        yield {"oai": f"{oai}/v1", "claude": claude, "gem": gem}


def profiles(urls: dict[str, str]) -> dict[str, dict[str, Any]]:
    kinds = {"oai": "openai", "claude": "anthropic", "gem": "gemini"}
    return {
        name: {
            "kind": kinds[name],
            "base_url": urls[name],
            "api_key_env": KEYS[name][0],
            "default_model": f"{name}-model",
            "retry": RETRY,
            "timeout_seconds": 20,
            **({"thinking_budget_tokens": 2048} if name == "claude" else {}),
        }
        for name in KINDS
    }


@pytest.fixture(scope="module")
async def provider_app(settings: Settings, fakes: dict[str, str]) -> AsyncIterator[FastAPI]:
    for env, key in KEYS.values():
        os.environ[env] = key
    application = create_app(settings.model_copy(update={"model_profiles": profiles(fakes)}))
    try:
        async with application.router.lifespan_context(application):
            yield application
    finally:
        for env, _ in KEYS.values():
            os.environ.pop(env, None)


@pytest.fixture
async def http(provider_app: FastAPI, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=provider_app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=tenant.headers, timeout=60
    ) as client:
        yield client


async def new_session(http: httpx.AsyncClient, profile: str, **agent: Any) -> str:
    answer = await http.post("/v1/sessions", json={"agent": {"provider": profile, **agent}})
    assert answer.status_code == 201, answer.text
    return answer.json()["session_id"]


async def run(http: httpx.AsyncClient, sid: str, text: str) -> dict[str, Any]:
    answer = await http.post(f"/v1/sessions/{sid}/runs", json={"input": text})
    assert answer.status_code == 200, answer.text
    return answer.json()


async def ledger(http: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    events = (await http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})).json()["data"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # gapless
    assert (await http.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"]
    return events


def assert_no_key(*blobs: str) -> None:
    for blob in blobs:
        for _, key in KEYS.values():
            assert key not in blob


@pytest.mark.parametrize("profile", KINDS)
async def test_a_run_calls_a_tool_gets_its_result_and_answers(
    http: httpx.AsyncClient, profile: str
) -> None:
    sid = await new_session(http, profile, tools=["echo"])
    frames = []
    body = {"input": '[call:echo {"text": "hi there"}]', "mode": "stream"}
    async with aconnect_sse(http, "POST", f"/v1/sessions/{sid}/runs", json=body) as source:
        async for sse in source.aiter_sse():
            frames.append(sse)
    finished = json.loads(next(f for f in frames if f.event == "RUN_FINISHED").data)
    assert finished["payload"]["stop_reason"] == "COMPLETED"
    deltas = "".join(json.loads(f.data)["text"] for f in frames if f.event == "delta")
    assert deltas == "The tool said: hi there"
    if profile != "oai":  # thinking (anthropic) and thought parts (gemini)
        assert any(f.event == "reasoning_delta" for f in frames)
    events = await ledger(http, sid)
    types = [e["type"] for e in events]
    assert types.count("TOOL_CALL") == 1 and types.count("TOOL_RESULT") == 1
    call = next(e for e in events if e["type"] == "TOOL_CALL")["payload"]
    assert call["name"] == "echo" and json.loads(call["arguments"]) == {"text": "hi there"}
    responses = [e["payload"] for e in events if e["type"] == "MODEL_RESPONSE"]
    assert all(r["usage"]["input_tokens"] > 0 for r in responses)
    assert [e["payload"]["model"] for e in events if e["type"] == "MODEL_REQUEST"] == [
        f"{profile}-model"
    ] * 2
    if profile == "claude":
        assert responses[0]["usage"]["cache_read_input_tokens"] == 4
    assert_no_key(json.dumps(events), json.dumps([f.data for f in frames]))


@pytest.mark.parametrize("profile", KINDS)
async def test_rate_limits_are_retried_honouring_the_hint(
    http: httpx.AsyncClient, profile: str
) -> None:
    sid = await new_session(http, profile)
    result = await run(http, sid, f"[429:2] retried {profile}")
    assert result["stop_reason"] == "COMPLETED", result
    assert f"retried {profile}" in result["output"]


@pytest.mark.parametrize("profile", KINDS)
async def test_rate_limits_past_the_retries_stop_the_run(
    http: httpx.AsyncClient, profile: str
) -> None:
    sid = await new_session(http, profile)
    result = await run(http, sid, f"[429:99] never {profile}")
    assert (result["status"], result["stop_reason"]) == ("failed", "PROVIDER_ERROR")
    assert result["error"]["code"] == "model_rate_limited"
    assert "gave up after 3 attempts" in result["error"]["detail"]
    assert f"'{profile}'" in result["error"]["detail"]
    # A hint longer than the profile's longest wait stops at once, saying so.
    late = await run(http, sid, f"[429:99] [hint:120] later {profile}")
    assert late["error"]["code"] == "model_rate_limited"
    assert "asks to wait 120 s" in late["error"]["detail"]
    events = await ledger(http, sid)
    stops = [e["payload"] for e in events if e["type"] == "AUTO_STOP"]
    assert stops == [{"stop_reason": "PROVIDER_ERROR", "reason": "model_rate_limited"}] * 2


@pytest.mark.parametrize("profile", KINDS)
async def test_a_refused_key_stops_with_an_error_naming_the_profile(
    http: httpx.AsyncClient, profile: str
) -> None:
    sid = await new_session(http, profile)
    result = await run(http, sid, "[auth] who am I")
    assert (result["status"], result["stop_reason"]) == ("failed", "PROVIDER_ERROR")
    assert result["error"]["code"] == "model_auth_failed"
    detail = result["error"]["detail"]
    assert f"profile '{profile}'" in detail and KEYS[profile][0] in detail
    events = await ledger(http, sid)
    error = next(e for e in events if e["type"] == "ERROR")["payload"]
    assert error["code"] == "model_auth_failed" and f"'{profile}'" in error["detail"]
    assert_no_key(json.dumps(events), json.dumps(result))


@pytest.mark.parametrize("profile", KINDS)
async def test_a_context_length_refusal_compacts_and_retries_once(
    http: httpx.AsyncClient, profile: str
) -> None:
    sid = await new_session(http, profile, compaction={"strategy": "truncate", "keep_last": 2})
    filler = [
        {"type": "message", "role": "user", "content": f"old note {i}: " + "x" * 400}
        for i in range(CONTEXT_LIMIT // 400 + 2)
    ]
    await http.post(f"/v1/sessions/{sid}/items", json={"items": filler})
    result = await run(http, sid, "fits now")
    assert result["stop_reason"] == "COMPLETED", result
    assert "fits now" in result["output"]
    events = await ledger(http, sid)
    compacted = [
        e["payload"]
        for e in events
        if e["type"] == "MEMORY_COMPRESS" and e["payload"].get("kind") == "compact"
    ]
    assert [c["result"]["trigger"] for c in compacted] == ["context_length"]
    # Still too long after compaction: the refusal stands, once, as a provider stop.
    big = "y" * (CONTEXT_LIMIT + 100)
    refused = await run(http, sid, big)
    assert refused["error"]["code"] == "model_context_too_long"
    assert refused["stop_reason"] == "PROVIDER_ERROR"


@pytest.mark.parametrize("profile", KINDS)
async def test_the_token_estimate_learns_from_the_providers_counts(
    http: httpx.AsyncClient,
    settings: Settings,
    fakes: dict[str, str],
    tenant: TenantKey,
    profile: str,
) -> None:
    sid = await new_session(http, profile)
    before = (await http.get(f"/v1/sessions/{sid}/context")).json()["estimate"]
    assert before["basis"] == "heuristic" and before["ratio"] == 1.0
    for text in ("first question " * 20, "second question " * 30):
        assert (await run(http, sid, text))["stop_reason"] == "COMPLETED"
    events = await ledger(http, sid)
    seen = [e["payload"]["calibration"] for e in events if e["type"] == "MODEL_RESPONSE"]
    assert [s["key"] for s in seen] == [f"{profile}/{profile}-model"] * 2
    assert all(s["input_tokens"] > 0 and s["estimated_tokens"] > 0 for s in seen)
    estimate = (await http.get(f"/v1/sessions/{sid}/context")).json()["estimate"]
    assert estimate["basis"] == "calibrated" and estimate["samples"] == 2
    assert estimate["ratio"] != 1.0
    assert estimate["tokens"] == -(-estimate["heuristic_tokens"] * estimate["ratio"] // 1)
    state = (await http.get(f"/v1/sessions/{sid}/state")).json()
    assert state["calibration"][f"{profile}/{profile}-model"]["samples"] == 2
    # Another process (a restart) folds the same figure from the ledger.
    restarted = create_app(settings.model_copy(update={"model_profiles": profiles(fakes)}))
    async with restarted.router.lifespan_context(restarted):
        transport = httpx.ASGITransport(app=restarted)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://asr.test", headers=tenant.headers
        ) as other:
            again = (await other.get(f"/v1/sessions/{sid}/context")).json()["estimate"]
    assert again == estimate


async def test_anthropic_thinking_survives_tool_turns_and_restarts(
    http: httpx.AsyncClient, settings: Settings, fakes: dict[str, str], tenant: TenantKey
) -> None:
    """With thinking on, the API wants a tool-calling turn's thinking blocks back (the fake
    refuses otherwise): sent from the client's cache in one process; after a restart the
    continuation goes without thinking rather than failing."""
    sid = await new_session(http, "claude", tools=["echo"], approval_required=["echo"])
    blocked = await run(http, sid, '[call:echo {"text": "later"}]')
    assert blocked["stop_reason"] == "BLOCKED_BY_APPROVAL"
    [pending] = blocked["pending"]
    restarted = create_app(settings.model_copy(update={"model_profiles": profiles(fakes)}))
    async with restarted.router.lifespan_context(restarted):
        transport = httpx.ASGITransport(app=restarted)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://asr.test", headers=tenant.headers, timeout=60
        ) as other:
            done = await other.post(
                f"/v1/sessions/{sid}/approvals",
                json={"call_id": pending["call_id"], "decision": "approve", "continue": True},
            )
    assert done.json()["stop_reason"] == "COMPLETED", done.text
    assert done.json()["output"] == "The tool said: later"
