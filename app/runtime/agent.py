"""The agent spec a session carries: which model, instructions, tools and loop limits.

Provider keys are never part of it: they live in server settings, so an agent spec can be
returned by the API and stored in events without leaking a secret.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.runtime.compaction import CompactionPolicy


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    provider: Literal["scripted", "openai"] = Field(
        default="scripted", description="Model client: offline scripted, or OpenAI-compatible."
    )
    model: str | None = Field(
        default=None, max_length=128, description="Model name; default from server settings."
    )
    instructions: str | None = Field(default=None, max_length=65_536)
    tools: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Server tools the agent may call; empty means every built-in.",
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
