"""Agent blueprints (ASR_AGENTS_FILE): validation, `GET /v1/agents`, `agent_name`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.runtime.runs.blueprints import BlueprintError, parse_blueprints
from app.runtime.tools.registry import ToolRegistry
from app.settings import Settings
from tests.conftest import ROOT, TenantKey

TOOLS = ToolRegistry().names()
GOOD = """
agents:
  support:
    description: First-line support.
    provider: scripted
    instructions: Be brief.
    tools: [echo, current_time]
    max_total_turns: 4
  researcher:
    provider: openai
    model: gpt-4o-mini
    approval_required: [sleep]
"""


def test_a_valid_file_gives_named_specs() -> None:
    blueprints = parse_blueprints(GOOD, source="agents.yaml", known_tools=TOOLS)
    assert [b.name for b in blueprints.list()] == ["researcher", "support"]
    support = blueprints.spec("support")
    assert support.tools == ["echo", "current_time"] and support.max_total_turns == 4


def test_every_problem_is_reported_with_agent_and_field() -> None:
    bad = """
agents:
  a:
    provider: nosuch
    max_total_turns: 0
  b:
    tools: [echo, teleport]
  "bad name!": {}
  c:
    colour: blue
"""
    with pytest.raises(BlueprintError) as caught:
        parse_blueprints(bad, source="agents.yaml", known_tools=TOOLS)
    message = str(caught.value)
    assert "agent 'a': provider:" in message
    assert "agent 'a': max_total_turns:" in message
    assert "agent 'b': unknown tools ['teleport']" in message
    assert "agent 'bad name!'" in message
    assert "agent 'c': colour: Extra inputs are not permitted" in message


@pytest.mark.parametrize("text", ["agents: [1, 2]", "just text", "agents: {a: [unclosed"])
def test_malformed_files_are_refused(text: str) -> None:
    with pytest.raises(BlueprintError):
        parse_blueprints(text, source="agents.yaml", known_tools=TOOLS)


@pytest.fixture
async def agents_app(settings: Settings, tmp_path: Path) -> AsyncIterator[FastAPI]:
    path = tmp_path / "agents.yaml"
    path.write_text(GOOD)
    application = create_app(settings.model_copy(update={"agents_file": path}))
    async with application.router.lifespan_context(application):
        yield application


async def test_agents_are_listed_and_usable_by_name(agents_app: FastAPI, tenant: TenantKey) -> None:
    transport = httpx.ASGITransport(app=agents_app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://asr.test", headers=tenant.headers
    ) as c:
        listed = (await c.get("/v1/agents")).json()["data"]
        assert [a["name"] for a in listed] == ["researcher", "support"]
        assert listed[1]["description"] == "First-line support."
        created = await c.post("/v1/sessions", json={"agent_name": "support"})
        assert created.status_code == 201, created.text
        sid = created.json()["session_id"]
        events = (await c.get(f"/v1/sessions/{sid}/events")).json()["data"]
        agent = events[0]["payload"]["agent"]
        assert agent["instructions"] == "Be brief." and agent["tools"] == ["echo", "current_time"]
        run = await c.post(f"/v1/sessions/{sid}/runs", json={"input": "hi", "mode": "wait"})
        assert run.json()["stop_reason"] == "COMPLETED"
        unknown = await c.post("/v1/sessions", json={"agent_name": "nobody"})
        assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_agent"
        both = await c.post("/v1/sessions", json={"agent_name": "support", "agent": {}})
        assert both.status_code == 422
    async with httpx.AsyncClient(transport=transport, base_url="http://asr.test") as anon:
        assert (await anon.get("/v1/agents")).status_code == 401


async def test_no_agents_file_lists_none(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/agents")).json() == {"data": []}


def test_serve_refuses_to_start_with_an_invalid_agents_file(
    tmp_path: Path, database_url: str
) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text("agents:\n  a:\n    tools: [teleport]\n")
    env = {**os.environ, "ASR_DATABASE_URL": database_url, "ASR_AGENTS_FILE": str(path)}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "invalid ASR_AGENTS_FILE" in result.stderr and "teleport" in result.stderr
