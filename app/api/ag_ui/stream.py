"""A run's ledger events and deltas, translated into AG-UI events in the protocol's order.

One `Translator` per response. It is fed the run's events (from the table or live) and its
ephemeral deltas in the order the run produced them, and returns the AG-UI events each one
means, built with the protocol's own models (`ag_ui.core`):

| ours | AG-UI |
| --- | --- |
| (stream start) | RUN_STARTED (the client's thread and run ids) |
| (the client's history lags) | MESSAGES_SNAPSHOT, sent by the route (`ag_ui`) |
| (stream start) | STATE_SNAPSHOT of the shared state as the run starts (`state_snapshot_event`) |
| STATE_SET / STATE_PATCHED of the run | STATE_SNAPSHOT / STATE_DELTA (the JSON Patch as stored) |
| STEP_START / STEP_END | STEP_STARTED / STEP_FINISHED, step `turn N` |
| reasoning deltas | REASONING_START, REASONING_MESSAGE_START/CONTENT/END, REASONING_END |
| text deltas | TEXT_MESSAGE_START / CONTENT, ended at MODEL_RESPONSE |
| MODEL_RESPONSE tool calls | TOOL_CALL_START / ARGS / END |
| TOOL_RESULT of the run (server tools) | TOOL_CALL_RESULT |
| RUN_FINISHED, BLOCKED_BY_APPROVAL | RUN_FINISHED, outcome `interrupt` (one per approval) |
| RUN_FINISHED, interrupted | RUN_FINISHED, outcome `cancelled` |
| RUN_FINISHED otherwise | RUN_FINISHED, outcome `success` (client tool calls pending) |
| ERROR + failed run | RUN_ERROR |

Message ids are minted from the turn and call ids (`asr_…`), so a client that sends them
back is recognised (see `ag_ui_history`) and a replayed stream uses the same ids.
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from app.api.ag_ui.history import MINTED_PREFIX
from app.runtime.session.events import Event

APPROVAL_REASON = "tool_approval"
# What a resume of an approval interrupt may carry: {"approved": false} rejects.
APPROVAL_RESPONSE_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
}


def state_snapshot_event(shared_state: dict[str, Any]) -> StateSnapshotEvent:
    """The AG-UI snapshot of a session's shared state (`SessionState.shared_state`): what a
    stream sends before any STATE_DELTA, so the client's copy starts from the stored one."""
    return StateSnapshotEvent(snapshot=shared_state)


def message_id(turn_id: str | None, run_id: str) -> str:
    """The assistant message of one model turn."""
    return f"{MINTED_PREFIX}msg_{turn_id or run_id}"


def approval_interrupt(call_id: str, name: str, arguments: Any) -> Interrupt:
    """The interrupt an approval request stands for (its id is the call's)."""
    return Interrupt(
        id=call_id,
        reason=APPROVAL_REASON,
        message=f"Approve the call of {name} with {arguments}?",
        tool_call_id=call_id,
        response_schema=APPROVAL_RESPONSE_SCHEMA,
        metadata={"tool": name, "arguments": arguments},
    )


class Translator:
    """Ledger events and delta frames of one run -> AG-UI events (see the module table)."""

    def __init__(self, *, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.step: str | None = None
        self.text: str | None = None  # the open text message's id
        self.reasoning: str | None = None  # the open reasoning message's id
        self.streamed: set[str] = set()  # turns whose text came as deltas
        self.interrupts: list[Interrupt] = []
        self.pending_calls: list[str] = []
        self.output: str | None = None
        self.error: dict[str, Any] | None = None
        self.finished = False

    def start(self, our_run_id: str, session_id: str) -> list[BaseEvent]:
        meta = {"asr_run_id": our_run_id, "asr_session_id": session_id}
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, metadata=meta)]

    def delta(self, frame: dict[str, Any]) -> list[BaseEvent]:
        """A text or reasoning delta of the current turn."""
        text = frame.get("text") or ""
        if not text:
            return []
        turn_id = frame.get("turn_id")
        if frame.get("type") == "reasoning_delta":
            out: list[BaseEvent] = []
            if self.reasoning is None:
                self.reasoning = f"{MINTED_PREFIX}reasoning_{turn_id or self.run_id}"
                out += [
                    ReasoningStartEvent(message_id=self.reasoning),
                    ReasoningMessageStartEvent(message_id=self.reasoning),
                ]
            out.append(ReasoningMessageContentEvent(message_id=self.reasoning, delta=text))
            return out
        out = self._close_reasoning()
        if self.text is None:
            self.text = message_id(turn_id, self.run_id)
            self.streamed.add(self.text)
            out.append(TextMessageStartEvent(message_id=self.text))
        out.append(TextMessageContentEvent(message_id=self.text, delta=text))
        return out

    def event(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events one ledger event of the run stands for."""
        handler = getattr(self, f"_on_{event.type.lower()}", None)
        return handler(event) if handler is not None else []

    # ----------------------------------------------------------------- handlers

    def _on_step_start(self, event: Event) -> list[BaseEvent]:
        out = self._close_step()
        self.step = f"turn {event.payload.get('turn', 1)}"
        return [*out, StepStartedEvent(step_name=self.step)]

    def _on_step_end(self, event: Event) -> list[BaseEvent]:
        return self._close_step()

    def _on_model_response(self, event: Event) -> list[BaseEvent]:
        out = self._close_reasoning()
        parent = message_id(event.turn_id, self.run_id)
        text = event.payload.get("text") or ""
        if self.text is not None:
            out += self._close_text()
        elif text and parent not in self.streamed:
            # No deltas for this turn (a replay, or a model that does not stream).
            out += [
                TextMessageStartEvent(message_id=parent),
                TextMessageContentEvent(message_id=parent, delta=text),
                TextMessageEndEvent(message_id=parent),
            ]
        for call in event.payload.get("tool_calls") or []:
            call_id = call["call_id"]
            out.append(
                ToolCallStartEvent(
                    tool_call_id=call_id, tool_call_name=call["name"], parent_message_id=parent
                )
            )
            if call.get("arguments"):
                out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=call["arguments"]))
            out.append(ToolCallEndEvent(tool_call_id=call_id))
        return out

    def _on_tool_result(self, event: Event) -> list[BaseEvent]:
        call_id = event.payload["call_id"]
        return [
            ToolCallResultEvent(
                message_id=f"{MINTED_PREFIX}result_{call_id}",
                tool_call_id=call_id,
                content=event.payload["item"].get("output", ""),
                role="tool",
            )
        ]

    def _on_state_set(self, event: Event) -> list[BaseEvent]:
        state = event.payload.get("state")
        return [state_snapshot_event(state if isinstance(state, dict) else {})]

    def _on_state_patched(self, event: Event) -> list[BaseEvent]:
        return [StateDeltaEvent(delta=event.payload.get("patch") or [])]

    def _on_approval_requested(self, event: Event) -> list[BaseEvent]:
        p = event.payload
        self.interrupts.append(approval_interrupt(p["call_id"], p["name"], p["arguments"]))
        return []

    def _on_auto_stop(self, event: Event) -> list[BaseEvent]:
        for call in event.payload.get("pending") or []:
            self.pending_calls.append(call["call_id"])
        return []

    def _on_final_output(self, event: Event) -> list[BaseEvent]:
        self.output = event.payload.get("text")
        return []

    def _on_error(self, event: Event) -> list[BaseEvent]:
        self.error = dict(event.payload)
        return []

    def _on_run_finished(self, event: Event) -> list[BaseEvent]:
        self.finished = True
        status = event.payload.get("status")
        if status == "failed":
            error = self.error or {"code": "run_failed", "detail": "the run failed"}
            return [RunErrorEvent(message=error.get("detail", ""), code=error.get("code"))]
        out = [*self._close_reasoning(), *self._close_text(), *self._close_step()]
        if status == "interrupted":
            outcome: Any = RunFinishedCancelledOutcome()
        elif self.interrupts:
            outcome = RunFinishedInterruptOutcome(interrupts=self.interrupts)
        else:
            outcome = RunFinishedSuccessOutcome(
                pending_tool_call_ids=[c for c in self.pending_calls if c not in self._approvals()]
                or None
            )
        finished = RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.run_id, result=self.output, outcome=outcome
        )
        return [*out, finished]

    def cut(self, detail: str) -> list[BaseEvent]:
        """The stream ends before the run did (shutdown): say so, as the protocol's error."""
        return [RunErrorEvent(message=detail, code="stream_cut")]

    # ------------------------------------------------------------------ closing

    def _approvals(self) -> set[str]:
        return {i.id for i in self.interrupts}

    def _close_text(self) -> list[BaseEvent]:
        if self.text is None:
            return []
        closed, self.text = self.text, None
        return [TextMessageEndEvent(message_id=closed)]

    def _close_reasoning(self) -> list[BaseEvent]:
        if self.reasoning is None:
            return []
        closed, self.reasoning = self.reasoning, None
        return [ReasoningMessageEndEvent(message_id=closed), ReasoningEndEvent(message_id=closed)]

    def _close_step(self) -> list[BaseEvent]:
        out = [*self._close_reasoning(), *self._close_text()]
        if self.step is None:
            return out
        closed, self.step = self.step, None
        return [*out, StepFinishedEvent(step_name=closed)]
