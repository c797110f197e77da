"""Response models: what the service answers, as typed objects.

They mirror the service's OpenAPI components of the same names (a test compares their fields
with a live `/openapi.json`). Unknown fields are kept, not refused, so a newer server that adds
a field does not break an older client.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    """Base of every response model: fields the client does not know yet are kept."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Event(Model):
    """A committed ledger entry; `seq` is per session, gapless from 1."""

    event_id: str
    session_id: str
    seq: int
    type: str
    run_id: str | None
    turn_id: str | None
    payload: dict[str, Any]
    created_at: datetime
    position: int


class EventList(Model):
    data: list[Event]
    next_after_seq: int | None


class Counts(Model):
    items: int
    messages: int
    function_calls: int
    function_call_outputs: int
    processes: int = 0


class SessionSummary(Model):
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
    expires_at: datetime | None = None
    idle_ttl_seconds: int | None = None


class SessionRead(SessionSummary):
    """The display snapshot of a session."""

    counts: Counts
    estimated_tokens: int
    has_summary: bool
    truncated: bool
    max_items: int | None
    last_compact: dict[str, Any] | None
    breaker: dict[str, Any]
    usage: dict[str, int]


class SessionList(Model):
    data: list[SessionSummary]
    next_cursor: str | None


class AppendRead(Model):
    session_id: str
    first_seq: int
    last_seq: int
    version: int
    events: list[Event]


class MemoryRead(Model):
    items: list[dict[str, Any]]
    summary: str | None


class StateRead(Model):
    """The recovery object: what `restore` accepts back."""

    format: int
    session_id: str
    seq: int
    version: int
    memory: MemoryRead
    max_items: int | None
    usage: dict[str, int]
    last_compact: dict[str, Any] | None
    breaker: dict[str, Any]
    processes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    calibration: dict[str, dict[str, Any]] = Field(default_factory=dict)
    shared_state: dict[str, Any] = Field(default_factory=dict)


class SaveRead(Model):
    session_id: str
    snapshot_seq: int
    version: int


class ProjectionRead(Model):
    session_id: str
    seq: int
    memory: MemoryRead
    equals_live: bool


class HistoryItem(Model):
    seq: int
    item: dict[str, Any]


class MemoryView(Model):
    session_id: str
    seq: int
    truncated: bool
    covers_seq: list[int]
    items: list[dict[str, Any]]
    summary: str | None
    max_items: int | None
    history: list[HistoryItem] | None = None
    next_after_seq: int | None = None


class CompactRead(Model):
    session_id: str
    seq: int
    result: dict[str, Any] | None
    breaker: dict[str, Any]
    estimated_tokens: int
    items: int


class EstimateRead(Model):
    """The token estimate of memory, and what it rests on."""

    tokens: int
    heuristic_tokens: int
    basis: str  # calibrated or heuristic
    calibration_key: str
    ratio: float
    samples: int


class ContextRead(Model):
    session_id: str
    seq: int
    report: dict[str, Any]
    items: list[dict[str, Any]]
    summary: str | None
    estimate: EstimateRead


class PendingCall(Model):
    call_id: str
    name: str | None
    arguments: str | None
    kind: str


RunStatus = Literal["queued", "running", "finished", "failed", "interrupted"]


class RunRead(Model):
    run_id: str
    session_id: str
    status: str
    stop_reason: str | None
    output: str | None
    error: dict[str, Any] | None
    turns: int
    usage: dict[str, int]
    first_seq: int | None
    last_seq: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    pending: list[PendingCall] = Field(default_factory=list)


class RunList(Model):
    data: list[RunRead]


class ContinueRead(Model):
    """Answers written without a run continuing from them (`run` is then None)."""

    session_id: str
    last_seq: int
    run: RunRead | None


class RunUsage(Model):
    run_id: str
    usage: dict[str, int]
    turns: int


class UsageRead(Model):
    session_id: str
    usage: dict[str, int]
    runs: list[RunUsage]


class DelegateRead(Model):
    session: SessionSummary
    run: RunRead


class ProcessRead(Model):
    process_id: str
    session_id: str
    pid: int | None
    command: list[str]
    workspace: str | None
    run_id: str | None
    status: Literal["running", "exited", "restored"]
    exit_code: int | None
    reason: str | None
    output_bytes: int
    started_at: datetime | None
    finished_at: datetime | None
    live: bool


class ProcessList(Model):
    data: list[ProcessRead]


class ProcessLogs(Model):
    process_id: str
    status: str
    offset: int
    next_offset: int
    size: int
    eof: bool
    data: str


class StdinRead(Model):
    process_id: str
    bytes_written: int
    eof: bool


class ToolRead(Model):
    name: str
    description: str
    parameters: dict[str, Any]
    source: str  # builtin, or mcp:<server>
    requires_approval: bool


class McpServerRead(Model):
    name: str
    transport: str
    discovered: bool
    tools: list[str]
    connected: bool
    last_error: str | None


class ToolList(Model):
    data: list[ToolRead]
    mcp_servers: list[McpServerRead] = Field(default_factory=list)


class RetryRead(Model):
    max_attempts: int
    initial_backoff_seconds: float
    max_backoff_seconds: float


class ModelProfileRead(Model):
    """A model profile as configured: where its key comes from, never the key."""

    name: str
    kind: str
    base_url: str | None
    default_model: str | None
    credential: str | None  # env:NAME or file:PATH
    configured: bool
    missing: str | None  # the setting to fix when not configured
    timeout_seconds: float
    retry: RetryRead
    max_output_tokens: int | None
    context_window: int | None
    thinking_budget_tokens: int | None


class ModelProfileList(Model):
    data: list[ModelProfileRead]


class AgentSpec(Model):
    provider: str = "scripted"
    model: str | None = None
    instructions: str | None = None
    tools: list[str] = Field(default_factory=list)
    approval_required: list[str] = Field(default_factory=list)
    on_tool_error: str | None = None
    max_auto_followups: int | None = None
    max_total_turns: int | None = None
    max_tool_calls: int | None = None
    max_wall_seconds: float | None = None
    max_tokens: int | None = None
    compaction: dict[str, Any] | None = None
    max_input_tokens: int | None = None
    reserved_output_tokens: int | None = None


class AgentRead(Model):
    name: str
    description: str | None
    agent: AgentSpec


class AgentList(Model):
    data: list[AgentRead]


class EventTypeRead(Model):
    type: str
    description: str
    payload_schema: dict[str, Any]


class EventTypeList(Model):
    data: list[EventTypeRead]


class StreamTokenRead(Model):
    token: str
    expires_at: datetime
    session_id: str | None


class Problem(Model):
    """An RFC 9457 problem document, as every error answer carries."""

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    code: str


class WebhookRead(Model):
    """A webhook subscription and its state (`disabled_reason` says why it is off)."""

    webhook_id: str
    url: str
    event_types: list[str]
    session_id: str | None
    metadata_filter: dict[str, Any] | None
    description: str | None
    state: Literal["active", "disabled"]
    disabled_reason: str | None
    consecutive_failures: int
    last_success_at: datetime | None
    last_failure_at: datetime | None
    created_at: datetime
    updated_at: datetime


class WebhookCreated(WebhookRead):
    """The creating answer: the only one that shows the signing secret."""

    secret: str


class WebhookList(Model):
    data: list[WebhookRead]
    next_cursor: str | None


class DeliveryRead(Model):
    """One event's delivery to one subscription (`delivery_id` is the `webhook-id`)."""

    delivery_id: str
    webhook_id: str
    session_id: str
    seq: int
    event_type: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_error: str | None
    response_code: int | None
    delivered_at: datetime | None
    created_at: datetime


class DeliveryList(Model):
    data: list[DeliveryRead]
    next_cursor: str | None


class ScheduleRead(Model):
    """A schedule: it starts a run with `input` on a session (or a new session from the
    blueprint `agent_name`) at each tick of `cron` (in `timezone`) or `interval_seconds`."""

    schedule_id: str
    session_id: str | None
    agent_name: str | None
    input: Any  # required, and may be null
    cron: str | None
    timezone: str
    interval_seconds: int | None
    missed: str
    multitask: str
    status: str
    metadata: dict[str, Any]
    next_fire_at: datetime | None
    last_fired_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime


class ScheduleList(Model):
    data: list[ScheduleRead]
    next_cursor: str | None


class ScheduleFireRead(Model):
    """What one tick did: the run it started, or why none (`reason`)."""

    schedule_id: str
    tick_at: datetime
    trigger: str
    outcome: str
    reason: str | None
    ticks: int
    run_id: str | None
    session_id: str | None
    created_at: datetime


class ScheduleFireList(Model):
    data: list[ScheduleFireRead]
    next_cursor: str | None
