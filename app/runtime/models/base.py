"""The model client interface: one call per turn, streamed deltas, tool calls, usage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.runtime.errors import AgentSessionError

OnDelta = Callable[[dict[str, Any]], None]

CONTINUATION_INSTRUCTION = "Continue from where you stopped. Do not repeat what you already wrote."


class ModelError(AgentSessionError):
    """The model call failed (provider error, network, or the scripted `[fail]`)."""

    code = "model_error"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    instructions: str | None
    items: list[dict[str, Any]]
    tools: list[ToolSpec]
    # The hidden continuation instruction of an auto-continue turn: sent to the model,
    # never written to memory.
    continuation: str | None = None
    continuation_count: int = 0
    max_output_tokens: int | None = None
    # `estimate_tokens(items)` when the caller already made it (the scripted model's usage
    # figure uses it instead of scanning the whole context again).
    items_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    call_id: str
    name: str
    arguments: str


@dataclass(slots=True)
class ModelResponse:
    text: str
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str = "stop"
    # The model stopped before it was done (length limit, or continuation-like output).
    needs_continuation: bool = False
    reasoning: str | None = None
    # True when `usage` is what the provider counted (not our estimate): only such figures
    # calibrate the token estimate.
    usage_reported: bool = False


class ModelClient(Protocol):
    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse: ...
