"""The event vocabulary and the event records the runtime reads and writes.

The type strings are the event vocabulary exactly (docs/reference/events.md); they are what
is stored, so a rename must keep the old string readable (see `MEMORY_EVENT_TYPES` in the
projector). Each type's payload is built by its model in
`app.runtime.session.event_payloads`, never as a dict at the call site.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    # Lifecycle
    SESSION_CREATED = "SESSION_CREATED"
    SESSION_SAVED = "SESSION_SAVED"
    SESSION_RESUMED = "SESSION_RESUMED"
    SESSION_FORKED = "SESSION_FORKED"
    SESSION_RESTORED = "SESSION_RESTORED"
    METADATA_UPDATED = "METADATA_UPDATED"
    HISTORY_PRUNED = "HISTORY_PRUNED"
    # Memory mutations (the projector folds these)
    USER_INPUT = "USER_INPUT"
    MEMORY_ITEMS_APPENDED = "MEMORY_ITEMS_APPENDED"
    TOOL_RESULT = "TOOL_RESULT"
    TOOL_OUTPUT_REPLACED = "TOOL_OUTPUT_REPLACED"
    MEMORY_COMPRESS = "MEMORY_COMPRESS"
    WINDOW_CHANGED = "WINDOW_CHANGED"
    # Runs and steps
    RUN_STARTED = "RUN_STARTED"
    STEP_START = "STEP_START"
    MODEL_REQUEST = "MODEL_REQUEST"
    MODEL_RESPONSE = "MODEL_RESPONSE"
    TOOL_CALL = "TOOL_CALL"
    FINAL_OUTPUT = "FINAL_OUTPUT"
    STEP_END = "STEP_END"
    AUTO_CONTINUE = "AUTO_CONTINUE"
    AUTO_STOP = "AUTO_STOP"
    APPROVAL_REQUESTED = "APPROVAL_REQUESTED"
    APPROVAL_DECIDED = "APPROVAL_DECIDED"
    RUN_FINISHED = "RUN_FINISHED"
    ERROR = "ERROR"
    # Processes
    PROCESS_STARTED = "PROCESS_STARTED"
    PROCESS_EXITED = "PROCESS_EXITED"
    # Shared state (the JSON object a session shares with its frontend)
    STATE_SET = "STATE_SET"
    STATE_PATCHED = "STATE_PATCHED"


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event the runtime wants written; the store gives it seq, id, position and time."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    turn_id: str | None = None

    def stored(
        self,
        event_id: str,
        session_id: str,
        seq: int,
        payload: dict[str, Any],
        created_at: datetime,
        position: int,
    ) -> Event:
        """The Event this becomes once written with what the store gave it (`payload` is
        the payload as stored, i.e. redacted). Every field of the runtime's own passes
        through here, so a new event column is one more line here and nowhere in the
        stores' Python (see docs/ARCHITECTURE.md, "Add an event column")."""
        return Event(
            event_id,
            session_id,
            seq,
            str(self.type),
            payload,
            created_at,
            self.run_id,
            self.turn_id,
            position,
        )


@dataclass(frozen=True, slots=True)
class Event:
    """A committed ledger entry. `seq` is per session, gapless from 1."""

    event_id: str
    session_id: str
    seq: int
    type: str
    payload: dict[str, Any]
    created_at: datetime
    run_id: str | None = None
    turn_id: str | None = None
    position: int = 0

    def fields(self) -> dict[str, Any]:
        """The event contract's fields (docs/reference/events.md) with `created_at` still a
        datetime: each writer puts the time in its own format, and formatting it is dearer
        than building the rest of the dict."""
        return {
            "event_id": self.event_id,
            "session_id": self.session_id,
            "seq": self.seq,
            "type": self.type,
            "run_id": self.run_id,
            "turn_id": self.turn_id,
            "payload": self.payload,
            "created_at": self.created_at,
            "position": self.position,
        }

    def to_json(self) -> dict[str, Any]:
        """The event contract's wire shape, the time in ISO 8601."""
        body = self.fields()
        body["created_at"] = self.created_at.isoformat()
        return body
