"""The agent spec a session carries: which model, instructions, tools and loop limits.

`provider` names a model profile of the server (`GET /v1/models`): `scripted`, `openai`, or
one an operator configured. Keys are never part of a spec: a profile refers to them in the
server's settings, so an agent spec can be returned by the API and stored in events without
leaking a secret. Whether the profile exists is checked where sessions and runs are created
(the spec itself cannot know the server's profiles).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.runtime.memory.compaction import CompactionPolicy


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    provider: str = Field(
        default="scripted",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$",
        description="The model profile (GET /v1/models): scripted, openai, or an operator's.",
    )
    model: str | None = Field(
        default=None, max_length=128, description="Model name; default: the profile's."
    )
    instructions: str | None = Field(default=None, max_length=65_536)
    tools: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Server tools the agent may call; empty means every built-in. MCP tools "
        "(server__tool, or server__* for all of a server's) only when named.",
    )
    approval_required: list[str] = Field(
        default_factory=list, max_length=64, description="Tools that need an approval first."
    )
    on_tool_error: Literal["stop", "feed_back"] = Field(
        default="stop",
        description="stop: BLOCKED_BY_TOOL_ERROR; feed_back: the model sees the error.",
    )
    max_auto_followups: int = Field(default=3, ge=0, le=100)
    max_total_turns: int = Field(default=10, ge=1, le=1000)
    max_tool_calls: int = Field(default=20, ge=0, le=1000)
    max_wall_seconds: float = Field(default=600.0, gt=0, le=86_400)
    max_tokens: int | None = Field(default=None, ge=1)
    compaction: CompactionPolicy = Field(default_factory=CompactionPolicy)
    max_input_tokens: int | None = Field(default=None, ge=64)
    reserved_output_tokens: int = Field(default=1024, ge=0)


@functools.cache
def _default_spec() -> AgentSpec:
    return AgentSpec()


def agent_spec(agent: dict[str, Any] | None) -> AgentSpec:
    """The spec a session's stored `agent` JSON holds (validated).

    Most sessions carry none; their spec is the default, validated once per process and
    shared (a run asked for it several times per request), so callers treat it as read-only.
    """
    if not agent:
        return _default_spec()
    return AgentSpec.model_validate(agent)
