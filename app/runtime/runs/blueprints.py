"""Agent blueprints: named agent specs an operator keeps in a YAML file (ASR_AGENTS_FILE).

    agents:
      support:
        description: First-line support, answers from the FAQ tools.
        provider: openai
        model: gpt-4o-mini
        instructions: You are a helpful support agent.
        tools: [echo, current_time]
        max_total_turns: 8
        compaction: {strategy: summarize}

Every entry is an `AgentSpec` plus an optional `description`, validated when the service
starts; an invalid file stops the start with one message per problem, naming the agent and
the field. A session created with `agent_name` gets a copy of the spec as it is at that
moment (the session's ledger stays self-contained when the file changes later). Specs hold
no secrets: provider keys live in server settings. `provider` must name a model profile of
the server (the implicit `scripted` and `openai`, or one of the models file).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.runtime.errors import InvalidRequest
from app.runtime.runs.agent import AgentSpec

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
IMPLICIT_PROFILES = ("openai", "scripted")


class BlueprintError(ValueError):
    """The agents file cannot be used; the message lists every problem found."""


class UnknownAgent(InvalidRequest):
    code = "unknown_agent"


@dataclass(frozen=True, slots=True)
class Blueprint:
    name: str
    description: str | None
    spec: AgentSpec

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "agent": self.spec.model_dump()}


class Blueprints:
    """The named agents of this service (possibly none)."""

    def __init__(self, blueprints: dict[str, Blueprint] | None = None) -> None:
        self._by_name = dict(sorted((blueprints or {}).items()))

    def list(self) -> list[Blueprint]:
        return list(self._by_name.values())

    def spec(self, name: str) -> AgentSpec:
        """Raises UnknownAgent (422) when no blueprint has this name."""
        found = self._by_name.get(name)
        if found is None:
            raise UnknownAgent(f"no agent named {name!r}", known=list(self._by_name))
        return found.spec


def load_blueprints(
    path: Path | None,
    *,
    known_tools: list[str],
    known_profiles: Sequence[str] = IMPLICIT_PROFILES,
) -> Blueprints:
    """Read and validate the agents file; None means no blueprints.

    Raises:
        BlueprintError: unreadable file, bad YAML, or invalid entries (all listed at once).
    """
    if path is None:
        return Blueprints()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BlueprintError(f"{path}: cannot read the agents file ({exc.strerror})") from None
    return parse_blueprints(
        text, source=str(path), known_tools=known_tools, known_profiles=known_profiles
    )


def parse_blueprints(
    text: str,
    *,
    source: str,
    known_tools: list[str],
    known_profiles: Sequence[str] = IMPLICIT_PROFILES,
) -> Blueprints:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BlueprintError(f"{source}: not valid YAML: {exc}") from None
    agents = data.get("agents") if isinstance(data, dict) else None
    if not isinstance(agents, dict):
        raise BlueprintError(f"{source}: expected a mapping `agents: {{name: spec, ...}}`")
    problems: list[str] = []
    found: dict[str, Blueprint] = {}
    for name, entry in agents.items():
        blueprint = _blueprint(str(name), entry, known_tools, known_profiles, problems, source)
        if blueprint is not None:
            found[blueprint.name] = blueprint
    if problems:
        raise BlueprintError("\n".join(problems))
    return Blueprints(found)


def _blueprint(
    name: str,
    entry: Any,
    known_tools: list[str],
    known_profiles: Sequence[str],
    problems: list[str],
    source: str,
) -> Blueprint | None:
    where = f"{source}: agent {name!r}"
    if not NAME.match(name):
        problems.append(f"{where}: names are 1-64 letters, digits, '_', '.', '-'")
        return None
    if not isinstance(entry, dict):
        problems.append(f"{where}: expected a mapping of agent settings")
        return None
    fields = dict(entry)
    description = fields.pop("description", None)
    if description is not None and not isinstance(description, str):
        problems.append(f"{where}: description must be text")
    provider = fields.get("provider", "scripted")
    bad_provider = isinstance(provider, str) and provider not in known_profiles
    if bad_provider:
        problems.append(
            f"{where}: provider: no model profile named {provider!r}; "
            f"known: {sorted(known_profiles)}"
        )
    try:
        spec = AgentSpec.model_validate(fields)
    except ValidationError as exc:
        for error in exc.errors():
            location = ".".join(str(part) for part in error["loc"]) or "(spec)"
            problems.append(f"{where}: {location}: {error['msg']}")
        return None
    if bad_provider:
        return None
    unknown = sorted(
        name
        for name in set(spec.tools) | set(spec.approval_required)
        if not tool_known(name, known_tools)
    )
    if unknown:
        problems.append(f"{where}: unknown tools {unknown}; known: {sorted(known_tools)}")
        return None
    return Blueprint(name=name, description=description, spec=spec)


def tool_known(name: str, known_tools: Sequence[str]) -> bool:
    """A known tool name, or an MCP tool of a configured server: `server__tool` and
    `server__*` are known when `server__*` is (MCP tools are listed only once connected)."""
    if name in known_tools:
        return True
    server, sep, _ = name.partition("__")
    return bool(sep) and f"{server}__*" in known_tools
