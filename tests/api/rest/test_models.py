"""Issue #19 (1): model profiles, `GET /v1/models` without secrets, and the 422s that name
the setting to fix when an agent names a profile that is missing or not configured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.assembly import build_models
from app.main import create_app
from app.runtime.models.profiles import ProfileError, build_profiles
from app.runtime.tools.mcp.config import McpConfigError, parse_servers
from app.settings import Settings
from tests.conftest import ROOT, TenantKey

CANARY = "sk-ant-CANARYprofile0123456789"


@pytest.fixture
async def profiled(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[FastAPI]:
    key_file = tmp_path / "gemini.key"
    key_file.write_text(CANARY + "\n")
    monkeypatch.setenv("ASR_TEST_ANTHROPIC_KEY", CANARY)
    monkeypatch.delenv("ASR_TEST_UNSET_KEY", raising=False)
    configured = settings.model_copy(
        update={
            "model_profiles": {
                "claude": {"kind": "anthropic", "api_key_env": "ASR_TEST_ANTHROPIC_KEY"},
                "gem": {"kind": "gemini", "api_key_file": str(key_file), "default_model": "g-1"},
                "local": {"kind": "openai", "base_url": "http://user:pw@127.0.0.1:9/v1"},
                "nokey": {"kind": "anthropic", "api_key_env": "ASR_TEST_UNSET_KEY"},
            }
        }
    )
    application = create_app(configured)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def http(profiled: FastAPI, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=profiled)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=tenant.headers
    ) as client:
        yield client


async def test_models_lists_profiles_without_secrets(http: httpx.AsyncClient) -> None:
    answer = await http.get("/v1/models")
    assert answer.status_code == 200
    assert CANARY not in answer.text and "pw@" not in answer.text
    profiles = {p["name"]: p for p in answer.json()["data"]}
    assert sorted(profiles) == ["claude", "gem", "local", "nokey", "openai", "scripted"]
    assert profiles["claude"]["credential"] == "env:ASR_TEST_ANTHROPIC_KEY"
    assert profiles["claude"]["configured"] is True
    assert profiles["gem"]["credential"].startswith("file:")
    assert profiles["gem"]["default_model"] == "g-1"
    assert profiles["local"]["configured"] and profiles["local"]["credential"] is None
    assert profiles["local"]["base_url"] == "http://127.0.0.1:9/v1"
    assert profiles["nokey"]["configured"] is False
    assert "ASR_TEST_UNSET_KEY" in profiles["nokey"]["missing"]
    # The settings of the test run set no OpenAI key or URL: the implicit profile says so.
    assert profiles["openai"]["configured"] is False
    assert "ASR_OPENAI_API_KEY" in profiles["openai"]["missing"]


async def test_unknown_or_unconfigured_profiles_are_422_naming_the_fix(
    http: httpx.AsyncClient,
) -> None:
    unknown = await http.post("/v1/sessions", json={"agent": {"provider": "bedrock"}})
    assert unknown.status_code == 422
    assert unknown.json()["code"] == "unknown_model_profile"
    assert "bedrock" in unknown.json()["detail"] and "claude" in unknown.json()["known"]

    unset = await http.post("/v1/sessions", json={"agent": {"provider": "nokey"}})
    assert unset.status_code == 422 and unset.json()["code"] == "model_profile_not_configured"
    assert "ASR_TEST_UNSET_KEY" in unset.json()["detail"]

    openai = await http.post("/v1/sessions", json={"agent": {"provider": "openai"}})
    assert openai.status_code == 422 and "ASR_OPENAI_API_KEY" in openai.json()["detail"]

    oneshot = await http.post("/v1/runs", json={"input": "x", "agent": {"provider": "nokey"}})
    assert oneshot.status_code == 422 and oneshot.json()["setting"]

    ok = await http.post("/v1/sessions", json={"agent": {"provider": "claude", "model": "m"}})
    assert ok.status_code == 201, ok.text


async def test_a_run_is_422_when_the_profile_went_away(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = (await http.post("/v1/sessions", json={"agent": {"provider": "claude"}})).json()[
        "session_id"
    ]
    monkeypatch.delenv("ASR_TEST_ANTHROPIC_KEY")
    answer = await http.post(f"/v1/sessions/{sid}/runs", json={"input": "hi"})
    assert answer.status_code == 422
    assert answer.json()["code"] == "model_profile_not_configured"
    assert "ASR_TEST_ANTHROPIC_KEY" in answer.json()["detail"]
    events = (await http.get(f"/v1/sessions/{sid}/events")).json()["data"]
    assert [e["type"] for e in events] == ["SESSION_CREATED"]


def test_literal_keys_and_bad_entries_are_refused_with_every_problem() -> None:
    with pytest.raises(ProfileError) as caught:
        build_profiles(
            {
                "a": {"kind": "anthropic", "api_key": "sk-ant-literal"},
                "b": {"kind": "cohere"},
                "scripted": {"kind": "openai"},
                "c": {"kind": "gemini", "api_key_env": "X", "api_key_file": "/k"},
            }
        )
    message = str(caught.value)
    assert "profile 'a'" in message and "api_key_env or api_key_file" in message
    assert "sk-ant-literal" not in message
    assert "profile 'b': kind" in message
    assert "profile 'scripted'" in message and "profile 'c'" in message


def test_the_models_file_and_the_environment_combine(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(
        "profiles:\n  local:\n    kind: openai\n    base_url: http://127.0.0.1:11434/v1\n"
        "  openai:\n    kind: openai\n    api_key_env: OPENAI_API_KEY\n"
    )
    settings = Settings(
        models_file=path,
        model_profiles={"vllm": {"kind": "openai", "base_url": "http://127.0.0.1:8001/v1"}},
        openai_api_key="sk-from-the-old-setting",  # replaced by the file's `openai`
    )
    registry = build_models(settings)
    assert registry.names() == ["local", "openai", "scripted", "vllm"]
    listing = {p["name"]: p for p in registry.listing()}
    assert listing["openai"]["credential"] == "env:OPENAI_API_KEY"


def test_the_old_openai_settings_are_the_implicit_profile() -> None:
    registry = build_models(
        Settings(openai_base_url="http://127.0.0.1:9/v1", openai_api_key="sk-old", openai_model="m")
    )
    profile = registry.check("openai")
    assert (
        profile.config.base_url == "http://127.0.0.1:9/v1"
        and registry.default_model("openai") == "m"
    )
    assert "sk-old" not in str(registry.listing())


def test_serve_refuses_a_bad_models_file_listing_every_problem(
    tmp_path: Path, database_url: str
) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(
        "profiles:\n  claude:\n    kind: anthropic\n    api_key: sk-ant-pasted-here\n"
        "mcp_servers:\n  gh:\n    url: http://127.0.0.1:9/mcp\n"
        "    headers: {Authorization: Bearer-pasted-token}\n"
    )
    env = {**os.environ, "ASR_DATABASE_URL": database_url, "ASR_MODELS_FILE": str(path)}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "profile 'claude'" in result.stderr and "api_key_env or api_key_file" in result.stderr
    assert "sk-ant-pasted-here" not in result.stderr


def test_mcp_header_values_must_be_references() -> None:
    with pytest.raises(McpConfigError) as caught:
        parse_servers(
            {
                "gh": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer x"}},
                "both": {"command": ["x"], "url": "http://127.0.0.1:9/mcp"},
                "bad__name": {"command": ["x"]},
            }
        )
    message = str(caught.value)
    assert "MCP server 'gh': Authorization: give {env: NAME}" in message
    assert "MCP server 'both'" in message and "MCP server 'bad__name'" in message
    assert "Bearer x" not in message
