"""One payload model per event type: the only place each type's payload is built.

Writers build an event as `StepEnd(turn=3).event(run_id=..., turn_id=...)`; the stored
payload is the model's fields by name (`to_payload()`). `PAYLOAD_MODELS` maps every
`EventType` to its model (MEMORY_COMPRESS: a union told apart by `kind`), from which the
event catalogue derives each type's description and JSON Schema.

Adding an event type: its member in `EventType` (and docs/reference/events.md); its model
here, in the module of its group; its entry in `PAYLOAD_MODELS`; a projector handler
(`HANDLERS`) if it changes state; a golden ledger that holds it (`python -m
tests.golden.record`); and the type in the web page's `EVENT_TYPES` (app/ui/static). Tests
fail while the model, its entry, the golden ledger or the page's entry is missing; the
handler and the reference page are on you.
"""

from __future__ import annotations

from typing import Any

from app.runtime.session.event_payloads.base import OMIT_IF_NONE, Payload, event_payload
from app.runtime.session.event_payloads.lifecycle import (
    HistoryPruned,
    MetadataUpdated,
    SessionCreated,
    SessionForked,
    SessionRestored,
    SessionResumed,
    SessionSaved,
)
from app.runtime.session.event_payloads.memory import (
    Breaker,
    BreakerReset,
    CompactedMemory,
    CompactionFailure,
    CompactResult,
    MemoryCompacted,
    MemoryCompress,
    MemoryItemsAppended,
    ProjectionReport,
    ToolOutputReplaced,
    ToolResult,
    UserInput,
    WindowChanged,
)
from app.runtime.session.event_payloads.processes import ProcessExited, ProcessStarted
from app.runtime.session.event_payloads.runs import (
    ApprovalDecided,
    ApprovalRequested,
    AutoContinue,
    AutoStop,
    Calibration,
    CallKind,
    CallRef,
    Error,
    FinalOutput,
    ModelRequest,
    ModelResponse,
    RunFinished,
    RunLimits,
    RunStarted,
    StepEnd,
    StepStart,
    ToolCall,
)
from app.runtime.session.event_payloads.state import StatePatched, StateSet
from app.runtime.session.events import EventType

# Every event type's payload model, in the order of `EventType`. A value is a payload model
# class, or an annotated union of them (the JSON Schema and validation accept either).
PAYLOAD_MODELS: dict[EventType, Any] = {
    EventType.SESSION_CREATED: SessionCreated,
    EventType.SESSION_SAVED: SessionSaved,
    EventType.SESSION_RESUMED: SessionResumed,
    EventType.SESSION_FORKED: SessionForked,
    EventType.SESSION_RESTORED: SessionRestored,
    EventType.METADATA_UPDATED: MetadataUpdated,
    EventType.HISTORY_PRUNED: HistoryPruned,
    EventType.USER_INPUT: UserInput,
    EventType.MEMORY_ITEMS_APPENDED: MemoryItemsAppended,
    EventType.TOOL_RESULT: ToolResult,
    EventType.TOOL_OUTPUT_REPLACED: ToolOutputReplaced,
    EventType.MEMORY_COMPRESS: MemoryCompress,
    EventType.WINDOW_CHANGED: WindowChanged,
    EventType.RUN_STARTED: RunStarted,
    EventType.STEP_START: StepStart,
    EventType.MODEL_REQUEST: ModelRequest,
    EventType.MODEL_RESPONSE: ModelResponse,
    EventType.TOOL_CALL: ToolCall,
    EventType.FINAL_OUTPUT: FinalOutput,
    EventType.STEP_END: StepEnd,
    EventType.AUTO_CONTINUE: AutoContinue,
    EventType.AUTO_STOP: AutoStop,
    EventType.APPROVAL_REQUESTED: ApprovalRequested,
    EventType.APPROVAL_DECIDED: ApprovalDecided,
    EventType.RUN_FINISHED: RunFinished,
    EventType.ERROR: Error,
    EventType.PROCESS_STARTED: ProcessStarted,
    EventType.PROCESS_EXITED: ProcessExited,
    EventType.STATE_SET: StateSet,
    EventType.STATE_PATCHED: StatePatched,
}

__all__ = [
    "OMIT_IF_NONE",
    "PAYLOAD_MODELS",
    "ApprovalDecided",
    "ApprovalRequested",
    "AutoContinue",
    "AutoStop",
    "Breaker",
    "BreakerReset",
    "Calibration",
    "CallKind",
    "CallRef",
    "CompactResult",
    "CompactedMemory",
    "CompactionFailure",
    "Error",
    "FinalOutput",
    "HistoryPruned",
    "MemoryCompacted",
    "MemoryCompress",
    "MemoryItemsAppended",
    "MetadataUpdated",
    "ModelRequest",
    "ModelResponse",
    "Payload",
    "ProcessExited",
    "ProcessStarted",
    "ProjectionReport",
    "RunFinished",
    "RunLimits",
    "RunStarted",
    "SessionCreated",
    "SessionForked",
    "SessionRestored",
    "SessionResumed",
    "SessionSaved",
    "StatePatched",
    "StateSet",
    "StepEnd",
    "StepStart",
    "ToolCall",
    "ToolOutputReplaced",
    "ToolResult",
    "UserInput",
    "WindowChanged",
    "event_payload",
]
