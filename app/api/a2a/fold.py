"""A task as the fold of its runs' ledger events, and the A2A stream events each one means.

A task is never stored: its history, artifacts and status are read from the ledger, so any
replica answers for any task and a re-attached stream continues exactly where the ledger
does. One `TaskFold` per view; feed it the task's events in seq order:

| ours | A2A |
| --- | --- |
| USER_INPUT, APPROVAL_DECIDED, an answer between runs | a user message (not streamed) |
| MODEL_RESPONSE (text, tool calls) | an agent message: status update WORKING |
| TOOL_RESULT | an agent message with the output (DataPart `tool_result`) |
| APPROVAL_REQUESTED | an agent message asking for the decision (DataPart `approval_request`) |
| FINAL_OUTPUT | the artifact `answer` (one text part, last chunk) |
| RUN_STARTED | status WORKING |
| RUN_FINISHED | COMPLETED, INPUT_REQUIRED (approvals, client tools, a question), FAILED, CANCELED |

Message ids are minted from the run and seq (`asr-<run>-<seq>`), except the user's own input,
which keeps the client's `messageId`: a replay names every message the same way.
"""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.struct_pb2 import Struct, Value
from google.protobuf.timestamp_pb2 import Timestamp

from app.runtime.session.events import Event

StreamEvent = Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent

# Stop reasons after which the task waits for the client's next message.
INPUT_REASONS = frozenset({"BLOCKED_BY_APPROVAL", "NEEDS_USER_INPUT"})
TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
# A stream ends at these: the task is over, or it waits for the client.
STREAM_ENDS = TERMINAL | {TaskState.TASK_STATE_INPUT_REQUIRED}


def finished_state(status: str | None, stop_reason: str | None) -> TaskState:
    """The task state a run's end means."""
    if status == "failed":
        return TaskState.TASK_STATE_FAILED
    if status == "interrupted" or stop_reason == "INTERRUPTED":
        return TaskState.TASK_STATE_CANCELED
    if stop_reason in INPUT_REASONS:
        return TaskState.TASK_STATE_INPUT_REQUIRED
    return TaskState.TASK_STATE_COMPLETED


def text_part(text: str) -> Part:
    return Part(text=text)


def data_part(data: dict[str, Any]) -> Part:
    value = Value()
    value.struct_value.update(data)
    return Part(data=value, media_type="application/json")


def struct(data: dict[str, Any]) -> Struct:
    out = Struct()
    out.update(data)
    return out


class TaskFold:
    """The events of one task (its runs, in seq order) -> the task and its stream events."""

    def __init__(self, *, task_id: str, context_id: str) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.state: TaskState = TaskState.TASK_STATE_SUBMITTED
        self.history: list[Message] = []
        self.artifacts: list[Artifact] = []
        self.status_message: Message | None = None
        self.timestamp: Timestamp | None = None
        self.last_seq = 0
        self.run_id = task_id
        self._error: dict[str, Any] | None = None

    def apply(self, event: Event) -> list[StreamEvent]:
        """Fold one event in; returns the stream events it means (none for most)."""
        if event.seq <= self.last_seq:
            return []  # already folded: a stream never sends an event twice
        self.last_seq = event.seq
        stamp = Timestamp()
        stamp.FromDatetime(event.created_at)
        self.timestamp = stamp
        if event.run_id:
            self.run_id = event.run_id
        handler = getattr(self, f"_on_{event.type.lower()}", None)
        return handler(event) if handler is not None else []

    def task(self, *, history_length: int | None = None) -> Task:
        """The task as folded so far; `history_length` keeps the newest messages only."""
        history = self.history
        if history_length is not None:
            history = history[-history_length:] if history_length > 0 else []
        return Task(
            id=self.task_id,
            context_id=self.context_id,
            status=self._status(),
            artifacts=self.artifacts,
            history=history,
            metadata=struct({"asr_run_id": self.run_id}),
        )

    @property
    def ended(self) -> bool:
        """Whether a stream of this task is over (terminal, or waiting for input)."""
        return self.state in STREAM_ENDS

    # ----------------------------------------------------------------- handlers

    def _status(self) -> TaskStatus:
        status = TaskStatus(state=self.state)
        if self.status_message is not None:
            status.message.CopyFrom(self.status_message)
        if self.timestamp is not None:
            status.timestamp.CopyFrom(self.timestamp)
        return status

    def _update(self) -> list[StreamEvent]:
        return [
            TaskStatusUpdateEvent(
                task_id=self.task_id, context_id=self.context_id, status=self._status()
            )
        ]

    def _message(self, role: Role, message_id: str, parts: list[Part]) -> Message:
        message = Message(
            message_id=message_id,
            context_id=self.context_id,
            task_id=self.task_id,
            role=role,
            parts=parts,
        )
        self.history.append(message)
        return message

    def _minted(self, event: Event) -> str:
        return f"asr-{event.run_id or self.run_id}-{event.seq}"

    def _agent_says(self, event: Event, parts: list[Part]) -> list[StreamEvent]:
        self.status_message = self._message(Role.ROLE_AGENT, self._minted(event), parts)
        return self._update()

    def _on_run_started(self, event: Event) -> list[StreamEvent]:
        self.state = TaskState.TASK_STATE_WORKING
        self.status_message = None
        self._error = None
        return self._update()

    def _on_user_input(self, event: Event) -> list[StreamEvent]:
        item = event.payload.get("item") or {}
        content = item.get("content")
        text = content if isinstance(content, str) else _text_of(content)
        self._message(Role.ROLE_USER, item.get("id") or self._minted(event), [text_part(text)])
        return []

    def _on_memory_items_appended(self, event: Event) -> list[StreamEvent]:
        if event.run_id is not None:
            return []  # the run's own items: its model responses say the same
        for item in event.payload.get("items") or []:
            if item.get("type") == "message" and item.get("role") == "user":
                content = item.get("content")
                words = content if isinstance(content, str) else _text_of(content)
                message_id = item.get("id") or self._minted(event)
                self._message(Role.ROLE_USER, message_id, [text_part(words)])
        return []

    def _on_approval_decided(self, event: Event) -> list[StreamEvent]:
        p = event.payload
        decision = {"call_id": p.get("call_id"), "approve": p.get("decision") == "approve"}
        if p.get("reason"):
            decision["reason"] = p["reason"]
        self._message(Role.ROLE_USER, self._minted(event), [data_part(decision)])
        return []

    def _on_model_response(self, event: Event) -> list[StreamEvent]:
        parts: list[Part] = []
        if event.payload.get("text"):
            parts.append(text_part(event.payload["text"]))
        for call in event.payload.get("tool_calls") or []:
            parts.append(data_part({"tool_call": dict(call)}))
        return self._agent_says(event, parts) if parts else []

    def _on_tool_result(self, event: Event) -> list[StreamEvent]:
        item = event.payload.get("item") or {}
        result = {
            "call_id": event.payload.get("call_id"),
            "output": item.get("output", ""),
            "is_error": bool(event.payload.get("is_error")),
        }
        return self._agent_says(event, [data_part({"tool_result": result})])

    def _on_approval_requested(self, event: Event) -> list[StreamEvent]:
        p = event.payload
        ask = (
            f"Approve the call of {p.get('name')} with {p.get('arguments')}? "
            "Reply approve or reject."
        )
        request = {
            "call_id": p.get("call_id"),
            "name": p.get("name"),
            "arguments": p.get("arguments"),
        }
        return self._agent_says(event, [text_part(ask), data_part({"approval_request": request})])

    def _on_final_output(self, event: Event) -> list[StreamEvent]:
        artifact = Artifact(
            artifact_id=f"answer-{event.run_id or self.run_id}",
            name="answer",
            parts=[text_part(event.payload.get("text") or "")],
        )
        self.artifacts.append(artifact)
        return [
            TaskArtifactUpdateEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                artifact=artifact,
                append=False,
                last_chunk=True,
            )
        ]

    def _on_error(self, event: Event) -> list[StreamEvent]:
        self._error = dict(event.payload)
        return []

    def _on_run_finished(self, event: Event) -> list[StreamEvent]:
        p = event.payload
        self.state = finished_state(p.get("status"), p.get("stop_reason"))
        if self.state == TaskState.TASK_STATE_FAILED:
            detail = (self._error or {}).get("detail") or "the run failed"
            self.status_message = self._message(
                Role.ROLE_AGENT, self._minted(event), [text_part(str(detail))]
            )
        elif self.state == TaskState.TASK_STATE_CANCELED:
            self.status_message = None
        return self._update()


def _text_of(content: Any) -> str:
    """The text of a structured input (a list of parts)."""
    if not isinstance(content, list):
        return "" if content is None else str(content)
    return "\n".join(
        str(p.get("text")) for p in content if isinstance(p, dict) and p.get("text") is not None
    )
