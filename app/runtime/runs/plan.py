"""What a run is asked to do, resolved against the session's agent spec and this server's
models and tools, before anything is written: a request that cannot run fails here (422)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.runtime.memory.compaction import ModelSummarizer, ScriptedSummarizer, Summarizer
from app.runtime.memory.context import budget_of
from app.runtime.models.base import ModelClient, ModelRequest, ModelResponse, OnDelta, ToolSpec
from app.runtime.models.registry import ModelRegistry
from app.runtime.runs.agent import AgentSpec, agent_spec
from app.runtime.runs.loop import RunOptions
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import NewEvent
from app.runtime.tools.registry import ToolRegistry


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What a caller asks of a run (HTTP schemas map onto this)."""

    input: Any | None = None
    multitask: str = "reject"  # reject | enqueue | interrupt
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    approval_required: list[str] = field(default_factory=list)
    limits: dict[str, Any] = field(default_factory=dict)
    on_tool_error: str | None = None
    # The client's id for the input message (AG-UI), stored on its memory item.
    input_id: str | None = None
    # The run's id when the caller chose it (an A2A push config names its task before the
    # run exists, so no end of a short run is missed); a fresh id otherwise.
    run_id: str | None = None

    def options_json(self) -> dict[str, Any]:
        """The request as the run row keeps it (a queued run is resumed from it)."""
        return {
            "multitask": self.multitask,
            "client_tools": self.client_tools,
            "approval_required": self.approval_required,
            "limits": self.limits,
            "on_tool_error": self.on_tool_error,
        }


class RunPlanner:
    """The server's models and tools, as a run's options see them."""

    def __init__(self, models: ModelRegistry, tools: ToolRegistry) -> None:
        self.models = models
        self.tools = tools

    def resolve_options(self, agent: dict[str, Any], request: RunRequest) -> RunOptions:
        """Agent spec defaults, overridden per run by the request's limits.

        Raises:
            UnknownModelProfile, ModelProfileNotConfigured: the spec's profile cannot serve
                a run now (422, before anything is written).
        """
        spec = agent_spec(agent)
        profile = self.models.check(spec.provider)
        limits = request.limits
        client_tools = [
            ToolSpec(
                name=t["name"],
                description=t.get("description", ""),
                parameters=t.get("parameters") or {"type": "object", "properties": {}},
            )
            for t in request.client_tools
        ]
        server_tools = [
            t
            for t in self.tools.available(spec.tools)
            if t.name not in {c.name for c in client_tools}
        ]
        return RunOptions(
            model=spec.model or self.models.default_model(spec.provider),
            instructions=spec.instructions,
            server_tools=server_tools,
            client_tools=client_tools,
            approval_required=frozenset(spec.approval_required)
            | frozenset(request.approval_required)
            | frozenset(t.name for t in server_tools if t.requires_approval),
            max_total_turns=limits.get("max_total_turns") or spec.max_total_turns,
            max_auto_followups=_first(limits.get("max_auto_followups"), spec.max_auto_followups),
            max_tool_calls=_first(limits.get("max_tool_calls"), spec.max_tool_calls),
            max_wall_seconds=limits.get("max_wall_seconds") or spec.max_wall_seconds,
            max_tokens=limits.get("max_tokens") or spec.max_tokens,
            on_tool_error=request.on_tool_error or spec.on_tool_error,
            compaction=spec.compaction,
            summarizer=self.summarizer(spec),
            # The agent's budget, else the profile's context window.
            context_budget=budget_of(
                spec.max_input_tokens or profile.config.context_window,
                spec.reserved_output_tokens,
            ),
            profile=spec.provider,
        )

    def summarizer_for(self, agent: dict[str, Any]) -> Summarizer:
        return self.summarizer(agent_spec(agent))

    def summarizer(self, spec: AgentSpec) -> Summarizer:
        if self.models.kind(spec.provider) == "scripted":
            return ScriptedSummarizer()
        # The client is looked up when a summary is asked for: a truncation needs none.
        return ModelSummarizer(_ProfileClient(self.models, spec.provider), spec.model)

    def model_for(self, spec: AgentSpec) -> ModelClient:
        return self.models.client(spec.provider)

    def provider_kind(self, spec: AgentSpec) -> str:
        """The kind of the agent's profile (openai, anthropic, ...), as metrics label it."""
        return self.models.kind(spec.provider)


def start_events(run_id: str, request: RunRequest, options: RunOptions) -> list[NewEvent]:
    """RUN_STARTED with the limits the run got, then the user's input, if any."""
    events = [
        ev.RunStarted(
            input=request.input,
            limits={
                "max_total_turns": options.max_total_turns,
                "max_auto_followups": options.max_auto_followups,
                "max_tool_calls": options.max_tool_calls,
                "max_wall_seconds": options.max_wall_seconds,
                "max_tokens": options.max_tokens,
            },
            client_tools=[t.name for t in options.client_tools],
        ).event(run_id=run_id)
    ]
    if request.input is not None:
        item = {"type": "message", "role": "user", "content": request.input}
        if request.input_id is not None:
            item["id"] = request.input_id
        events.append(ev.UserInput(item=item).event(run_id=run_id))
    return events


class _ProfileClient:
    """The client of a profile, looked up at each call (a summarizer made before the
    profile was configured, or before its key rotated, uses the client of the moment)."""

    def __init__(self, models: ModelRegistry, profile: str) -> None:
        self.models = models
        self.profile = profile

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        return await self.models.client(self.profile).complete(request, on_delta)


def _first(value: Any, default: Any) -> Any:
    return default if value is None else value
