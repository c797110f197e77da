"""Payloads of the run and step events: what a run asked for, each turn's request and
response, its tool calls and approvals, and how it ended."""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal

from typing_extensions import TypedDict

from app.runtime.session.event_payloads.base import OMIT_IF_NONE, Payload, event_payload
from app.runtime.session.events import EventType

# Where a tool call runs: here (server), in the client (client), or here once approved.
CallKind = Literal["server", "client", "approval"]


class RunLimits(TypedDict):
    """The budgets a run was started with (agent spec defaults, overridden per request)."""

    max_total_turns: int
    max_auto_followups: int
    max_tool_calls: int
    max_wall_seconds: float
    max_tokens: int | None


class CallRef(TypedDict):
    """A tool call as the model made it."""

    call_id: str
    name: str
    arguments: str


@event_payload(EventType.RUN_STARTED)
class RunStarted(Payload):
    """A run started: its input (null continues without one), limits and client tools."""

    input: str | list[dict[str, Any]] | None
    limits: RunLimits
    client_tools: list[str]


@event_payload(EventType.STEP_START)
class StepStart(Payload):
    """Turn `turn` of the run begins."""

    turn: int


@event_payload(EventType.MODEL_REQUEST)
class ModelRequest(Payload):
    """What one turn sent to the model: counts and names, not the prompt itself."""

    model: str
    items: int
    estimated_tokens: int
    budget: int | None
    tools: list[str]
    continuation: bool


class Calibration(TypedDict):
    """The heuristic estimate of a prompt and what the provider counted for it."""

    key: str  # "<profile>/<model>"
    estimated_tokens: int
    input_tokens: int


@event_payload(EventType.MODEL_RESPONSE)
class ModelResponse(Payload):
    """The model's answer to one turn: text, tool calls and token usage.

    `calibration` is present when the provider reported the usage: the state learns the
    profile's and model's token ratio from it (absent in older ledgers and for estimates).
    """

    text: str
    tool_calls: list[CallRef]
    usage: dict[str, int]
    finish_reason: str
    calibration: Calibration | None = field(default=None, metadata=OMIT_IF_NONE)


@event_payload(EventType.TOOL_CALL)
class ToolCall(Payload):
    """The model called a tool; the call is pending until its TOOL_RESULT."""

    call_id: str
    name: str
    arguments: str
    kind: CallKind
    run_id: str | None


@event_payload(EventType.FINAL_OUTPUT)
class FinalOutput(Payload):
    """The run's final answer (a completed run only)."""

    text: str


@event_payload(EventType.STEP_END)
class StepEnd(Payload):
    """Turn `turn` of the run ends."""

    turn: int


@event_payload(EventType.AUTO_CONTINUE)
class AutoContinue(Payload):
    """The run continues with a hidden instruction that is never written to memory."""

    followup: int
    instruction: str


@event_payload(EventType.AUTO_STOP)
class AutoStop(Payload):
    """The loop stopped with `stop_reason`.

    `pending` lists the calls a client or an approval must answer, `budget` names the budget
    a BUDGET_EXCEEDED stop ran out of, and `reason` says why a run was interrupted.
    """

    stop_reason: str
    pending: list[CallRef] | None = field(default=None, metadata=OMIT_IF_NONE)
    budget: str | None = field(default=None, metadata=OMIT_IF_NONE)
    reason: str | None = field(default=None, metadata=OMIT_IF_NONE)


@event_payload(EventType.APPROVAL_REQUESTED)
class ApprovalRequested(Payload):
    """A tool call that needs an approval before it runs (the same fields as its TOOL_CALL)."""

    call_id: str
    name: str
    arguments: str
    kind: CallKind
    run_id: str | None

    @classmethod
    def of(cls, call: ToolCall) -> ApprovalRequested:
        """The approval request for `call`."""
        return cls(
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            kind=call.kind,
            run_id=call.run_id,
        )


@event_payload(EventType.APPROVAL_DECIDED)
class ApprovalDecided(Payload):
    """A pending approval was decided (`approve` or `reject`); the next run acts on it."""

    call_id: str
    decision: str
    reason: str | None
    name: str | None


@event_payload(EventType.RUN_FINISHED)
class RunFinished(Payload):
    """The run ended. `usage` and `turns` are present when the loop itself ended it.

    A run that failed outside the loop, or was interrupted, has neither.
    """

    status: Literal["finished", "failed", "interrupted"]
    stop_reason: str | None
    usage: dict[str, int] | None = field(default=None, metadata=OMIT_IF_NONE)
    turns: int | None = field(default=None, metadata=OMIT_IF_NONE)


@event_payload(EventType.ERROR)
class Error(Payload):
    """A run failed with this error (a stable `code`, and a `detail` for people)."""

    code: str
    detail: str
