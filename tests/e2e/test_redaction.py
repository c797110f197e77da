"""R20: canary secrets never reach the events, snapshots, runs, logs, SSE or the export.

Issue #19 adds the credentials of the model profiles (each kind, and the implicit `openai`
profile of ASR_OPENAI_API_KEY) and an MCP server's header token: none may appear in a
table, a log line, an SSE frame, the export or any API answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from sqlalchemy import text

from app.store.stores import Stores
from tests import fake_anthropic, fake_gemini, fake_openai
from tests.conftest import Server, TenantKey, free_port, start_server, stop_server
from tests.loopback import serve
from tests.mcp.process import HttpServer

CANARIES = [
    "sk-test-CANARY0123456789abcdef",
    "ghp_CANARY0123456789abcdefghij",
    "AKIACANARY0123456789",
    "Bearer CANARYbearerTOKEN0123",
    "API_KEY=CANARYvalue42",
]


def leaked(blob: str) -> list[str]:
    return [c for c in ("CANARY0123456789", "CANARYbearer", "CANARYvalue") if c in blob]


async def test_r20_canaries_are_redacted_everywhere(
    server: Server, tenant: TenantKey, store: Stores
) -> None:
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=tenant.headers, timeout=60
    ) as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        for canary in CANARIES:
            item = {"type": "message", "role": "user", "content": f"my key is {canary}"}
            await http.post(f"/v1/sessions/{sid}/items", json={"items": [item]})
        # Model output (echo), tool arguments and tool results, and a stream transcript.
        async with http.stream(
            "POST",
            f"/v1/sessions/{sid}/runs",
            json={"input": f"repeat {CANARIES[0]}", "mode": "stream"},
        ) as response:
            transcript = (await response.aread()).decode()
        arg = json.dumps({"text": CANARIES[1]})
        await http.post(f"/v1/sessions/{sid}/runs", json={"input": f"[tool:echo {arg}]"})
        await http.post(f"/v1/sessions/{sid}/save")
        export = (
            await http.get(f"/v1/sessions/{sid}/events", headers={"Accept": "application/x-ndjson"})
        ).text
        state = (await http.get(f"/v1/sessions/{sid}/state")).text
        runs = (await http.get(f"/v1/sessions/{sid}/runs")).text
        assert (await http.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"]
    assert leaked(transcript) == [] and "[REDACTED]" in transcript
    assert leaked(export) == [] and export.count("[REDACTED]") >= len(CANARIES)
    assert leaked(state) == [] and leaked(runs) == []
    async with store.database.read(tenant.tenant_id) as conn:
        for table in ("session_events", "session_snapshots", "runs"):
            rows = (await conn.execute(text(f"SELECT * FROM {table}"))).all()
            assert leaked(repr(rows)) == [], table
    assert leaked(server.log()) == []


# ------------------------------------------------- issue #19: provider and MCP credentials

# Shaped like no pattern the redactor knows: if one of these shows up, it leaked, and no
# redaction hid it.
PROFILE_CANARIES = {
    "oai": ("ASR_TEST_OAI_CANARY", "oaiCANARYprofileKEY0123"),
    "claude": ("ASR_TEST_CLAUDE_CANARY", "claudeCANARYprofileKEY0123"),
    "gem": ("ASR_TEST_GEM_CANARY", "gemCANARYprofileKEY0123"),
}
IMPLICIT_OPENAI_CANARY = "implicitCANARYopenaiKEY0123"
MCP_CANARY = "mcpCANARYheaderTOKEN0123"
ALL_CANARIES = [c for _, c in PROFILE_CANARIES.values()] + [IMPLICIT_OPENAI_CANARY, MCP_CANARY]


def credential_leaks(blob: str) -> list[str]:
    return [c for c in ALL_CANARIES if c in blob]


async def test_issue_19_credentials_of_every_profile_leak_nowhere(
    database_url: str, tmp_path: Path, tenant: TenantKey, store: Stores
) -> None:
    keys = {name: key for name, (_, key) in PROFILE_CANARIES.items()}
    mcp = HttpServer(port=free_port(), token=MCP_CANARY)
    mcp.start()
    with (
        serve(fake_openai.build_app(key=keys["oai"])) as oai,
        serve(fake_anthropic.build_app(key=keys["claude"])) as claude,
        serve(fake_gemini.build_app(key=keys["gem"])) as gem,
    ):
        kinds = {"oai": "openai", "claude": "anthropic", "gem": "gemini"}
        urls = {"oai": f"{oai}/v1", "claude": claude, "gem": gem}
        retry = {"max_attempts": 2, "initial_backoff_seconds": 0.01}
        profiles = {
            name: {
                "kind": kinds[name],
                "base_url": urls[name],
                "api_key_env": PROFILE_CANARIES[name][0],
                "default_model": "m",
                "retry": retry,
            }
            for name in kinds
        }
        servers = {"web": {"url": mcp.url, "headers": {"X-Test-Token": {"env": "ASR_TEST_MCP"}}}}
        srv = start_server(
            database_url,
            tmp_path / "server.log",
            ASR_LOG_LEVEL="info",
            ASR_MODEL_PROFILES=json.dumps(profiles),
            ASR_MCP_SERVERS=json.dumps(servers),
            ASR_OPENAI_BASE_URL=f"{oai}/v1",  # the implicit profile, with a key the fake refuses
            ASR_OPENAI_API_KEY=IMPLICIT_OPENAI_CANARY,
            ASR_TEST_MCP=MCP_CANARY,
            **{env: key for env, key in PROFILE_CANARIES.values()},
        )
        try:
            answers, sids = await _exercise_every_profile(srv, tenant)
        finally:
            stop_server(srv)
            mcp.stop()
    assert credential_leaks("\n".join(answers)) == []
    async with store.database.read(tenant.tenant_id) as conn:  # every row this test wrote
        for table in (
            "sessions",
            "session_events",
            "session_snapshots",
            "runs",
            "idempotency_keys",
        ):
            rows = (await conn.execute(text(f"SELECT * FROM {table}"))).all()
            assert credential_leaks(repr(rows)) == [], table
    log = srv.log()
    assert credential_leaks(log) == [] and "Traceback" not in log
    joined = "\n".join(answers)
    # The paths ran: tool round trips (built-in and MCP) on each configured profile, refused
    # keys (and the implicit profile's canary, which the fake refuses), exhausted retries.
    assert joined.count("The tool said: hi") >= 3 and joined.count("The tool said: 3") >= 3
    assert "model_auth_failed" in joined and "model_rate_limited" in joined and len(sids) == 4


async def _exercise_every_profile(srv: Server, tenant: TenantKey) -> tuple[list[str], list[str]]:
    """Runs on every profile (a tool round trip streamed, a refused key, rate limits past
    the retries, an MCP call), then every read a client could make; returns the answers."""
    answers: list[str] = []
    sids: list[str] = []
    async with httpx.AsyncClient(base_url=srv.base_url, headers=tenant.headers, timeout=60) as http:
        for path in ("/v1/models", "/v1/tools", "/metrics"):
            answers.append((await http.get(path)).text)
        for profile in (*PROFILE_CANARIES, "openai"):
            agent = {"provider": profile, "tools": ["echo", "web__*"]}
            created = await http.post("/v1/sessions", json={"agent": agent})
            answers.append(created.text)
            sid = created.json()["session_id"]
            sids.append(sid)
            body = {"input": '[call:echo {"text": "hi"}]', "mode": "stream"}
            async with http.stream("POST", f"/v1/sessions/{sid}/runs", json=body) as response:
                answers.append((await response.aread()).decode())
            for text_ in ("[auth] again", "[429:9] busy", '[call:web__add {"a": 1, "b": 2}]'):
                answers.append(
                    (await http.post(f"/v1/sessions/{sid}/runs", json={"input": text_})).text
                )
            await http.post(f"/v1/sessions/{sid}/save")
            ndjson = {"Accept": "application/x-ndjson"}
            answers.append((await http.get(f"/v1/sessions/{sid}/events", headers=ndjson)).text)
            for tail in ("", "/state", "/runs", "/usage", "/context", "/memory?full=true"):
                answers.append((await http.get(f"/v1/sessions/{sid}{tail}")).text)
            async with http.stream(
                "GET", f"/v1/sessions/{sid}/events/stream", params={"after_seq": 0}
            ) as timeline:
                # The replayed part of the live timeline, up to the newest event.
                async for line in timeline.aiter_lines():
                    answers.append(line)
                    if line.startswith("event: SESSION_SAVED"):
                        break
    return answers, sids
