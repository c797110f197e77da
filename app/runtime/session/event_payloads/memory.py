"""Payloads of the memory mutations: the events the projector folds into memory.

MEMORY_COMPRESS has four kinds, one model each, told apart by `kind` (docs/reference/events.md):
only `compact` rewrites memory; `compact_failed` and `breaker_reset` move the compaction
breaker; `projection` reports how one prompt was shaped and leaves memory alone.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from typing_extensions import TypedDict

from app.runtime.memory.items import tool_output_item
from app.runtime.session.event_payloads.base import Payload, event_payload
from app.runtime.session.events import EventType


@event_payload(EventType.USER_INPUT)
class UserInput(Payload):
    """The user's input to a run, added to memory as a user message item."""

    item: dict[str, Any]


@event_payload(EventType.MEMORY_ITEMS_APPENDED)
class MemoryItemsAppended(Payload):
    """Items added to memory: a model's reply and tool calls, or items a client appended."""

    items: list[dict[str, Any]]


@event_payload(EventType.TOOL_RESULT)
class ToolResult(Payload):
    """A tool call's output, added to memory; the call is no longer pending."""

    item: dict[str, Any]
    call_id: str
    is_error: bool

    @classmethod
    def answering(cls, call_id: str, output: str, *, is_error: bool) -> ToolResult:
        """The result whose memory item answers `call_id` with `output`."""
        return cls(item=tool_output_item(call_id, output), call_id=call_id, is_error=is_error)


@event_payload(EventType.TOOL_OUTPUT_REPLACED)
class ToolOutputReplaced(Payload):
    """The output of an answered call was replaced in memory (e.g. redacted)."""

    call_id: str
    output: str


class CompactResult(TypedDict):
    """What a compaction did: the numbers shown as a session's `last_compact`."""

    strategy: str
    trigger: str
    tokens_before: int
    tokens_after: int
    items_before: int
    items_after: int
    items_removed: int
    summary: str | None


class CompactedMemory(TypedDict):
    """Memory after a compaction, whole, so the fold installs it without re-running it."""

    items: list[dict[str, Any]]
    summary: str | None


class Breaker(TypedDict):
    """The automatic compaction's circuit breaker."""

    consecutive_failures: int
    open: bool


@event_payload(EventType.MEMORY_COMPRESS)
class MemoryCompacted(Payload):
    """Kind `compact`: a compaction rewrote memory; the breaker closes."""

    kind: Literal["compact"] = "compact"
    result: CompactResult
    memory: CompactedMemory


@event_payload(EventType.MEMORY_COMPRESS)
class CompactionFailure(Payload):
    """Kind `compact_failed`: a compaction failed; `breaker` is the breaker's new state."""

    kind: Literal["compact_failed"] = "compact_failed"
    error: str
    breaker: Breaker


@event_payload(EventType.MEMORY_COMPRESS)
class BreakerReset(Payload):
    """Kind `breaker_reset`: the compaction breaker was reset by request."""

    kind: Literal["breaker_reset"] = "breaker_reset"


@event_payload(EventType.MEMORY_COMPRESS)
class ProjectionReport(Payload):
    """Kind `projection`: what the context projection kept of memory for one prompt.

    Memory is unchanged; the run path records the report only when it dropped items.
    """

    kind: Literal["projection"] = "projection"
    budget: int | None
    tokens_before: int
    tokens_after: int
    items_kept: int
    items_dropped: int
    summary_kept: bool
    fits: bool


MemoryCompress = Annotated[
    MemoryCompacted | CompactionFailure | BreakerReset | ProjectionReport,
    Field(
        discriminator="kind",
        description=(
            "Memory was compacted (kind compact), a compaction failed (compact_failed), the "
            "breaker was reset (breaker_reset), or one prompt was shaped (projection)."
        ),
    ),
]


@event_payload(EventType.WINDOW_CHANGED)
class WindowChanged(Payload):
    """The memory window was set to `max_items` (null: no window); eviction is FIFO."""

    max_items: int | None
