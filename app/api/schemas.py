"""HTTP request and response models. Request bodies refuse unknown fields, so a client can
never set server-owned fields such as tenant_id, seq or version."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.runtime.agent import AgentSpec
from app.runtime.memory import MemoryItem

SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionCreate(_Request):
    session_id: str | None = Field(
        default=None, pattern=SESSION_ID_PATTERN, description="Client-chosen id; default a UUID."
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSpec = Field(default_factory=AgentSpec)
    binding: dict[str, Any] = Field(
        default_factory=dict, description='Where the session is bound, e.g. {"workspace": "a"}.'
    )
    max_items: int | None = Field(default=None, ge=1, le=100_000, description="Memory window.")


class SessionPatch(_Request):
    metadata: dict[str, Any] = Field(description="RFC 7386 merge patch; null deletes a key.")


class ItemsAppend(_Request):
    items: list[MemoryItem] = Field(min_length=1)
    expected_seq: int | None = Field(
        default=None, ge=0, description="Append only if the session's last seq is this (else 409)."
    )


class ResumeRequest(_Request):
    binding: dict[str, Any] | None = Field(
        default=None, description="Must equal the stored binding, else 409 binding_mismatch."
    )


class ForkRequest(_Request):
    at_seq: int | None = Field(default=None, ge=1, description="Default: the latest seq.")
    session_id: str | None = Field(default=None, pattern=SESSION_ID_PATTERN)
    metadata: dict[str, Any] | None = Field(default=None, description="Default: the parent's.")
    binding: dict[str, Any] | None = Field(
        default=None, description="Rebind the child explicitly; default: the parent's binding."
    )


class RestoreRequest(_Request):
    state: dict[str, Any] = Field(description="A recovery object, as GET .../state returns it.")


class MemoryRead(BaseModel):
    items: list[dict[str, Any]]
    summary: str | None


class EventRead(BaseModel):
    event_id: str
    session_id: str
    seq: int
    type: str
    run_id: str | None
    turn_id: str | None
    payload: dict[str, Any]
    created_at: datetime
    position: int


class EventList(BaseModel):
    data: list[EventRead]
    next_after_seq: int | None = Field(description="Pass as after_seq for the next page.")


class Counts(BaseModel):
    items: int
    messages: int
    function_calls: int
    function_call_outputs: int


class SessionSummary(BaseModel):
    """A session row, without its state (what listings return)."""

    session_id: str
    root_session_id: str
    parent_session_id: str | None
    forked_from_seq: int | None
    status: str
    metadata: dict[str, Any]
    agent: dict[str, Any]
    binding: dict[str, Any]
    last_seq: int
    version: int
    active_run_id: str | None
    created_at: datetime
    updated_at: datetime


class SessionRead(SessionSummary):
    """The display snapshot."""

    counts: Counts
    estimated_tokens: int
    has_summary: bool
    max_items: int | None
    last_compact: dict[str, Any] | None
    breaker: dict[str, Any]
    usage: dict[str, int]


class SessionList(BaseModel):
    data: list[SessionSummary]
    next_cursor: str | None


class AppendRead(BaseModel):
    session_id: str
    first_seq: int
    last_seq: int
    version: int
    events: list[EventRead]


class StateRead(BaseModel):
    """The recovery object: what restore accepts back."""

    format: int
    session_id: str
    seq: int
    version: int
    memory: MemoryRead
    max_items: int | None
    usage: dict[str, int]
    last_compact: dict[str, Any] | None
    breaker: dict[str, Any]


class SaveRead(BaseModel):
    session_id: str
    snapshot_seq: int
    version: int


class ProjectionRead(BaseModel):
    session_id: str
    seq: int
    memory: MemoryRead = Field(description="The fold of the whole ledger from seq 1.")
    equals_live: bool = Field(description="Whether the fold equals the live session memory.")


class HistoryItem(BaseModel):
    seq: int
    item: dict[str, Any]


class MemoryView(BaseModel):
    session_id: str
    seq: int
    items: list[dict[str, Any]]
    summary: str | None
    max_items: int | None
    history: list[HistoryItem] | None = Field(
        default=None, description="With full=true: every item ever added, from the ledger."
    )
    next_after_seq: int | None = None
