"""HTTP request and response models. Request bodies refuse unknown fields, so a client can
never set server-owned fields such as tenant_id, seq or version (their base, `RequestBody`,
is `app/api/http/inputs.py`'s)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.http.inputs import MAX_SEQ, SESSION_ID_PATTERN, RequestBody, TimeWithZone
from app.api.rest.event_models import EventRead, EventTypeName
from app.runtime.memory.items import ContentPart, MemoryItem
from app.runtime.runs.agent import AgentSpec


class SessionCreate(RequestBody):
    # An inline agent and a named one exclude each other (422 otherwise).
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["agent", "agent_name"],
                "properties": {"agent_name": {"type": "string"}},
            }
        }
    )

    session_id: str | None = Field(
        default=None, pattern=SESSION_ID_PATTERN, description="Client-chosen id; default a UUID."
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSpec = Field(default_factory=AgentSpec)
    agent_name: str | None = Field(
        default=None,
        max_length=64,
        description="Use the named agent blueprint (GET /v1/agents) instead of an inline agent.",
    )
    binding: dict[str, Any] = Field(
        default_factory=dict, description='Where the session is bound, e.g. {"workspace": "a"}.'
    )
    max_items: int | None = Field(default=None, ge=1, le=100_000, description="Memory window.")
    expires_at: TimeWithZone | None = Field(
        default=None,
        description="Delete the session at this time (its own retention; with a time zone).",
    )
    idle_ttl_seconds: int | None = Field(
        default=None,
        ge=60,
        le=2_000_000_000,  # the column is a 32-bit integer
        description="Delete the session when not updated for this long (over the tenant's "
        "retention policy).",
    )


class AgentRead(BaseModel):
    name: str
    description: str | None
    agent: AgentSpec


class AgentList(BaseModel):
    data: list[AgentRead]


class EventTypeRead(BaseModel):
    type: EventTypeName
    description: str = Field(description="What an event of this type records, in one line.")
    payload_schema: dict[str, Any] = Field(
        description="JSON Schema (2020-12) of the payload; it accepts every payload a ledger "
        "may hold, older shapes included."
    )


class EventTypeList(BaseModel):
    data: list[EventTypeRead]


class SessionPatch(RequestBody):
    metadata: dict[str, Any] | None = Field(
        default=None, description="RFC 7386 merge patch; null deletes a key."
    )
    max_items: int | None = Field(
        default=None, ge=1, le=100_000, description="Change the memory window (WINDOW_CHANGED)."
    )
    clear_window: bool = Field(default=False, description="Remove the memory window.")
    expires_at: TimeWithZone | None = Field(
        default=None,
        description="Delete the session at this time (its own retention; with a time zone); "
        "null clears it.",
    )
    idle_ttl_seconds: int | None = Field(
        default=None,
        ge=60,
        le=2_000_000_000,  # the column is a 32-bit integer
        description="Delete the session when not updated for this long (over the tenant's "
        "retention policy); null clears it.",
    )


class ItemsAppend(RequestBody):
    items: list[MemoryItem] = Field(min_length=1)
    expected_seq: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SEQ,
        description="Append only if the session's last seq is this (else 409).",
    )


class ResumeRequest(RequestBody):
    binding: dict[str, Any] | None = Field(
        default=None, description="Must equal the stored binding, else 409 binding_mismatch."
    )


class ForkRequest(RequestBody):
    # `rebind` moves the child to the `binding` given, so it needs one (422 otherwise).
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"rebind": {"const": False}}},
                {"required": ["binding"], "properties": {"binding": {"type": "object"}}},
            ]
        }
    )

    at_seq: int | None = Field(
        default=None, ge=1, le=MAX_SEQ, description="Default: the latest seq."
    )
    session_id: str | None = Field(default=None, pattern=SESSION_ID_PATTERN)
    metadata: dict[str, Any] | None = Field(default=None, description="Default: the parent's.")
    binding: dict[str, Any] | None = Field(
        default=None,
        description="Default: the parent's binding. A different one needs rebind=true, "
        "else 409 binding_mismatch.",
    )
    rebind: bool = Field(default=False, description="Bind the child to `binding` instead.")


class RestoreRequest(RequestBody):
    state: dict[str, Any] = Field(description="A recovery object, as GET .../state returns it.")


class JsonPatchOperation(BaseModel):
    """One operation of a JSON Patch (RFC 6902): `value` for add, replace and test; `from`
    for move and copy. Paths are JSON Pointers (RFC 6901)."""

    model_config = ConfigDict(populate_by_name=True)

    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str = Field(examples=["/todos/0/done"])
    value: Any = None
    from_: str | None = Field(default=None, alias="from")

    def to_json(self) -> dict[str, Any]:
        """The operation as sent: an explicit `"value": null` stays, an absent one stays out."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class MemoryRead(BaseModel):
    items: list[dict[str, Any]]
    summary: str | None


class EventList(BaseModel):
    data: list[EventRead]
    next_after_seq: int | None = Field(description="Pass as after_seq for the next page.")


class Counts(BaseModel):
    items: int
    messages: int
    function_calls: int
    function_call_outputs: int
    processes: int = Field(default=0, description="Background processes the session has had.")


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
    expires_at: datetime | None = Field(
        default=None, description="When the session will be deleted (its own retention)."
    )
    idle_ttl_seconds: int | None = Field(
        default=None, description="The session's own idle TTL, over its tenant's policy."
    )


class SessionRead(SessionSummary):
    """The display snapshot."""

    counts: Counts
    estimated_tokens: int
    has_summary: bool
    truncated: bool
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
    processes: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Process snapshots by process id (present once the session has had one).",
    )
    calibration: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Token-estimate calibration by <profile>/<model> (present once learnt).",
    )
    shared_state: dict[str, Any] = Field(
        default_factory=dict,
        description="The shared state (the object of GET .../shared-state); restore installs "
        "it when present (a recovery object without it keeps the session's).",
    )


class SaveRead(BaseModel):
    session_id: str
    snapshot_seq: int
    version: int


class ProjectionRead(BaseModel):
    session_id: str
    seq: int
    memory: MemoryRead = Field(
        description="The fold of the whole ledger from seq 1 (of a pruned ledger: from the"
        " snapshot kept at its HISTORY_PRUNED marker)."
    )
    equals_live: bool = Field(description="Whether the fold equals the live session memory.")


class HistoryItem(BaseModel):
    seq: int
    item: dict[str, Any]


class MemoryView(BaseModel):
    session_id: str
    seq: int
    truncated: bool = Field(
        description="Items were evicted or compacted away (the ledger has them)."
    )
    covers_seq: list[int] = Field(
        description="[first, last] seq whose items memory may still hold."
    )
    items: list[dict[str, Any]]
    summary: str | None
    max_items: int | None
    history: list[HistoryItem] | None = Field(
        default=None, description="With full=true: every item ever added, from the ledger."
    )
    next_after_seq: int | None = None


# --------------------------------------------------------------------------- runs


class ClientTool(RequestBody):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][\w.-]*$")
    description: str = Field(default="", max_length=4096)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class RunLimits(RequestBody):
    max_total_turns: int | None = Field(default=None, ge=1, le=1000)
    max_auto_followups: int | None = Field(default=None, ge=0, le=100)
    max_tool_calls: int | None = Field(default=None, ge=0, le=1000)
    max_wall_seconds: float | None = Field(default=None, gt=0, le=86_400)
    max_tokens: int | None = Field(default=None, ge=1)


RunMode = Literal["wait", "stream", "background"]


class RunCreate(RequestBody):
    input: str | list[ContentPart] | None = Field(
        default=None, description="The user's message; omit to continue without new input."
    )
    mode: RunMode = "wait"
    multitask: Literal["reject", "enqueue", "interrupt"] = Field(
        default="reject", description="When a run is already active: 409, wait in line, or stop it."
    )
    client_tools: list[ClientTool] = Field(default_factory=list, max_length=64)
    approval_required: list[str] = Field(default_factory=list, max_length=64)
    limits: RunLimits = Field(default_factory=RunLimits)
    on_tool_error: Literal["stop", "feed_back"] | None = None
    include_deltas: bool = Field(default=True, description="stream mode: send delta frames.")


class OneShotRunCreate(RunCreate):
    agent: AgentSpec = Field(default_factory=AgentSpec)
    keep: bool = Field(default=False, description="Keep the session afterwards.")


class PendingCall(BaseModel):
    call_id: str
    name: str | None
    arguments: str | None
    kind: str


class RunRead(BaseModel):
    run_id: str
    session_id: str
    status: str = Field(description="queued, running, finished, failed or interrupted")
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


class RunList(BaseModel):
    data: list[RunRead]


class ToolOutput(RequestBody):
    call_id: str = Field(min_length=1, max_length=128)
    output: str = Field(max_length=1_000_000)


class ToolOutputsRequest(RequestBody):
    outputs: list[ToolOutput] = Field(min_length=1, max_length=64)
    replace: bool = Field(default=False, description="Replace earlier outputs instead.")
    continue_run: bool = Field(
        default=True, alias="continue", description="Start a run that answers with the outputs."
    )
    mode: RunMode = "wait"


class ApprovalRequest(RequestBody):
    call_id: str = Field(min_length=1, max_length=128)
    decision: Literal["approve", "reject"]
    reason: str | None = Field(default=None, max_length=4096)
    continue_run: bool = Field(default=True, alias="continue")
    mode: RunMode = "wait"


class ContinueRead(BaseModel):
    session_id: str
    last_seq: int
    run: RunRead | None


class UsageRead(BaseModel):
    session_id: str
    usage: dict[str, int]
    runs: list[dict[str, Any]]


class CompactRequest(RequestBody):
    strategy: Literal["truncate", "summarize", "tool_results"] | None = Field(
        default=None, description="Default: the agent's compaction policy."
    )
    keep_last: int | None = Field(default=None, ge=1, le=10_000)
    tool_output_max_chars: int | None = Field(default=None, ge=16)
    reset_breaker: bool = Field(
        default=False,
        description="Close the auto-compaction breaker (alone, or before compacting).",
    )


class CompactRead(BaseModel):
    session_id: str
    seq: int
    result: dict[str, Any] | None
    breaker: dict[str, Any]
    estimated_tokens: int
    items: int


class EstimateRead(BaseModel):
    """The token estimate of memory, and what it rests on."""

    tokens: int = Field(description="The estimate the projector uses.")
    heuristic_tokens: int = Field(description="Four characters a token, plus framing.")
    basis: str = Field(description="calibrated (learnt from provider counts) or heuristic.")
    calibration_key: str = Field(description="<profile>/<model> the ratio belongs to.")
    ratio: float = Field(description="Provider tokens per heuristic token (1.0: none learnt).")
    samples: int = Field(description="Provider counts the ratio was learnt from.")


class ContextRead(BaseModel):
    session_id: str
    seq: int
    report: dict[str, Any]
    items: list[dict[str, Any]]
    summary: str | None
    estimate: EstimateRead


# ---------------------------------------------------------------------- processes


class ProcessCreate(RequestBody):
    command: str = Field(
        min_length=1,
        max_length=8192,
        description="One command line, split like a POSIX shell would but run without one; "
        "its program must be allowed by name.",
    )
    timeout_seconds: float | None = Field(
        default=None, gt=0, description="Kill it sooner than the server's max runtime."
    )
    stdin: str | None = Field(
        default=None, max_length=65_536, description="Written to stdin, which is then closed."
    )


class ProcessRead(BaseModel):
    process_id: str
    session_id: str
    pid: int | None = Field(description="The OS process id (on the replica that ran it).")
    command: list[str]
    workspace: str | None
    run_id: str | None
    status: Literal["running", "exited", "restored"] = Field(
        description="restored: it no longer runs here (service restarted, fork, import); "
        "its last known output is still readable."
    )
    exit_code: int | None
    reason: str | None = Field(
        description="Why it ended: exited, stopped, timeout, output_cap, service_stopped, forked."
    )
    output_bytes: int
    started_at: datetime | None
    finished_at: datetime | None
    live: bool = Field(description="It runs, or just ended, in this server process.")


class ProcessList(BaseModel):
    data: list[ProcessRead]


class ProcessLogs(BaseModel):
    process_id: str
    status: str
    offset: int = Field(description="Byte offset of `data` in the captured output.")
    next_offset: int = Field(description="Pass as offset to read on.")
    size: int = Field(description="Bytes captured so far.")
    eof: bool = Field(description="Everything is read and the process no longer runs.")
    data: str


class StdinWrite(RequestBody):
    data: str = Field(default="", max_length=65_536)
    eof: bool = Field(default=False, description="Close stdin after writing.")


class StdinRead(BaseModel):
    process_id: str
    bytes_written: int
    eof: bool


# --------------------------------------------------------------------- delegation


class DelegateCreate(RequestBody):
    input: str = Field(min_length=1, max_length=1_000_000, description="The child's input.")
    agent: AgentSpec | None = Field(default=None, description="Default: the caller's agent.")
    metadata: dict[str, Any] = Field(default_factory=dict)


class DelegateRead(BaseModel):
    session: SessionSummary = Field(description="The child session.")
    run: RunRead = Field(description="The child's run, ended (mode wait).")


class ToolRead(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]
    source: str = Field(description="builtin, or mcp:<server> for an MCP server's tool.")
    requires_approval: bool = Field(description="Every call waits for an approval.")


class McpServerRead(BaseModel):
    name: str
    transport: str = Field(description="stdio or streamable_http.")
    discovered: bool = Field(description="Its tools are known (it answered at least once).")
    tools: list[str]
    connected: bool
    last_error: str | None = Field(description="What failed last (no server output).")


class ToolList(BaseModel):
    data: list[ToolRead]
    mcp_servers: list[McpServerRead] = Field(default_factory=list)


class RetryRead(BaseModel):
    max_attempts: int
    initial_backoff_seconds: float
    max_backoff_seconds: float


class ModelProfileRead(BaseModel):
    """A model profile as configured: where its key comes from, never the key."""

    name: str
    kind: str = Field(description="openai, anthropic, gemini or scripted.")
    base_url: str | None
    default_model: str | None
    credential: str | None = Field(
        description="Where the key is read from: env:NAME or file:PATH (never the key)."
    )
    configured: bool
    missing: str | None = Field(description="The setting to fix when not configured.")
    timeout_seconds: float
    retry: RetryRead
    max_output_tokens: int | None
    context_window: int | None
    thinking_budget_tokens: int | None


class ModelProfileList(BaseModel):
    data: list[ModelProfileRead]
