"""The agent spec a session carries: which model, instructions, tools and loop limits.

Provider keys are never part of it: they live in server settings, so an agent spec can be
returned by the API and stored in events without leaking a secret.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="scripted", max_length=128, description="Model client name.")
    instructions: str | None = Field(default=None, max_length=65_536)
    tools: list[str] = Field(default_factory=list, max_length=64)
    max_auto_followups: int = Field(default=3, ge=0, le=100)
    max_total_turns: int = Field(default=10, ge=1, le=1000)
    max_input_tokens: int | None = Field(default=None, ge=64)
    reserved_output_tokens: int = Field(default=1024, ge=0)
